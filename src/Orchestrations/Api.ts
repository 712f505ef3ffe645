import type * as Context from "effect/Context"
import * as Schema from "effect/Schema"
import * as Model from "effect/schema/Model"
import * as Struct from "effect/Struct"
import * as HttpApiEndpoint from "effect/http-api/HttpApiEndpoint"
import * as HttpApiError from "effect/http-api/HttpApiError"
import * as HttpApiGroup from "effect/http-api/HttpApiGroup"
import * as HttpApiSchema from "effect/http-api/HttpApiSchema"
import * as OpenApi from "effect/http-api/OpenApi"
import { ToolCallRecord } from "../Tools/ToolCall.ts"
import { ResponseFormat, ResponseFormatInput } from "../Tools/ResponseFormat.ts"
import { ApiKeyAuth, keyOperation, SessionAuth, sessionCredential, SessionQuota } from "../Auth/Api.ts"
import { operation, type OperationDoc } from "../Domain/ApiDocs.ts"
import { activeList, DefinitionStatus, Description, Name, parts } from "../Domain/Definition.ts"
import * as Entity from "../Domain/Entity.ts"
import { AgentId, OrchestrationId } from "../Domain/Ids.ts"
import { boundedArray, Text, text, textRecord } from "../Domain/Input.ts"
import { managementEndpoints } from "../Domain/Management.ts"
import { PageOf, PageQuery } from "../Domain/Page.ts"
import { BadRequest, Conflict, NotFound, QuotaReached, TooManyStreams } from "../Domain/Problems.ts"
import { RunStatus, runEventStream, runTimeoutMs, runTotals, startErrors, startHeaders } from "../Domain/RunApi.ts"
import { webhookEndpoints, WebhookState, WebhookUrl } from "../Webhooks/Api.ts"

export const OrchestrationStatus = DefinitionStatus
export type OrchestrationStatus = DefinitionStatus

export const maxSteps = 50
export const maxPromptLength = 32_000
export const defaultTimeoutMs = 300_000

/** Step ids and variable names: what may follow `steps.` and `variables.` in a template. */
export const namePattern = /^[A-Za-z0-9_-]{1,64}$/

/**
 * Names a plain object already has (`__proto__`, `constructor`, `toString`...)
 * and `prototype`: as keys of a run's outputs or of stored JSON they would
 * read or replace what objects inherit, so no step may take them.
 */
export const reservedStepIds: ReadonlySet<string> = new Set([
  ...Object.getOwnPropertyNames(Object.prototype),
  "prototype"
])

export const StepId = text(
  Schema.isPattern(namePattern, { message: "Expected 1 to 64 letters, digits, `_` or `-`" }),
  Schema.makeFilter<string>(
    (value) => !reservedStepIds.has(value) || `\`${value}\` is a reserved name: choose another step id`,
    { expected: "a step id other than `__proto__`, `constructor`, `prototype` or another name objects inherit" }
  )
)

// What is stored and returned: the shape only. The limits below apply to what clients send.
export const Step = Schema.Struct({
  id: Schema.String,
  agentId: AgentId,
  prompt: Schema.String,
  dependsOn: Schema.optionalKey(Schema.Array(Schema.String)),
  toolIds: Schema.optionalKey(Schema.Array(Schema.String)),
  responseFormat: Schema.optionalKey(ResponseFormat)
})
export type Step = typeof Step.Type

