import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import * as Schedule from "effect/Schedule"
import { Quota } from "../Billing/Quota.ts"
import { AppConfig } from "../Config.ts"
import { decodeCursor, encodeCursor } from "../Domain/Cursor.ts"
import { isId, type OrchestrationId, type TenantId } from "../Domain/Ids.ts"
import { defaultPageSize, type PageRequest } from "../Domain/Page.ts"
import { invalidFields, NotFound, QuotaReached } from "../Domain/Problems.ts"
import * as Traced from "../Observability/Traced.ts"
import { Executions } from "../Orchestrations/Executions.ts"
import { Orchestrations, variablesUsed } from "../Orchestrations/Orchestrations.ts"
import { TeamRuns } from "../Teams/TeamRuns.ts"
import { Teams } from "../Teams/Teams.ts"
import {
  type CreateSchedule,
  maxSchedulesPerTenant,
  type Schedule as ScheduleView,
  type ScheduleRun,
  type Target,
  type UpdateSchedule
} from "./Api.ts"
import {
  type Plan,
  type PlannedSlot,
  type ScheduleFields,
  type ScheduleRow,
  SchedulesRepo,
  type SlotRow
} from "./Repo.ts"
import { isTimeZone, nextSlot, nextSlots, parseCron, slotsBetween, type Timing } from "./Timing.ts"

/** How often every node looks for due schedules. */
const tickInterval = "1 second"

/**
 * A clock stamped by no node for this long means the whole service was down:
 * the slots of that gap are missed and their schedules' `missedPolicy` decides.
 * Every node stamps it each second, so only a full outage (or a database
 * stalled this long) leaves such a gap.
 */
export const outageSeconds = 5

/** A slot claimed this long ago and not started (its node died in between) is started again by any node. */
const staleClaimSeconds = 20

/** Slots recorded per schedule and tick at most; a schedule further behind catches up on the next ticks. */
const slotsPerTick = 50

const iso = (at: Date | number) => new Date(at).toISOString()

/** The timing of a stored schedule (its cron was checked when it was stored). */
export const timingOf = (row: Pick<ScheduleRow, "cron" | "intervalSeconds" | "timezone" | "anchorAt">): Timing =>
  row.cron !== null
    ? { _tag: "cron", cron: Result.getOrThrow(parseCron(row.cron, row.timezone)) }
    : { _tag: "interval", anchorMs: row.anchorAt.getTime(), stepMs: row.intervalSeconds! * 1000 }

/**
 * The slots of a due schedule, from its next slot up to `now`: those before
 * `resumedAt` fell during an outage and become one row (a run under
 * `run_once`, a record of the skip under `skip`); the others are each claimed.
 */
export const planSlots = (schedule: ScheduleRow, now: Date, resumedAt: Date): Plan => {
  const timing = timingOf(schedule)
  const slots: Array<PlannedSlot> = []
  let from = schedule.nextRunAt.getTime()
  const missed = slotsBetween(timing, from, Math.min(now.getTime(), resumedAt.getTime() - 1), 0)
  if (missed.total > 0 && missed.last !== undefined) {
    const runOnce = schedule.missedPolicy === "run_once"
    const span = `${missed.total} slot${missed.total === 1 ? "" : "s"} from ${iso(from)} to ${iso(missed.last)}`
    slots.push({
      slotAt: new Date(missed.last),
      status: runOnce ? "claimed" : "skipped",
      missedSlots: missed.total,
      reason: runOnce
        ? `${span} passed while the service was down; one run stands for them (missedPolicy run_once)`
        : `${span} passed while the service was down and were skipped (missedPolicy skip)`
    })
    from = nextSlot(timing, missed.last)
  }
  const due = slotsBetween(timing, from, now.getTime(), slotsPerTick)
  for (const at of due.slots) slots.push({ slotAt: new Date(at), status: "claimed", missedSlots: 0, reason: null })
  // Behind by more than a tick's share: the next tick goes on from the first slot not recorded.
  const nextRunAt =
    due.total > due.slots.length ? nextSlot(timing, due.slots[due.slots.length - 1]!) : nextSlot(timing, now.getTime())
  return { slots, nextRunAt: new Date(nextRunAt) }
}

