import * as Schema from "effect/Schema"
import * as HttpApiEndpoint from "effect/http-api/HttpApiEndpoint"
import * as HttpApiGroup from "effect/http-api/HttpApiGroup"
import * as HttpApiSchema from "effect/http-api/HttpApiSchema"
import * as OpenApi from "effect/http-api/OpenApi"
import { SessionAuth, sessionCredential } from "../Auth/Api.ts"
import { operation } from "../Domain/ApiDocs.ts"
import { OrchestrationId, TeamId } from "../Domain/Ids.ts"
import { text } from "../Domain/Input.ts"
import { PageOf, PageQuery } from "../Domain/Page.ts"
import { BadRequest, NotFound, QuotaReached } from "../Domain/Problems.ts"
import { ExecuteRequest } from "../Orchestrations/Api.ts"
import { RunRequest } from "../Teams/Api.ts"

export const ScheduleId = text(Schema.isMaxLength(100)).pipe(Schema.brand("ScheduleId"))
export type ScheduleId = typeof ScheduleId.Type

/** How many schedules a tenant may have. */
export const maxSchedulesPerTenant = 100

/** The shortest interval: one run a second. */
export const minIntervalSeconds = 1

/** The longest interval: a year. */
export const maxIntervalSeconds = 366 * 86_400

export const OrchestrationTarget = Schema.Struct({
  orchestrationId: OrchestrationId,
  input: ExecuteRequest.fields.input,
  variables: ExecuteRequest.fields.variables
}).annotate({ description: "An execution of the orchestration with this input and these variables." })

export const TeamTarget = Schema.Struct({
  teamId: TeamId,
  mission: RunRequest.fields.mission
}).annotate({ description: "A run of the team on this mission." })

export const Target = Schema.Union([OrchestrationTarget, TeamTarget])
export type Target = typeof Target.Type

export const ScheduleStatus = Schema.Literals(["active", "paused"])
export type ScheduleStatus = typeof ScheduleStatus.Type

export const MissedPolicy = Schema.Literals(["skip", "run_once"]).annotate({
  description:
    "What becomes of the slots that passed while no node of the service was running: `skip` runs none of them " +
    "(the schedule goes on from its next slot), `run_once` runs one run for all of them, then goes on."
})
export type MissedPolicy = typeof MissedPolicy.Type

const cron = text(Schema.isMaxLength(200)).annotate({
  description:
    "A 5-field cron expression (minute hour day-of-month month weekday), read in `timezone`. Exactly one of " +
    "`cron` and `intervalSeconds`."
})
const intervalSeconds = Schema.Int.check(
  Schema.isBetween({ minimum: minIntervalSeconds, maximum: maxIntervalSeconds })
).annotate({
  description: `Seconds between runs (${minIntervalSeconds} to ${maxIntervalSeconds}), counted from when the schedule was created or last resumed.`
})
const timezone = text(Schema.isMaxLength(100)).annotate({
  description: "An IANA time zone (`Europe/Paris`), in which `cron` is read. Default `UTC`."
})
const name = text(Schema.isMaxLength(200)).annotate({ description: "A name to tell schedules apart." })

export const CreateSchedule = Schema.Struct({
  name: Schema.optionalKey(name),
  target: Target,
  cron: Schema.optionalKey(cron),
  intervalSeconds: Schema.optionalKey(intervalSeconds),
  timezone: Schema.optionalKey(timezone),
  status: Schema.optionalKey(ScheduleStatus),
  missedPolicy: Schema.optionalKey(MissedPolicy)
})
export type CreateSchedule = typeof CreateSchedule.Type

export const UpdateSchedule = Schema.Struct({
  name: Schema.optionalKey(name),
  target: Schema.optionalKey(Target),
  cron: Schema.optionalKey(cron),
  intervalSeconds: Schema.optionalKey(intervalSeconds),
  timezone: Schema.optionalKey(timezone),
  missedPolicy: Schema.optionalKey(MissedPolicy)
})
export type UpdateSchedule = typeof UpdateSchedule.Type

export const Schedule = Schema.Struct({
  id: Schema.String,
  name: Schema.String,
  target: Target,
  cron: Schema.NullOr(Schema.String),
  intervalSeconds: Schema.NullOr(Schema.Int),
  timezone: Schema.String,
  status: ScheduleStatus,
  missedPolicy: MissedPolicy,
  nextRunAt: Schema.NullOr(Schema.String).annotate({ description: "The next slot (ISO 8601); null while paused." }),
  nextRuns: Schema.Array(Schema.String).annotate({
    description: "The next five slots (ISO 8601); none while paused."
  }),
  lastRunAt: Schema.NullOr(Schema.String).annotate({ description: "The last slot reached, whatever became of it." }),
  lastRunId: Schema.NullOr(Schema.String).annotate({
    description: "The execution or team run the last started slot started."
  }),
  createdAt: Schema.String,
  updatedAt: Schema.String
})
export type Schedule = typeof Schedule.Type

export const ScheduleRunStatus = Schema.Literals(["claimed", "started", "refused", "failed", "skipped"]).annotate({
  description:
    "`claimed`: the slot is taken and its run is being started; `started`: its run started (`runId`); " +
    "`refused`: over the plan's daily requests or token budget (`reason`); `failed`: the run could not be " +
    "started (`reason`: the target is inactive, a variable is missing); `skipped`: slots missed during an " +
    "outage under the `skip` policy."
})