export const StepInput = Schema.Struct({
  id: StepId,
  agentId: AgentId.check(Schema.isMaxLength(200)),
  prompt: text(
    Schema.isMinLength(1, { message: "Expected a non-empty prompt" }),
    Schema.isMaxLength(maxPromptLength, { message: `Expected a prompt of at most ${maxPromptLength} characters` })
  ).annotate({
    description:
      "A template over `{{input}}`, `{{variables.NAME}}`, `{{steps.STEP_ID.output}}` and " +
      "`{{steps.STEP_ID.output.FIELD.FIELD...}}` (a field of a JSON output), where STEP_ID is a step this one " +
      "depends on, directly or through other steps."
  }),
  dependsOn: Schema.optionalKey(
    boundedArray(Text, {
      max: maxSteps,
      description:
        "Ids of the steps whose outputs this step waits for. Steps with no pending dependencies run in parallel."
    })
  ),
  toolIds: Schema.optionalKey(
    boundedArray(text(Schema.isMinLength(1), Schema.isMaxLength(64)), {
      max: 32,
      description: "The step's tools: some of its agent's `toolIds` ([] for none). Left out: all of the agent's tools."
    })
  ),
  responseFormat: Schema.optionalKey(
    ResponseFormatInput.annotate({
      description:
        "The step's reply must be JSON matching this schema; it wins over its agent's `responseFormat`. Later " +
        "steps can use its fields as `{{steps.STEP_ID.output.FIELD}}` (docs/orchestrations.md)."
    })
  )
})

export const Steps = parts(StepInput, {
  name: "step",
  max: maxSteps,
  description: "The output of an execution is the output of the last step of this list."
})

const TimeoutMs = runTimeoutMs((range) => `Milliseconds an execution may run, ${range} (default ${defaultTimeoutMs}).`)

/**
 * An orchestration: its row, its JSON with its webhook, and what a client
 * sends to create (`Orchestration.jsonCreate`) or update it
 * (`Orchestration.jsonUpdate`). The webhook, where the events of finished
 * executions go (`execution.completed`, `execution.failed`,
 * `execution.cancelled`), is the Webhooks service's: its fields are no columns.
 */
export class Orchestration extends Model.Class<Orchestration>("Orchestration")({
  id: Entity.id(OrchestrationId),
  name: Entity.required(Schema.String, Name),
  description: Entity.withDefault(Schema.String, "", Description),
  status: Entity.withDefault(OrchestrationStatus, "active"),
  steps: Entity.required(Schema.Array(Step), Steps),
  timeoutMs: Entity.withDefault(Schema.Int, defaultTimeoutMs, TimeoutMs),
  createdAt: Entity.generated(Schema.Date),
  updatedAt: Entity.generated(Schema.Date),
  outputWebhookUrl: Entity.attached(
    WebhookState.fields.outputWebhookUrl,
    Schema.NullOr(WebhookUrl).annotate({
      description: "Where the signed events of finished executions are sent; null removes the webhook."
    })
  ),
  webhookEnabled: Entity.attached(
    WebhookState.fields.webhookEnabled,
    Schema.Boolean.annotate({
      description:
        "Turns the webhook on or off (on by default once a URL is set); turning it on again re-enables a disabled one."
    })
  ),
  webhookDisabledReason: Entity.answered(WebhookState.fields.webhookDisabledReason),
  signingSecret: Entity.answered(
    Schema.optionalKey(
      Schema.String.annotate({
        description: "The webhook's signing secret (`whsec_...`), only in the answer that set a first webhook URL."
      })
    )
  )
}) {}

/** An orchestration as the management routes show it: with its webhook, and, in the one answer that made a new signing secret, that secret. */
export type OrchestrationView = typeof Orchestration.json.Type
export type CreateOrchestration = typeof Orchestration.jsonCreate.Type
export type UpdateOrchestration = typeof Orchestration.jsonUpdate.Type

/**
 * An orchestration as the key-authenticated API shows it. The reference uses
 * only its id; its steps (prompts and agent ids) stay on the management routes.
 */
export const V1Orchestration = Orchestration.json.mapFields(
  Struct.pick(["id", "name", "description", "status", "createdAt"])
)

export const V1OrchestrationList = PageOf(V1Orchestration)

// ---------------------------------------------------------------------------
// Executions
// ---------------------------------------------------------------------------

export const ExecutionStatus = RunStatus
export type ExecutionStatus = RunStatus

