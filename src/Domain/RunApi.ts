import * as Schema from "effect/Schema"
import { eventStream } from "./EventStream.ts"
import { text } from "./Input.ts"
import { BadRequest, Conflict, NotFound, ServiceUnavailable, TokenBudgetSpent, TooManyRunningRuns } from "./Problems.ts"
import { PreferHeader, RunWaiting } from "./RunQueue.ts"

// What the routes of the runs tenants start and follow (executions, team
// runs) declare alike: one shape, whichever kind of run.

/**
 * A run's status: `pending` once accepted (and while it waits for a slot),
 * `running`, `waiting` while a tool call waits for a person's approval (not
 * final: back to `running` once decided), then final.
 */
export const RunStatus = Schema.Literals(["pending", "running", "waiting", "completed", "failed", "cancelled"])
export type RunStatus = typeof RunStatus.Type

/** The headers of a route that starts a run. */
export const startHeaders = {
  "idempotency-key": Schema.optionalKey(text(Schema.isMinLength(1), Schema.isMaxLength(200))),
  prefer: PreferHeader
}

/** What a route that starts a run answers besides its success, `notStarted` being its kind's 503. */
export const startErrors = <NotStarted extends Schema.Top>(notStarted: NotStarted) =>
  [NotFound, BadRequest, Conflict, ServiceUnavailable, TokenBudgetSpent, notStarted, TooManyRunningRuns] as const

/** The bounds of a run's `timeoutMs`, whatever its kind. */
export const minTimeoutMs = 1_000
export const maxTimeoutMs = 3_600_000

/** A run's `timeoutMs` as clients send it, described by `describe` given its range. */
export const runTimeoutMs = (describe: (range: string) => string) =>
  Schema.Int.check(Schema.isBetween({ minimum: minTimeoutMs, maximum: maxTimeoutMs })).annotate({
    description: describe(`${minTimeoutMs} to ${maxTimeoutMs}`)
  })

/** The last fields of a run as the routes show it: its tokens and times, and whether it waits for a slot. */
export const runTotals = {
  tokensUsed: Schema.Int,
  durationMs: Schema.NullOr(Schema.Int),
  createdAt: Schema.Date,
  completedAt: Schema.NullOr(Schema.Date),
  waiting: Schema.optionalKey(RunWaiting)
}

/**
 * A kind of run's event stream. Its events, in the order they can come, are
 * `<run>.running`, `<part>.started` and `<part>.completed` for each part (a
 * step, a turn), one final `<run>.completed`, `<run>.failed` or
 * `<run>.cancelled`, or a `stream.end` when the stream ends first. Each
 * carries some of: its `type`, what it is `about` (the part), when, the run's
 * status, the kind's own `fields`, and on a `stream.end` the `reason`:
 * `maxDuration` or the run's own timeout (`timeoutReason`).
 */
/** What `tool.called`, `tool.succeeded` and `tool.failed` carry (docs/tools.md#events). */
const toolEventFields = {
  callId: Schema.optionalKey(Schema.String).annotate({ description: "The model's id of the tool call." }),
  tool: Schema.optionalKey(Schema.String).annotate({ description: "The tool's name." }),
  arguments: Schema.optionalKey(Schema.Unknown).annotate({ description: "The call's arguments (`tool.called`)." }),
  attempt: Schema.optionalKey(Schema.Number).annotate({
    description: "1, or 2 when a crash interrupted the call and it is made again (`tool.called`)."
  }),
  result: Schema.optionalKey(Schema.NullOr(Schema.String)).annotate({
    description: "The result as the model saw it (`tool.succeeded`)."
  }),
  errorKind: Schema.optionalKey(Schema.NullOr(Schema.String)).annotate({
    description:
      "Why the call failed (`tool.failed`): invalid_arguments, refused, timeout, status, limit, unknown_tool, error."
  }),
  durationMs: Schema.optionalKey(Schema.Number)
} as const

export const runEventStream = <
  const Run extends string,
  const Part extends string,
  About extends Schema.Struct.Fields,
  Fields extends Schema.Struct.Fields,
  const Reason extends string
>(
  run: Run,
  part: Part,
  timeoutReason: Reason,
  data: { readonly about: About; readonly fields: Fields }
) => {
  const names = [
    `${run}.running`,
    `${part}.started`,
    "tool.called",
    "tool.succeeded",
    "tool.failed",
    "approval.requested",
    "approval.decided",
    "approval.expired",
    `${part}.completed`,
    `${run}.completed`,
    `${run}.failed`,
    `${run}.cancelled`,
    "stream.end"
  ] as const
  const carried = Schema.Struct({
    type: Schema.String,
    ...data.about,
    at: Schema.optionalKey(Schema.String),
    status: Schema.optionalKey(RunStatus),
    ...data.fields,
    ...toolEventFields,
    approvalId: Schema.optionalKey(Schema.String).annotate({
      description: "On `approval.*` events: the approval (`/api/approvals/{id}`) of the call `callId`."
    }),
    reason: Schema.optionalKey(Schema.Literals(["maxDuration", timeoutReason])).annotate({
      description: `Why a \`stream.end\` ended the stream before the ${run} finished.`
    })
  })
  return { names, events: eventStream(names, carried) } as const
}
