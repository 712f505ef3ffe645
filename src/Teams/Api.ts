import * as Schema from "effect/Schema"
import * as Model from "effect/schema/Model"
import * as HttpApiEndpoint from "effect/http-api/HttpApiEndpoint"
import * as HttpApiError from "effect/http-api/HttpApiError"
import * as HttpApiGroup from "effect/http-api/HttpApiGroup"
import * as HttpApiSchema from "effect/http-api/HttpApiSchema"
import * as OpenApi from "effect/http-api/OpenApi"
import { PageOf, PageQuery, pageQuery } from "../Domain/Page.ts"
import {
  ApiKeyAuth,
  ApiKeyHeaderAuth,
  keyOperation,
  SessionAuth,
  sessionCredential,
  SessionQuota
} from "../Auth/Api.ts"
import { operation } from "../Domain/ApiDocs.ts"
import { activeList, DefinitionStatus, Description, Name, parts } from "../Domain/Definition.ts"
import * as Entity from "../Domain/Entity.ts"
import { AgentId, TeamId } from "../Domain/Ids.ts"
import { Text, text } from "../Domain/Input.ts"
import { managementEndpoints } from "../Domain/Management.ts"
import { BadRequest, Conflict, NotFound, QuotaReached, TooManyStreams } from "../Domain/Problems.ts"
import { RunStatus, runEventStream, runTimeoutMs, runTotals, startErrors, startHeaders } from "../Domain/RunApi.ts"
import { ToolCallWithResult } from "../Orchestrations/Api.ts"
import { ApprovalOnExpiry, approvalTimeoutBounds } from "../Tools/Tool.ts"
import { ToolCallRecord } from "../Tools/ToolCall.ts"
import { webhookEndpoints, WebhookState, WebhookUrl } from "../Webhooks/Api.ts"

export const TeamStatus = DefinitionStatus
export type TeamStatus = DefinitionStatus

// One literal, not a one-member union: the OpenAPI document then says `enum: ["chat"]` without an `anyOf` around it.
export const TeamMode = Schema.Literal("chat")
export const TurnTaking = Schema.Literals(["round_robin", "leader"])
export type TurnTaking = typeof TurnTaking.Type

export const maxMembers = 10
export const maxRoleLength = 200
export const defaultMaxTurns = 12
export const maxMaxTurns = 50
export const defaultTokenBudget = 200_000
export const maxTokenBudget = 10_000_000
export const defaultTimeoutMs = 600_000

export { RunStatus }

export const StopReason = Schema.Literals(["done", "max_turns", "token_budget", "timeout", "error", "cancelled"])
export type StopReason = typeof StopReason.Type

// What is stored and returned: the shape only. The limits below apply to what clients send.
export const Member = Schema.Struct({
  agentId: Schema.String,
  role: Schema.String
})
export type Member = typeof Member.Type

export const MemberInput = Schema.Struct({
  agentId: AgentId.check(Schema.isMaxLength(200)),
  role: Schema.optionalKey(
    text(
      Schema.isMaxLength(maxRoleLength, { message: `Expected a role of at most ${maxRoleLength} characters` })
    ).annotate({ description: "Free text shown to the other members (what this member does in the room)." })
  )
})

const Members = parts(MemberInput, {
  name: "member",
  max: maxMembers,
  description: "Distinct agents of the tenant, in speaking order for `round_robin`."
})

const MaxTurns = Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: maxMaxTurns })).annotate({
  description:
    `Turns a run may take, 1 to ${maxMaxTurns} and at most the plan's (FREE_TEAM_MAX_TURNS...) (default ` +
    `${defaultMaxTurns}, or the plan's bound when lower); a closing turn follows at the limit.`
})
const TokenBudgetLimit = Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: maxTokenBudget })).annotate({
  description:
    `Model tokens a run may spend, 1 to ${maxTokenBudget} and at most the plan's (FREE_TEAM_TOKEN_BUDGET...) ` +
    `(default ${defaultTokenBudget}, or the plan's bound when lower).`
})
const TimeoutMs = runTimeoutMs(
  (range) =>
    `Milliseconds a run may take, ${range} and at most the plan's (FREE_TEAM_TIMEOUT...) ` +
    `(default ${defaultTimeoutMs}, or the plan's bound when lower).`
)
const LeaderAgentId = Schema.NullOr(AgentId.check(Schema.isMaxLength(200))).annotate({
  description:
    "The member who picks each next speaker and writes the final answer; required for `leader`, null otherwise."
})