export const ExecuteRequest = Schema.Struct({
  input: text(Schema.isMaxLength(maxPromptLength)),
  variables: Schema.optionalKey(textRecord(text(Schema.isMaxLength(maxPromptLength)), { max: 100 }))
})
export type ExecuteRequest = typeof ExecuteRequest.Type

export const ExecutionStarted = Schema.Struct({
  executionId: Schema.String,
  status: ExecutionStatus,
  orchestrationId: Schema.String
})

/**
 * The execution is stored and will run, but its start could not be confirmed
 * in time: poll it by `executionId` rather than executing again.
 */
export class ExecutionNotStarted extends HttpApiError.Problem<ExecutionNotStarted>()(
  "ExecutionNotStarted",
  {
    type: "urn:agent-host:problem:execution-not-started",
    status: 503,
    title: "Service Unavailable"
  },
  {
    executionId: Schema.String
  }
) {}

/** What a retry shows beside the fields of every execution (absent on an execution that is no retry). */
export const retryFields = {
  retryOf: Schema.optionalKey(Schema.String).annotate({
    description: "On a retry: the failed or cancelled execution it retries (docs/orchestrations.md#retrying)."
  }),
  carriedSteps: Schema.optionalKey(Schema.Array(Schema.String)).annotate({
    description: "On a retry: the steps that had completed in `retryOf` and were carried over, not run again."
  }),
  carriedTokens: Schema.optionalKey(Schema.Int).annotate({
    description: "On a retry: the carried steps' tokens, spent by the execution retried; `tokensUsed` leaves them out."
  })
}

export const Execution = Schema.Struct({
  id: Schema.String,
  orchestrationId: Schema.String,
  status: ExecutionStatus,
  output: Schema.NullOr(Schema.String),
  error: Schema.NullOr(Schema.String),
  ...runTotals,
  ...retryFields
})
export type Execution = typeof Execution.Type

export const ExecutionList = PageOf(Execution)

const carriedCall = {
  carried: Schema.optionalKey(Schema.Boolean).annotate({
    description: "On a retry: true for a call of a carried step, made by the execution retried (`retryOf`)."
  })
}
export const ToolCallWithResult = Schema.Struct({
  ...ToolCallRecord.fields,
  fullResult: Schema.NullOr(Schema.String).annotate({ description: "The whole result (null for a failed call)." })
})
/** An execution's tool calls: a retry's carried steps' say so. */
export const ToolCallList = Schema.Struct({
  data: Schema.Array(Schema.Struct({ ...ToolCallRecord.fields, ...carriedCall }))
})
export const ExecutionToolCallWithResult = Schema.Struct({ ...ToolCallWithResult.fields, ...carriedCall })

/**
 * A retry refused because the orchestration no longer has the steps the
 * execution ran: `stepId` names the first that differs.
 */
export class OrchestrationChanged extends HttpApiError.Problem<OrchestrationChanged>()(
  "OrchestrationChanged",
  {
    type: "urn:agent-host:problem:orchestration-changed",
    status: 409,
    title: "Conflict"
  },
  {
    stepId: Schema.optionalKey(Schema.String)
  }
) {}

/** An execution's events: its steps' (`step.started`, `step.completed`) between its own. */
const executionEvents = runEventStream("execution", "step", "executionTimeout", {
  about: { stepId: Schema.optionalKey(Schema.NullOr(Schema.String)) },
  fields: {
    output: Schema.optionalKey(Schema.String),
    error: Schema.optionalKey(Schema.String),
    tokens: Schema.optionalKey(Schema.Number).annotate({ description: "A completed step's tokens." }),
    carried: Schema.optionalKey(Schema.Boolean).annotate({
      description: "On a retry's `step.completed`: the step completed in the execution retried and was not run again."
    }),
    tokensUsed: Schema.optionalKey(Schema.Number).annotate({
      description: "The execution's tokens, on its final event."
    })
  }
})