type OrchestrationTarget = Extract<Target, { readonly orchestrationId: unknown }>

const isOrchestrationTarget = (target: Target): target is OrchestrationTarget => "orchestrationId" in target

/** Tenant-scoped schedules, their record of slots, and the ticker that starts their runs. */
export class Schedules extends Context.Service<Schedules>()("agent-host/Schedules", {
  make: Effect.gen(function* () {
    const repo = yield* SchedulesRepo
    const executions = yield* Executions
    const teamRuns = yield* TeamRuns
    const orchestrations = yield* Orchestrations
    const teams = yield* Teams
    const quota = yield* Quota
    const config = yield* AppConfig
    // Starts are forked here: one waiting on the cluster (up to CLUSTER_CALL_TIMEOUT) never holds up the ticks.
    const scope = yield* Effect.scope

    const view = (row: ScheduleRow): ScheduleView => {
      const target: Target =
        row.orchestrationId !== null
          ? {
              orchestrationId: row.orchestrationId as OrchestrationId,
              input: row.input ?? "",
              ...(row.variables === null ? {} : { variables: row.variables })
            }
          : { teamId: row.teamId! as never, mission: row.mission ?? "" }
      const active = row.status === "active"
      const timing = timingOf(row)
      const next = row.nextRunAt.getTime()
      return {
        id: row.id,
        name: row.name,
        target,
        cron: row.cron,
        intervalSeconds: row.intervalSeconds,
        timezone: row.timezone,
        status: row.status,
        missedPolicy: row.missedPolicy,
        nextRunAt: active ? iso(next) : null,
        nextRuns: active ? [iso(next), ...nextSlots(timing, next, 4).map(iso)] : [],
        lastRunAt: row.lastRunAt === null ? null : iso(row.lastRunAt),
        lastRunId: row.lastRunId,
        createdAt: iso(row.createdAt),
        updatedAt: iso(row.updatedAt)
      }
    }

    const slotView = (row: SlotRow): ScheduleRun => ({
      id: row.id,
      scheduleId: row.scheduleId,
      slotAt: iso(row.slotAt),
      status: row.status,
      runKind: row.runKind,
      runId: row.runId,
      reason: row.reason,
      missedSlots: row.missedSlots,
      createdAt: iso(row.createdAt)
    })

    const find = (tenantId: TenantId, id: string) =>
      Effect.flatMap(repo.get(tenantId, id), (row) =>
        Option.isNone(row) ? Effect.fail(new NotFound({ detail: `No schedule ${id}` })) : Effect.succeed(row.value)
      )

    /**
     * The fields to store, checked: one of `cron` and `intervalSeconds`, the
     * time zone, the cron in it, and the target (the tenant's, active, given
     * every variable it uses). A 400 names every bad field.
     */
    const checked = Effect.fnUntraced(function* (
      tenantId: TenantId,
      given: {
        readonly name: string
        readonly target: Target
        readonly cron: string | null
        readonly intervalSeconds: number | null
        readonly timezone: string
        readonly missedPolicy: "skip" | "run_once"
      },
      anchorAt: Date
    ) {
      const issues: Array<{ path: Array<string>; message: string }> = []
      if ((given.cron === null) === (given.intervalSeconds === null)) {
        issues.push({ path: ["cron"], message: "Expected exactly one of cron and intervalSeconds" })
      }
      const zoneOk = isTimeZone(given.timezone)
      if (!zoneOk)
        issues.push({ path: ["timezone"], message: "Expected an IANA time zone, such as Europe/Paris or UTC" })
      if (given.cron !== null && zoneOk) {
        const parsed = parseCron(given.cron, given.timezone)
        if (Result.isFailure(parsed)) issues.push({ path: ["cron"], message: parsed.failure })
      }
      const target = given.target
      if (isOrchestrationTarget(target)) {
        const orchestration = yield* Effect.option(orchestrations.get(tenantId, target.orchestrationId))
        if (Option.isNone(orchestration) || orchestration.value.status !== "active") {
          issues.push({
            path: ["target", "orchestrationId"],
            message: "Expected an active orchestration of the tenant"
          })
        } else {
          const variables = target.variables ?? {}
          for (const name of variablesUsed(orchestration.value.steps)) {
            if (!Object.hasOwn(variables, name))
              issues.push({ path: ["target", "variables", name], message: "Used by the orchestration's prompts" })
          }
        }
      } else if (Option.isNone(yield* Effect.option(teams.active(tenantId, target.teamId)))) {
        issues.push({ path: ["target", "teamId"], message: "Expected an active team of the tenant" })
      }
      if (issues.length > 0) return yield* invalidFields(issues)
      const fields = {
        name: given.name,
        orchestrationId: isOrchestrationTarget(target) ? target.orchestrationId : null,
        input: isOrchestrationTarget(target) ? target.input : null,
        variables: isOrchestrationTarget(target) ? (target.variables ?? null) : null,
        teamId: isOrchestrationTarget(target) ? null : target.teamId,
        mission: isOrchestrationTarget(target) ? null : target.mission,
        cron: given.cron,
        intervalSeconds: given.intervalSeconds,
        timezone: given.timezone,
        missedPolicy: given.missedPolicy,
        anchorAt
      }
      return { ...fields, nextRunAt: new Date(nextSlot(timingOf(fields), anchorAt.getTime())) } satisfies ScheduleFields
    })

    // Whole seconds: an interval's slots fall on them.
    const anchorNow = () => new Date(Math.floor(Date.now() / 1000) * 1000)

    const create = Traced.fn("Schedules.create")(function* (tenantId: TenantId, payload: CreateSchedule) {
      const fields = yield* checked(
        tenantId,
        {
          name: payload.name ?? "",
          target: payload.target,
          cron: payload.cron ?? null,
          intervalSeconds: payload.intervalSeconds ?? null,
          timezone: payload.timezone ?? "UTC",
          missedPolicy: payload.missedPolicy ?? "skip"
        },
        anchorNow()
      )
      const row = yield* repo.insert(tenantId, payload.status ?? "active", fields, maxSchedulesPerTenant)
      if (Option.isNone(row)) {
        return yield* new QuotaReached({
          detail: `A tenant may have ${maxSchedulesPerTenant} schedules; delete some first.`,
          quota: "schedules",
          setting: "none",
          plan: "any",
          limit: maxSchedulesPerTenant,
          used: maxSchedulesPerTenant,
          requested: 1
        })
      }
      return view(row.value)
    })

    const get = Traced.fn("Schedules.get")(function* (tenantId: TenantId, id: string) {
      return view(yield* find(tenantId, id))
    })

    const list = Traced.fn("Schedules.list")(function* (tenantId: TenantId, query: PageRequest) {
      const before = yield* decodeCursor(query.cursor, isId)
      const page = yield* repo.page(tenantId, before, query.limit ?? defaultPageSize)
      return {
        data: page.rows.map(view),
        total: page.total,
        nextCursor: page.more ? encodeCursor(page.rows[page.rows.length - 1]!.id) : null
      }
    })

    const update = Traced.fn("Schedules.update")(function* (tenantId: TenantId, id: string, payload: UpdateSchedule) {
      const row = yield* find(tenantId, id)
      const current = view(row)
      const retimed = payload.cron !== undefined || payload.intervalSeconds !== undefined
      const timingChanged = retimed || (payload.timezone !== undefined && payload.timezone !== row.timezone)
      const fields = yield* checked(
        tenantId,
        {
          name: payload.name ?? row.name,
          target: payload.target ?? current.target,
          // Sending one of the two replaces the other.
          cron: retimed ? (payload.cron ?? null) : row.cron,
          intervalSeconds: retimed ? (payload.intervalSeconds ?? null) : row.intervalSeconds,
          timezone: payload.timezone ?? row.timezone,
          missedPolicy: payload.missedPolicy ?? row.missedPolicy
        },
        timingChanged ? anchorNow() : row.anchorAt
      )
      const stored = yield* repo.update(
        tenantId,
        id,
        timingChanged ? fields : { ...fields, anchorAt: row.anchorAt, nextRunAt: row.nextRunAt }
      )
      if (Option.isNone(stored)) return yield* new NotFound({ detail: `No schedule ${id}` })
      return view(stored.value)
    })

    const remove = Traced.fn("Schedules.remove")(function* (tenantId: TenantId, id: string) {
      if (!(yield* repo.remove(tenantId, id))) return yield* new NotFound({ detail: `No schedule ${id}` })
    })

    const pause = Traced.fn("Schedules.pause")(function* (tenantId: TenantId, id: string) {
      const changed = yield* repo.setStatus(tenantId, id, "paused", undefined)
      return view(Option.isSome(changed) ? changed.value : yield* find(tenantId, id))
    })

    // Resumed from now: the slots of the pause are not run. An interval counts from the resume.
    const resume = Traced.fn("Schedules.resume")(function* (tenantId: TenantId, id: string) {
      const row = yield* find(tenantId, id)
      if (row.status === "active") return view(row)
      const anchorAt = row.cron === null ? anchorNow() : row.anchorAt
      const nextRunAt = new Date(nextSlot(timingOf({ ...row, anchorAt }), Date.now()))
      const changed = yield* repo.setStatus(tenantId, id, "active", { anchorAt, nextRunAt })
      return view(Option.isSome(changed) ? changed.value : yield* find(tenantId, id))
    })

    const runs = Traced.fn("Schedules.runs")(function* (tenantId: TenantId, id: string, query: PageRequest) {
      yield* find(tenantId, id)
      const before = yield* decodeCursor(query.cursor, isId)
      const page = yield* repo.slots(tenantId, id, before, query.limit ?? defaultPageSize)
      return {
        data: page.rows.map(slotView),
        total: page.total,
        nextCursor: page.more ? encodeCursor(page.rows[page.rows.length - 1]!.id) : null
      }
    })

    // ---------------------------------------------------------------------
    // Starting the runs of slots
    // ---------------------------------------------------------------------

    /**
     * Starts a claimed slot's run, once: counted against the plan's daily
     * requests first (as an API call is; a refusal is recorded with its
     * reason), then started through the same service as the execute and
     * team-run routes, with an Idempotency-Key made of the slot. A node that
     * died between the claim and the start leaves the slot claimed; whoever
     * takes it again starts it with the same key, which answers the run
     * already started, if any, rather than a second one.
     */
    const fire = (slot: SlotRow, schedule: ScheduleRow) =>
      Effect.gen(function* () {
        if (!slot.counted && config.enforceDailyLimits) {
          const refused = yield* quota.consume(schedule.tenantId).pipe(
            Effect.as(undefined),
            Effect.catchTag("TooManyRequests", (problem) => Effect.succeed(problem.detail ?? "Over the daily limit"))
          )
          if (refused !== undefined) return yield* repo.finish(slot, { status: "refused", reason: refused })
          yield* repo.markCounted(slot.id)
        }
        const headers = { "idempotency-key": `schedule:${schedule.id}:${iso(slot.slotAt)}` }
        const start: Effect.Effect<
          { readonly runKind: "execution" | "team_run"; readonly runId: string },
          { readonly _tag: string; readonly detail?: string | undefined }
        > =
          schedule.orchestrationId !== null
            ? executions
                .start(schedule.tenantId, schedule.orchestrationId as OrchestrationId, {
                  payload: {
                    input: schedule.input ?? "",
                    ...(schedule.variables === null ? {} : { variables: schedule.variables })
                  },
                  headers
                })
                .pipe(
                  Effect.map((started) => ({ runKind: "execution" as const, runId: started.executionId })),
                  Effect.catchTag("ExecutionNotStarted", (stored) =>
                    Effect.succeed({ runKind: "execution" as const, runId: stored.executionId })
                  )
                )
            : teamRuns
                .start(schedule.tenantId, schedule.teamId!, { payload: { mission: schedule.mission ?? "" }, headers })
                .pipe(
                  Effect.map((started) => ({ runKind: "team_run" as const, runId: started.runId })),
                  Effect.catchTag("RunNotStarted", (stored) =>
                    Effect.succeed({ runKind: "team_run" as const, runId: stored.runId })
                  )
                )
        const outcome = yield* start.pipe(
          Effect.map((started) => ({ status: "started" as const, ...started })),
          Effect.catch((problem) =>
            Effect.succeed({
              // Over the plan (tokens, requests, running runs): refused; anything else: the run cannot start.
              status:
                problem._tag === "TokenBudgetSpent" ||
                problem._tag === "TooManyRequests" ||
                problem._tag === "TooManyRunningRuns"
                  ? ("refused" as const)
                  : ("failed" as const),
              reason: problem.detail ?? problem._tag
            })
          )
        )
        yield* repo.finish(slot, outcome)
      }).pipe(
        Effect.catchCause((cause) =>
          // Left claimed: taken again once stale.
          Effect.logWarning("A scheduled run could not be started; it will be tried again", cause).pipe(
            Effect.annotateLogs({ scheduleId: schedule.id, slotAt: iso(slot.slotAt) })
          )
        )
      )

    let ticks = 0
    /** One tick: stamps the cluster's clock, claims the slots that have come, starts their runs. */
    const tick = Effect.gen(function* () {
      const { resumedAt } = yield* repo.tick(outageSeconds)
      if (ticks++ % 5 === 0) {
        const stale = yield* repo.reclaimStale(staleClaimSeconds, 50)
        yield* Effect.forEach(stale, ({ slot, schedule }) => Effect.forkIn(fire(slot, schedule), scope), {
          discard: true
        })
      }
      for (let round = 0; round < 10; round++) {
        const claimed = yield* repo.claimDue(50, (schedule, now) => planSlots(schedule, now, resumedAt))
        yield* Effect.forEach(claimed, ({ slot, schedule }) => Effect.forkIn(fire(slot, schedule), scope), {
          discard: true
        })
        if (claimed.length === 0) break
      }
    })

    return { create, get, list, update, remove, pause, resume, runs, tick } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make).pipe(
    Layer.provide([
      SchedulesRepo.layer,
      Executions.layer,
      TeamRuns.layer,
      Orchestrations.layer,
      Teams.layer,
      Quota.layer
    ])
  )

  /**
   * Every node ticks each second: a slot is claimed by whichever inserts its
   * row first (unique per schedule and slot), so slots keep their time while
   * any node is up, with no hand-over to wait for when one dies.
   */
  static readonly ticker = Layer.effectDiscard(
    Effect.gen(function* () {
      const schedules = yield* Schedules
      // A database away for a while fails every tick: the first failure is logged, then one a minute.
      let failures = 0
      yield* schedules.tick.pipe(
        Effect.tap(() => Effect.sync(() => (failures = 0))),
        Effect.catchCause((cause) =>
          failures++ % 60 === 0 ? Effect.logWarning("Schedules: tick failed", cause) : Effect.void
        ),
        Effect.repeat(Schedule.spaced(tickInterval)),
        Effect.forkScoped
      )
    })
  )
}