/** Whether a person approves a run's final result before the room's webhook is sent (docs/approvals.md). */
export const ResultApproval = Schema.Struct({
  required: Schema.Boolean,
  timeoutMs: Schema.Int,
  onExpiry: ApprovalOnExpiry
})
export type ResultApproval = typeof ResultApproval.Type

/** Teams saved before the setting (and creates that leave it out) do not require it. */
export const defaultResultApproval: ResultApproval = {
  required: false,
  timeoutMs: approvalTimeoutBounds.default,
  onExpiry: "reject"
}

export const ResultApprovalInput = Schema.Struct({
  required: Schema.Boolean.annotate({
    description:
      "Whether a run's final result waits for a person's approval (an approval of `kind` `result`) before it " +
      "completes and the room's webhook is sent."
  }),
  timeoutMs: Schema.optionalKey(
    Schema.Int.check(
      Schema.isBetween({ minimum: approvalTimeoutBounds.minimum, maximum: approvalTimeoutBounds.maximum })
    ).annotate({
      description:
        `Milliseconds the result waits for a decision: ${approvalTimeoutBounds.minimum} to ` +
        `${approvalTimeoutBounds.maximum} (default ${approvalTimeoutBounds.default}, a day). Not counted against ` +
        "the run's `timeoutMs`."
    })
  ),
  onExpiry: Schema.optionalKey(
    ApprovalOnExpiry.annotate({
      description: 'What a result nobody decided in time becomes: "reject" (default: the run fails) or "approve".'
    })
  )
}).annotate({
  description:
    "Whether a person approves each run's final result first; the fields left out keep their value (on create, " +
    "the defaults). Left out on create: not required."
})
export type ResultApprovalInput = typeof ResultApprovalInput.Type

export const Room = Schema.Struct({
  ...WebhookState.fields,
  signingSecret: Schema.optionalKey(
    Schema.String.annotate({
      description: "Only in the response that set the webhook URL where there was none: shown once."
    })
  )
})
export type Room = typeof Room.Type

export const RoomInput = Schema.Struct({
  outputWebhookUrl: Schema.optionalKey(Schema.NullOr(WebhookUrl)),
  webhookEnabled: Schema.optionalKey(Schema.Boolean)
})
export type RoomInput = typeof RoomInput.Type

/**
 * A team: its row, its JSON with its room, and what a client sends to create
 * (`Team.jsonCreate`) or update it (`Team.jsonUpdate`). The room (its
 * webhook) is the Webhooks service's: no column of the table. Left out on
 * create, the limits are the defaults held to the plan's bounds, and the
 * other fields as documented (the service decides them, Teams.ts).
 */
export class Team extends Model.Class<Team>("Team")({
  id: Entity.id(TeamId),
  name: Entity.required(Schema.String, Name),
  description: Entity.optional(Schema.String, Description),
  mode: Entity.optional(TeamMode),
  status: Entity.optional(TeamStatus),
  members: Entity.required(Schema.Array(Member), Members),
  turnTaking: Entity.optional(TurnTaking),
  leaderAgentId: Entity.optional(Schema.NullOr(Schema.String), LeaderAgentId),
  maxTurns: Entity.optional(Schema.Int, MaxTurns),
  tokenBudget: Entity.optional(Schema.Int, TokenBudgetLimit),
  timeoutMs: Entity.optional(Schema.Int, TimeoutMs),
  resultApproval: Entity.optional(ResultApproval, ResultApprovalInput),
  room: Entity.attached(Room, RoomInput),
  createdAt: Entity.generated(Schema.Date),
  updatedAt: Entity.generated(Schema.Date)
}) {}

/** A team as the routes show it: with its room. */
export type TeamView = typeof Team.json.Type
export type CreateTeam = typeof Team.jsonCreate.Type
export type UpdateTeam = typeof Team.jsonUpdate.Type