/** The events of an execution's stream, in the order they can come. */
export const executionEventNames = executionEvents.names
export const ExecutionEvents = executionEvents.events

// Executing and following executions, with an API key or a session (the
// dashboard): one shape and one documentation, the credential aside.
const executeSpec = {
  params: { id: OrchestrationId },
  headers: startHeaders,
  payload: ExecuteRequest,
  success: ExecutionStarted.pipe(HttpApiSchema.status(202)),
  error: startErrors(ExecutionNotStarted)
} as const

const executeDoc = {
  summary: "Execute an orchestration",
  description:
    "Starts an execution on `input` and `variables`; it runs in the background (follow it by " +
    "`executionId`). An `Idempotency-Key` replayed within 24 hours answers with the same execution. When the " +
    "tenant has as many executions and team runs running as its plan allows (FREE_MAX_RUNNING_RUNS...), the " +
    "execution waits its turn, `pending` with a `waiting` field, unless the request says `Prefer: wait=0`.",
  errors:
    "400 on invalid fields or variables the prompts use but the request lacks, 404 when the orchestration " +
    "is not the tenant's or is inactive, 409 when the `Idempotency-Key` was used with another request, 429 when " +
    "the day's model tokens are spent or, with `Prefer: wait=0`, when the tenant's runs are at the plan's cap " +
    "(with Retry-After), 503 when the execution is stored but its start is not confirmed in time " +
    "(it will run: poll it by `executionId`)."
}

const retrySpec = {
  params: { id: Text },
  headers: startHeaders,
  success: ExecutionStarted.pipe(HttpApiSchema.status(202)),
  error: [...startErrors(ExecutionNotStarted), OrchestrationChanged]
} as const

const retryDoc = {
  summary: "Retry a failed or cancelled execution",
  description:
    "Starts a new execution of the same steps, input and variables (`retryOf` names this one): the steps " +
    "that completed are carried over with their outputs, tokens and tool calls, and not run again; the others " +
    "run. Answers as execute does: the new `executionId`, 202. An `Idempotency-Key` replayed within 24 hours " +
    "answers with the same retry. A retry of a retry carries what the latest one completed.",
  errors:
    "404 when the execution is not the tenant's, 409 when it is not `failed` or `cancelled`, when the " +
    "orchestration was deleted, deactivated or its steps changed since (ids or order: `stepId` names the first " +
    "that differs), or when the `Idempotency-Key` was used with another request; 429 and 503 as for execute."
}