export const ScheduleRun = Schema.Struct({
  id: Schema.String,
  scheduleId: Schema.String,
  slotAt: Schema.String,
  status: ScheduleRunStatus,
  runKind: Schema.NullOr(Schema.Literals(["execution", "team_run"])),
  runId: Schema.NullOr(Schema.String),
  reason: Schema.NullOr(Schema.String),
  missedSlots: Schema.Int.annotate({
    description: "How many slots missed during an outage this row stands for (0 for an ordinary slot)."
  }),
  createdAt: Schema.String
})
export type ScheduleRun = typeof ScheduleRun.Type

const params = { id: ScheduleId }
const notFound = "404 when the schedule is not the tenant's."
const checked =
  "400 naming the field: `cron` when it is not a 5-field cron expression, `timezone` when it is not an IANA " +
  "time zone, `intervalSeconds` out of bounds, both or neither of `cron` and `intervalSeconds`, the target's " +
  "orchestration or team when it is not the tenant's or not active, a variable the orchestration uses and " +
  "the target does not give."

const list = HttpApiEndpoint.get("list", "/", {
  query: PageQuery,
  success: PageOf(Schedule),
  error: BadRequest
}).annotateMerge(
  operation({
    summary: "List schedules",
    description:
      "The tenant's schedules, newest first, a page at a time (`limit`, `cursor`), each with its next five slots.",
    credential: sessionCredential,
    errors: "400 on a bad `limit` or `cursor`."
  })
)

const create = HttpApiEndpoint.post("create", "/", {
  payload: CreateSchedule,
  success: Schedule.pipe(HttpApiSchema.status(201)),
  error: [BadRequest, QuotaReached]
}).annotateMerge(
  operation({
    summary: "Create a schedule",
    description:
      "Runs an orchestration (`target.orchestrationId`, `input`, `variables`) or a team (`target.teamId`, " +
      "`mission`) on a 5-field `cron` in `timezone`, or every `intervalSeconds`. Each slot starts one run, once " +
      "across all nodes, counted against the plan's daily requests like an API call; a slot over the limit is " +
      "recorded as `refused` with its reason. `missedPolicy` decides what becomes of slots missed while the " +
      "whole service was down.",
    credential: sessionCredential,
    errors: `${checked} 429 when the tenant has ${maxSchedulesPerTenant} schedules.`
  })
)

const get = HttpApiEndpoint.get("get", "/:id", { params, success: Schedule, error: NotFound }).annotateMerge(
  operation({
    summary: "Read a schedule",
    description: "The schedule, with its next five slots and its last run.",
    credential: sessionCredential,
    errors: notFound
  })
)

const update = HttpApiEndpoint.put("update", "/:id", {
  params,
  payload: UpdateSchedule,
  success: Schedule,
  error: [BadRequest, NotFound]
}).annotateMerge(
  operation({
    summary: "Change a schedule",
    description:
      "Changes the fields sent. Sending `cron` or `intervalSeconds` replaces the timing: the next slot is " +
      "computed again from now.",
    credential: sessionCredential,
    errors: `${checked} ${notFound}`
  })
)

const remove = HttpApiEndpoint.delete("remove", "/:id", {
  params,
  success: HttpApiSchema.NoContent,
  error: NotFound
}).annotateMerge(
  operation({
    summary: "Delete a schedule",
    description: "Deletes the schedule and its record of slots. Runs it started are left as they are.",
    credential: sessionCredential,
    errors: notFound
  })
)

const pause = HttpApiEndpoint.post("pause", "/:id/pause", { params, success: Schedule, error: NotFound }).annotateMerge(
  operation({
    summary: "Pause a schedule",
    description: "Stops the schedule's slots until it is resumed. Pausing a paused schedule changes nothing.",
    credential: sessionCredential,
    errors: notFound
  })
)

const resume = HttpApiEndpoint.post("resume", "/:id/resume", {
  params,
  success: Schedule,
  error: NotFound
}).annotateMerge(
  operation({
    summary: "Resume a schedule",
    description:
      "Starts the schedule's slots again from now: the slots that passed while it was paused are not run. " +
      "Resuming an active schedule changes nothing.",
    credential: sessionCredential,
    errors: notFound
  })
)

const runs = HttpApiEndpoint.get("runs", "/:id/runs", {
  params,
  query: PageQuery,
  success: PageOf(ScheduleRun),
  error: [BadRequest, NotFound]
}).annotateMerge(
  operation({
    summary: "List a schedule's slots",
    description:
      "What became of each slot the schedule reached, newest first: the run it started, or why none was " +
      "(refused over the plan's limit, failed to start, skipped after an outage).",
    credential: sessionCredential,
    errors: `400 on a bad \`limit\` or \`cursor\`. ${notFound}`
  })
)

export class SchedulesApi extends HttpApiGroup.make("schedules")
  .add(list, create, get, update, remove, pause, resume, runs)
  .middleware(SessionAuth)
  .prefix("/api/schedules")
  .annotateMerge(
    OpenApi.annotations({
      title: "Schedules",
      description:
        "Run an orchestration or a team on a cron expression or an interval, once per slot across the cluster."
    })
  ) {}