export const TeamList = PageOf(Team.json)

// ---------------------------------------------------------------------------
// Runs
// ---------------------------------------------------------------------------

export const RunRequest = Schema.Struct({
  mission: text(Schema.isMinLength(1, { message: "Expected a non-empty mission" })).annotate({
    description: "What the team is to do; at most MAX_MESSAGE_CHARS characters."
  })
})
export type RunRequest = typeof RunRequest.Type

export const RunHandle = Schema.Struct({
  runId: Schema.String,
  status: RunStatus.annotate({
    description: "`pending` for a new run; an Idempotency-Key replay shows the run's status now."
  }),
  mode: TeamMode
})

export const TranscriptEntry = Schema.Struct({
  index: Schema.Int,
  agentId: Schema.String,
  role: Schema.String,
  content: Schema.String,
  tokens: Schema.Int,
  createdAt: Schema.Date,
  toolCalls: Schema.optionalKey(
    Schema.Array(ToolCallRecord).annotate({
      description: "The tool calls the turn made, in order; left out when it made none."
    })
  )
})

export const Transcript = PageOf(TranscriptEntry)

/** Whether a string can be a transcript index: a transcript is paged by it. */
export const isTranscriptIndex = (key: string) => /^(0|[1-9]\d{0,8})$/.test(key)
export const TranscriptPageQuery = pageQuery(isTranscriptIndex)

/** The query of a team's run list: a page, optionally of the runs in one status. */
export const RunsQuery = {
  ...PageQuery,
  status: Schema.optionalKey(
    RunStatus.annotate({
      description: "Only the runs in this status (`waiting`: running and waiting for an approval)."
    })
  )
}

export const TeamRun = Schema.Struct({
  runId: Schema.String,
  teamId: Schema.String,
  mode: TeamMode,
  status: RunStatus,
  mission: Schema.String,
  result: Schema.NullOr(Schema.String),
  error: Schema.NullOr(Schema.String),
  stopReason: Schema.NullOr(StopReason),
  turns: Schema.Int,
  ...runTotals
})
export type TeamRun = typeof TeamRun.Type

export const TeamRunWithTranscript = Schema.Struct({ ...TeamRun.fields, transcript: Transcript })

export const TeamRunList = PageOf(TeamRun)

/**
 * The run is stored and will run, but its start could not be confirmed in
 * time: poll it by `runId` rather than running the team again.
 */
export class RunNotStarted extends HttpApiError.Problem<RunNotStarted>()(
  "RunNotStarted",
  {
    type: "urn:agent-host:problem:team-run-not-started",
    status: 503,
    title: "Service Unavailable"
  },
  {
    runId: Schema.String
  }
) {}

/** A team run's events: its turns' (`turn.started`, their tool calls', `turn.completed`) between its own. */
const teamRunEvents = runEventStream("run", "turn", "runTimeout", {
  about: { turn: Schema.optionalKey(Schema.NullOr(Schema.Int)) },
  fields: {
    index: Schema.optionalKey(Schema.Int),
    agentId: Schema.optionalKey(Schema.String),
    role: Schema.optionalKey(Schema.String),
    content: Schema.optionalKey(Schema.String),
    tokens: Schema.optionalKey(Schema.Number),
    closing: Schema.optionalKey(Schema.Boolean).annotate({
      description: "A closing turn asked for the final answer at a limit."
    }),
    result: Schema.optionalKey(Schema.String),
    error: Schema.optionalKey(Schema.NullOr(Schema.String)),
    stopReason: Schema.optionalKey(Schema.NullOr(StopReason)),
    turns: Schema.optionalKey(Schema.Int),
    tokensUsed: Schema.optionalKey(Schema.Number)
  }
})

/** The events of a team run's stream, in the order they can come. */
export const runEventNames = teamRunEvents.names
export const RunEvents = teamRunEvents.events

const runParams = { id: TeamId, runId: Text }
const toolCallParams = { ...runParams, turn: Text, callId: Text }