/** The execution routes of a group, documented with its credential by `doc` (given the key scope each needs). */
const executionRoutes = <const Name extends string>(
  name: Name,
  doc: (scope: "read" | "execute", text: Omit<OperationDoc, "credential">) => Context.Context<never>
) =>
  HttpApiGroup.make(name).add(
    HttpApiEndpoint.get("list", "/", {
      query: {
        ...PageQuery,
        orchestrationId: Schema.optionalKey(Text),
        status: Schema.optionalKey(ExecutionStatus)
      },
      success: ExecutionList,
      error: BadRequest
    }).annotateMerge(
      doc("read", {
        summary: "List executions",
        description:
          "The tenant's executions, newest first, a page at a time (`limit`, `cursor`), optionally of one " +
          "orchestration or in one status.",
        errors: "400 on a bad `limit`, `cursor` or `status`."
      })
    ),
    HttpApiEndpoint.get("get", "/:id", {
      params: { id: Text },
      success: Execution,
      error: NotFound
    }).annotateMerge(
      doc("read", {
        summary: "Get an execution",
        description: "The execution's status, output or error, tokens and duration.",
        errors: "404 when the execution is not the tenant's."
      })
    ),
    HttpApiEndpoint.get("events", "/:id/events", {
      params: { id: Text },
      success: ExecutionEvents,
      error: [NotFound, TooManyStreams]
    }).annotateMerge(
      doc("read", {
        summary: "Follow an execution's events",
        description:
          "The execution's progress as server-sent events: `execution.running`, `step.started`, " +
          "`step.completed` (with the step's output and tokens), then one final `execution.completed`, " +
          "`execution.failed` or `execution.cancelled`, after which the stream ends. A client that " +
          "connects late first receives what already happened. Each event's `id` can be sent back " +
          "as `Last-Event-ID` to resume. A stream open for EVENT_STREAM_MAX_DURATION, or past the " +
          "execution's own timeout, ends with a `stream.end` event (`reason`: `maxDuration` or " +
          "`executionTimeout`) instead.",
        errors: "404 when the execution is not the tenant's, 429 beyond MAX_EVENT_STREAMS_PER_TENANT open streams."
      })
    ),
    HttpApiEndpoint.get("toolCalls", "/:id/tool-calls", {
      params: { id: Text },
      success: ToolCallList,
      error: NotFound
    }).annotateMerge(
      doc("read", {
        summary: "List an execution's tool calls",
        description:
          "Every tool call the execution's steps made (or were refused), in the order the models asked for " +
          "them: the step (`scope`), the tool, the arguments, the status, the result as the model saw it (cut at " +
          "the tool's `maxOutputBytes`, `resultCut`), the error, the attempts and the duration (docs/tools.md).",
        errors: "404 when the execution is not the tenant's."
      })
    ),
    HttpApiEndpoint.get("toolCall", "/:id/steps/:stepId/tool-calls/:callId", {
      params: { id: Text, stepId: Text, callId: Text },
      success: ExecutionToolCallWithResult,
      error: NotFound
    }).annotateMerge(
      doc("read", {
        summary: "Get one tool call with its whole result",
        description:
          "The call as the list shows it, with `fullResult`: the whole result, of which the model saw a cut.",
        errors: "404 when the execution is not the tenant's or its step made no such call."
      })
    ),
    HttpApiEndpoint.post("cancel", "/:id/cancel", {
      params: { id: Text },
      success: ExecutionStarted.pipe(HttpApiSchema.status(202)),
      error: [NotFound, Conflict]
    }).annotateMerge(
      doc("execute", {
        summary: "Cancel an execution",
        description:
          "Marks the execution cancelled and interrupts its running steps: their model calls are " +
          "aborted, on whichever node runs them. An execution waiting for a slot leaves the queue.",
        errors: "404 when the execution is not the tenant's, 409 when it has already finished."
      })
    )
  )

const webhook = webhookEndpoints({
  name: "orchestration",
  id: OrchestrationId,
  secretPath: "/:id/webhook/secret",
  credential: sessionCredential,
  docs: {
    deliveries: {
      summary: "List an orchestration's webhook deliveries",
      description:
        "Every attempt to deliver the orchestration's webhook events, newest first, a page at a time " +
        "(`limit`, `cursor`)."
    },
    redeliver: { summary: "Redeliver a webhook event" },
    rotateSecret: {
      summary: "Rotate the webhook signing secret",
      description:
        "A new signing secret, shown once. The previous one also signs deliveries until " +
        "`previousSecretExpiresAt` (WEBHOOK_ROTATION_OVERLAP)."
    }
  }
})

