import * as Cron from "effect/Cron"
import * as Result from "effect/Result"

// When a schedule's slots fall: a 5-field cron expression read in an IANA
// time zone, or a fixed interval counted from an anchor (the schedule's
// creation, or its last resume or change of timing). Pure, so the routes, the
// ticker and the tests compute the same slots.

export type Timing =
  | { readonly _tag: "cron"; readonly cron: Cron.Cron }
  | { readonly _tag: "interval"; readonly anchorMs: number; readonly stepMs: number }

/** Whether `zone` is an IANA time zone name (`Europe/Paris`, `UTC`); offsets such as `+02:00` are not. */
export const isTimeZone = (zone: string): boolean => {
  if (!/^[A-Za-z][A-Za-z0-9_+\-/]*$/.test(zone)) return false
  try {
    new Intl.DateTimeFormat("en-US", { timeZone: zone })
    return true
  } catch {
    return false
  }
}

/** A 5-field cron expression in `zone`, or why not. */
export const parseCron = (expression: string, zone: string): Result.Result<Cron.Cron, string> => {
  const fields = expression
    .trim()
    .split(/\s+/)
    .filter((field) => field !== "")
  if (fields.length !== 5)
    return Result.fail(`Expected 5 fields (minute hour day-of-month month weekday), got ${fields.length}`)
  return Result.mapError(Cron.parse(fields.join(" "), zone), (error) => `Expected a cron expression: ${error.message}`)
}

/** The first slot strictly after `afterMs`. */
export const nextSlot = (timing: Timing, afterMs: number): number => {
  if (timing._tag === "interval") {
    const steps = Math.floor((afterMs - timing.anchorMs) / timing.stepMs) + 1
    return timing.anchorMs + Math.max(steps, 1) * timing.stepMs
  }
  return Cron.next(timing.cron, new Date(afterMs)).getTime()
}

/** The `count` slots after `afterMs`. */
export const nextSlots = (timing: Timing, afterMs: number, count: number): Array<number> => {
  const slots: Array<number> = []
  let at = afterMs
  for (let i = 0; i < count; i++) {
    at = nextSlot(timing, at)
    slots.push(at)
  }
  return slots
}

/**
 * The slots from `fromMs` (a slot itself) to `untilMs` included: the first
 * `limit` of them, how many there are in all and the last (counted without
 * listing them for an interval; for a cron, up to `countLimit`).
 */
export const slotsBetween = (
  timing: Timing,
  fromMs: number,
  untilMs: number,
  limit: number,
  countLimit = 100_000
): { readonly slots: ReadonlyArray<number>; readonly total: number; readonly last: number | undefined } => {
  if (fromMs > untilMs) return { slots: [], total: 0, last: undefined }
  if (timing._tag === "interval") {
    const total = Math.floor((untilMs - fromMs) / timing.stepMs) + 1
    const slots = Array.from({ length: Math.min(total, limit) }, (_, i) => fromMs + i * timing.stepMs)
    return { slots, total, last: fromMs + (total - 1) * timing.stepMs }
  }
  const slots: Array<number> = []
  let total = 0
  let last: number | undefined
  for (let at = fromMs; at <= untilMs && total < countLimit; at = nextSlot(timing, at)) {
    if (slots.length < limit) slots.push(at)
    last = at
    total++
  }
  return { slots, total, last }
}