// The documentation of the run routes, which the management and the key-authenticated groups share.
const runDocs = {
  run: {
    summary: "Run a team",
    description:
      "Starts a run of the team on `mission`; it runs in the background and its result goes to the " +
      "room's output webhook. An `Idempotency-Key` replayed within 24 hours answers with the same run. When the " +
      "tenant has as many executions and team runs running as its plan allows (FREE_MAX_RUNNING_RUNS...), the run " +
      "waits its turn, `pending` with a `waiting` field, unless the request says `Prefer: wait=0`. The team's " +
      "`maxTurns`, `tokenBudget` and `timeoutMs` are held to the plan's bounds.",
    errors:
      "400 on an empty or too long (MAX_MESSAGE_CHARS) mission, 404 when the team is not the tenant's or is " +
      "inactive, 409 when the `Idempotency-Key` was used with another request, 429 when the day's model tokens " +
      "are spent or, with `Prefer: wait=0`, when the tenant's runs are at the plan's cap (with Retry-After), 503 " +
      "when the run is stored but its start is not confirmed in time (it will run: poll it by `runId`)."
  },
  runs: {
    summary: "List a team's runs",
    description:
      "The team's runs, newest first, a page at a time (`limit`, `cursor`), optionally only those in one " +
      "`status` (`waiting` being a running run waiting for an approval, `running` one that is not).",
    errors: "400 on a bad `limit`, `cursor` or `status`, 404 when the team is not the tenant's."
  },
  getRun: {
    summary: "Get a team run",
    description:
      "The run (status, result or error, why it stopped, turns, tokens), with the first page of its " +
      "transcript (`transcript.nextCursor` pages on through `/transcript`); a turn that called tools lists " +
      "them in `toolCalls`.",
    errors: "404 when the team or the run is not the tenant's."
  },
  transcript: {
    summary: "Page through a run's transcript",
    description:
      "The run's transcript, oldest turn first, a page at a time (`limit`, `cursor`); a turn that called " +
      "tools lists them in `toolCalls`.",
    errors: "400 on a bad `limit` or `cursor`, 404 when the team or the run is not the tenant's."
  },
  toolCall: {
    summary: "Get one tool call of a turn with its whole result",
    description:
      "A call the turn (`turn`: its transcript `index`) made, as its transcript entry's `toolCalls` shows it, with " +
      "`fullResult`: the whole result, of which the model saw a cut when `resultCut` (the tool's `maxOutputBytes`); " +
      "null for a call that failed.",
    errors: "404 when the team or the run is not the tenant's, or the run's turn made no such call."
  },
  cancel: {
    summary: "Cancel a team run",
    description:
      "Marks the run cancelled and interrupts the turn in flight: its model call is aborted, on " +
      "whichever node runs it. A run waiting for a slot leaves the queue.",
    errors: "404 when the team or the run is not the tenant's, 409 when the run has already finished."
  },
  events: {
    summary: "Follow a team run's events",
    description:
      "The run's progress as server-sent events: `run.running`, `turn.started`, the turn's tool calls " +
      "(`tool.called`, then `tool.succeeded` or `tool.failed`, with the turn's `index`), `turn.completed` (with " +
      "the speaker, its content and tokens), then one final `run.completed`, `run.failed` or `run.cancelled`, " +
      "after which the stream ends. A client that connects late first receives what already happened. Each " +
      "event's `id` can be sent back as `Last-Event-ID` to resume. A stream open for EVENT_STREAM_MAX_DURATION, " +
      "or past the run's own timeout, ends with a `stream.end` event (`reason`: `maxDuration` or `runTimeout`) " +
      "instead.",
    errors: "404 when the team or the run is not the tenant's, 429 beyond MAX_EVENT_STREAMS_PER_TENANT open streams."
  }
} as const

// What starting a run takes and may answer, in every group.
const runSpec = {
  params: { id: TeamId },
  headers: startHeaders,
  payload: RunRequest,
  error: startErrors(RunNotStarted)
} as const

/** `{ success: true, data }`: the bodies of the key-authenticated team routes. */
export const envelope = <S extends Schema.Top>(schema: S) =>
  Schema.Struct({ success: Schema.Literal(true), data: schema })