export class OrchestrationsApi extends HttpApiGroup.make("orchestrations")
  .add(
    ...managementEndpoints({
      name: "orchestration",
      model: Orchestration,
      credential: sessionCredential,
      errors: { create: [BadRequest, QuotaReached], update: [NotFound, BadRequest, QuotaReached] },
      docs: {
        list: {
          description:
            "The tenant's orchestrations, active and inactive, with their steps and webhooks, a page at a " +
            "time (`limit`, `cursor`)."
        },
        create: {
          description:
            "Creates an orchestration: steps, each an agent and a prompt template, run in the order of " +
            "their `dependsOn`, and an optional webhook for finished executions (the answer then carries its " +
            "signing secret, once).",
          errors:
            "400 on invalid fields, naming each: duplicate step ids, unknown or cyclic dependencies, agents " +
            "that are not the tenant's, prompts that can render past MAX_PROMPT_CHARS, a refused webhook URL. 429 " +
            "when the tenant has as many orchestrations (MAX_ORCHESTRATIONS) or webhook URLs " +
            "(MAX_WEBHOOK_ENDPOINTS) as its plan allows."
        },
        get: { description: "The orchestration, with its steps and webhook." },
        update: {
          description:
            "Changes the fields sent; new `steps` replace the old ones and are checked as a whole. " +
            "Executions already started keep the steps they started with.",
          errors:
            "400 on invalid fields (as for create), 404 when the orchestration is not the tenant's, 429 when a " +
            "first webhook URL would pass the plan's MAX_WEBHOOK_ENDPOINTS."
        },
        remove: { description: "Deletes the orchestration and its webhook." }
      }
    }),
    webhook.deliveries,
    webhook.redeliver,
    webhook.rotateSecret,
    HttpApiEndpoint.post("execute", "/:id/execute", executeSpec)
      .middleware(SessionQuota)
      .annotateMerge(
        operation({
          ...executeDoc,
          credential: sessionCredential,
          errors: `${executeDoc.errors} Counted against the plan's daily requests as the API-key route is: 429 past them.`
        })
      )
  )
  .middleware(SessionAuth)
  .prefix("/api/orchestrations")
  .annotateMerge(
    OpenApi.annotations({
      title: "Orchestrations (management)",
      description:
        "Define multi-step orchestrations of agents, and manage the signed webhook their finished " +
        "executions are sent to."
    })
  ) {}

export class OrchestrationsV1Api extends HttpApiGroup.make("v1Orchestrations")
  .add(
    activeList(V1OrchestrationList, (doc) => keyOperation("read", "bearer", doc), {
      summary: "List active orchestrations",
      description: "The tenant's active orchestrations, without their steps, a page at a time (`limit`, `cursor`)."
    }),
    HttpApiEndpoint.post("execute", "/:id/execute", executeSpec).annotateMerge(
      keyOperation("execute", "bearer", executeDoc)
    )
  )
  .middleware(ApiKeyAuth)
  .prefix("/api/v1/orchestrations")
  .annotateMerge(
    OpenApi.annotations({
      title: "Orchestrations (API key)",
      description: "List the tenant's active orchestrations and execute them, with an API key."
    })
  ) {}

export class ExecutionsApi extends executionRoutes("executions", (_, doc) =>
  operation({ ...doc, credential: sessionCredential })
)
  .add(
    HttpApiEndpoint.post("retry", "/:id/retry", retrySpec)
      .middleware(SessionQuota)
      .annotateMerge(
        operation({
          ...retryDoc,
          credential: sessionCredential,
          errors: `${retryDoc.errors} Counted against the plan's daily requests as the API-key route is: 429 past them.`
        })
      )
  )
  .middleware(SessionAuth)
  .prefix("/api/executions")
  .annotateMerge(
    OpenApi.annotations({
      title: "Executions (management)",
      description:
        "Follow, list, cancel and retry the executions of orchestrations, with a session (the dashboard's view)."
    })
  ) {}

export class ExecutionsV1Api extends executionRoutes("v1Executions", (scope, doc) => keyOperation(scope, "bearer", doc))
  .add(
    HttpApiEndpoint.post("retry", "/:id/retry", retrySpec).annotateMerge(keyOperation("execute", "bearer", retryDoc))
  )
  .middleware(ApiKeyAuth)
  .prefix("/api/v1/executions")
  .annotateMerge(
    OpenApi.annotations({
      title: "Executions (API key)",
      description: "Follow, list, cancel and retry the executions of orchestrations, with an API key."
    })
  ) {}