const ListEnvelope = Schema.Struct({ success: Schema.Literal(true), ...TeamList.fields })

const room = webhookEndpoints({
  name: "team",
  id: TeamId,
  secretPath: "/:id/room/secret",
  credential: sessionCredential,
  docs: {
    deliveries: {
      summary: "List the room's webhook deliveries",
      description: "Every attempt to deliver the room's events, newest first, a page at a time (`limit`, `cursor`)."
    },
    redeliver: { summary: "Redeliver a room event" },
    rotateSecret: {
      summary: "Rotate the room's signing secret",
      description:
        "A new signing secret for the room's webhook, shown once. The previous one also signs " +
        "deliveries until `previousSecretExpiresAt` (WEBHOOK_ROTATION_OVERLAP).",
      errors: "404 when the team is not the tenant's, 409 when its room has no webhook URL."
    }
  }
})

export class TeamsApi extends HttpApiGroup.make("teams")
  .add(
    ...managementEndpoints({
      name: "team",
      model: Team,
      credential: sessionCredential,
      errors: { create: [BadRequest, QuotaReached], update: [NotFound, BadRequest, QuotaReached] },
      docs: {
        list: {
          description:
            "The tenant's teams, active and inactive, with their members and rooms, a page at a time " +
            "(`limit`, `cursor`)."
        },
        create: {
          description:
            "Creates a team: member agents with roles, the turn-taking (`round_robin`, or `leader` with a " +
            "leader among the members), the limits of a run, and optionally the room's webhook (the answer then " +
            "carries its signing secret, once).",
          errors:
            "400 on invalid fields, naming each: members that are not distinct agents of the tenant, a leader " +
            "missing, not a member or given for `round_robin`, a refused webhook URL, a `maxTurns`, `tokenBudget` or " +
            "`timeoutMs` past the plan's bound (FREE_TEAM_MAX_TURNS...). 429 when the tenant has as " +
            "many teams (MAX_TEAMS) or webhook URLs (MAX_WEBHOOK_ENDPOINTS) as its plan allows."
        },
        get: { description: "The team, with its members and room." },
        update: {
          description:
            "Changes the fields sent and checks the team as a whole again. Runs already started keep the " +
            "team they started with.",
          errors:
            "400 on invalid fields (as for create), 404 when the team is not the tenant's, 429 when a first " +
            "webhook URL for the room would pass the plan's MAX_WEBHOOK_ENDPOINTS."
        },
        remove: { description: "Deletes the team and its room's webhook." }
      }
    }),
    room.rotateSecret,
    room.deliveries,
    room.redeliver,
    HttpApiEndpoint.post("run", "/:id/run", { ...runSpec, success: RunHandle.pipe(HttpApiSchema.status(202)) })
      .middleware(SessionQuota)
      .annotateMerge(
        operation({
          ...runDocs.run,
          credential: sessionCredential,
          errors: `${runDocs.run.errors} Counted against the plan's daily requests as the API-key route is: 429 past them.`
        })
      ),
    HttpApiEndpoint.get("runs", "/:id/runs", {
      params: { id: TeamId },
      query: RunsQuery,
      success: TeamRunList,
      error: [NotFound, BadRequest]
    }).annotateMerge(operation({ ...runDocs.runs, credential: sessionCredential })),
    HttpApiEndpoint.get("getRun", "/:id/runs/:runId", {
      params: runParams,
      success: TeamRunWithTranscript,
      error: NotFound
    }).annotateMerge(operation({ ...runDocs.getRun, credential: sessionCredential })),
    HttpApiEndpoint.get("transcript", "/:id/runs/:runId/transcript", {
      params: runParams,
      query: TranscriptPageQuery,
      success: Transcript,
      error: [NotFound, BadRequest]
    }).annotateMerge(operation({ ...runDocs.transcript, credential: sessionCredential })),
    HttpApiEndpoint.get("toolCall", "/:id/runs/:runId/turns/:turn/tool-calls/:callId", {
      params: toolCallParams,
      success: ToolCallWithResult,
      error: NotFound
    }).annotateMerge(operation({ ...runDocs.toolCall, credential: sessionCredential })),
    HttpApiEndpoint.post("cancel", "/:id/runs/:runId/cancel", {
      params: runParams,
      success: TeamRun.pipe(HttpApiSchema.status(202)),
      error: [NotFound, Conflict]
    }).annotateMerge(operation({ ...runDocs.cancel, credential: sessionCredential })),
    HttpApiEndpoint.get("events", "/:id/runs/:runId/events", {
      params: runParams,
      success: RunEvents,
      error: [NotFound, TooManyStreams]
    }).annotateMerge(operation({ ...runDocs.events, credential: sessionCredential }))
  )
  .middleware(SessionAuth)
  .prefix("/api/teams")
  .annotateMerge(
    OpenApi.annotations({
      title: "Teams (management)",
      description:
        "Define teams of agents that work a mission together in a room, manage the room's signed " +
        "webhook, and follow the teams' runs."
    })
  ) {}

/** The key-authenticated team routes; /api/v1 and /api/public answer the same bodies. */
const keyGroup = <const Name extends string>(name: Name, via: "bearer" | "header") =>
  HttpApiGroup.make(name).add(
    activeList(ListEnvelope, (doc) => keyOperation("teams", via, doc), {
      summary: "List active teams",
      description: "The tenant's active teams, a page at a time (`limit`, `cursor`)."
    }),
    HttpApiEndpoint.post("run", "/:id/run", {
      ...runSpec,
      success: envelope(RunHandle).pipe(HttpApiSchema.status(202))
    }).annotateMerge(keyOperation("teams", via, runDocs.run)),
    HttpApiEndpoint.get("runs", "/:id/runs", {
      params: { id: TeamId },
      query: RunsQuery,
      success: envelope(TeamRunList),
      error: [NotFound, BadRequest]
    }).annotateMerge(keyOperation("teams", via, runDocs.runs)),
    HttpApiEndpoint.get("getRun", "/:id/runs/:runId", {
      params: runParams,
      success: envelope(TeamRunWithTranscript),
      error: NotFound
    }).annotateMerge(keyOperation("teams", via, runDocs.getRun)),
    HttpApiEndpoint.get("transcript", "/:id/runs/:runId/transcript", {
      params: runParams,
      query: TranscriptPageQuery,
      success: envelope(Transcript),
      error: [NotFound, BadRequest]
    }).annotateMerge(keyOperation("teams", via, runDocs.transcript)),
    HttpApiEndpoint.get("toolCall", "/:id/runs/:runId/turns/:turn/tool-calls/:callId", {
      params: toolCallParams,
      success: envelope(ToolCallWithResult),
      error: NotFound
    }).annotateMerge(keyOperation("teams", via, runDocs.toolCall)),
    HttpApiEndpoint.post("cancel", "/:id/runs/:runId/cancel", {
      params: runParams,
      success: envelope(TeamRun).pipe(HttpApiSchema.status(202)),
      error: [NotFound, Conflict]
    }).annotateMerge(keyOperation("teams", via, runDocs.cancel)),
    HttpApiEndpoint.get("events", "/:id/runs/:runId/events", {
      params: runParams,
      success: RunEvents,
      error: [NotFound, TooManyStreams]
    }).annotateMerge(keyOperation("teams", via, runDocs.events))
  )

export class TeamsV1Api extends keyGroup("v1Teams", "bearer")
  .middleware(ApiKeyAuth)
  .prefix("/api/v1/teams")
  .annotateMerge(
    OpenApi.annotations({
      title: "Teams (API key, bearer)",
      description:
        "Run the tenant's active teams and follow their runs, with an API key as a bearer token. " +
        "Bodies are `{ success: true, data }`."
    })
  ) {}

export class TeamsPublicApi extends keyGroup("publicTeams", "header")
  .middleware(ApiKeyHeaderAuth)
  .prefix("/api/public/teams")
  .annotateMerge(
    OpenApi.annotations({
      title: "Teams (API key, X-API-Key)",
      description: "The same routes and bodies as /api/v1/teams, with the API key in the `X-API-Key` header."
    })
  ) {}
