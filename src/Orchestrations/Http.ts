import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as HttpApiBuilder from "effect/http-api/HttpApiBuilder"
import { Api } from "../Api.ts"
import { CurrentPrincipal } from "../Auth/Api.ts"
import type { OrchestrationId } from "../Domain/Ids.ts"
import type { PageRequest } from "../Domain/Page.ts"
import { forTenant, managementHandlers, runEventStream } from "../Http/Management.ts"
import type { ExecuteRequest, ExecutionStatus } from "./Api.ts"
import { withBudgetHeaders } from "../Billing/Budget.ts"
import { Executions } from "./Executions.ts"
import { Orchestrations } from "./Orchestrations.ts"
import * as Traced from "../Observability/Traced.ts"

/** Starting an execution, with a key or a session alike. */
const executeHandler = (executions: Executions["Service"]) =>
  Traced.fn(function* ({
    params,
    payload,
    headers
  }: {
    readonly params: { readonly id: OrchestrationId }
    readonly payload: ExecuteRequest
    readonly headers: { readonly "idempotency-key"?: string | undefined; readonly prefer?: string | undefined }
  }) {
    const { tenantId } = yield* CurrentPrincipal
    return yield* withBudgetHeaders(executions.start(tenantId, params.id, { payload, headers }))
  })

export const OrchestrationsHttp = HttpApiBuilder.group(
  Api,
  "orchestrations",
  Traced.fn(function* (handlers) {
    const orchestrations = yield* Orchestrations
    const executions = yield* Executions
    return handlers.handleAll({
      // The routes show each orchestration with its webhook.
      ...managementHandlers({ ...orchestrations, list: orchestrations.listViews, get: orchestrations.view }),
      execute: executeHandler(executions),
      deliveries: forTenant((tenantId, { params, query }) => orchestrations.deliveries(tenantId, params.id, query)),
      redeliver: forTenant((tenantId, { params }) => orchestrations.redeliver(tenantId, params.id, params.eventId)),
      rotateSecret: forTenant((tenantId, { params }) => orchestrations.rotateSecret(tenantId, params.id))
    })
  })
)

export const OrchestrationsV1Http = HttpApiBuilder.group(
  Api,
  "v1Orchestrations",
  Traced.fn(function* (handlers) {
    const orchestrations = yield* Orchestrations
    const executions = yield* Executions
    return handlers.handleAll({
      list: forTenant((tenantId, { query }) => orchestrations.list(tenantId, query, { activeOnly: true })),
      execute: executeHandler(executions)
    })
  })
)

type ById = { readonly params: { readonly id: string } }

/** The execution handlers, for a key or a session alike. */
const executionHandlers = (executions: Executions["Service"]) => ({
  list: forTenant(
    (
      tenantId,
      {
        query
      }: {
        readonly query: PageRequest & {
          readonly orchestrationId?: string | undefined
          readonly status?: ExecutionStatus | undefined
        }
      }
    ) => executions.list(tenantId, query)
  ),
  get: forTenant((tenantId, { params }: ById) => executions.get(tenantId, params.id)),
  cancel: forTenant((tenantId, { params }: ById) => executions.cancel(tenantId, params.id)),
  retry: Traced.fn(function* ({
    params,
    headers
  }: ById & {
    readonly headers: { readonly "idempotency-key"?: string | undefined; readonly prefer?: string | undefined }
  }) {
    const { tenantId } = yield* CurrentPrincipal
    return yield* withBudgetHeaders(executions.retry(tenantId, params.id, headers))
  }),
  toolCalls: forTenant((tenantId, { params }: ById) => executions.toolCalls(tenantId, params.id)),
  toolCall: forTenant(
    (
      tenantId,
      { params }: { readonly params: { readonly id: string; readonly stepId: string; readonly callId: string } }
    ) => executions.toolCall(tenantId, params.id, params.stepId, params.callId)
  ),
  events: forTenant(
    (
      tenantId,
      {
        params,
        request
      }: ById & {
        readonly request: { readonly headers: Readonly<Record<string, string | undefined>> }
      }
    ) =>
      Effect.map(executions.events(tenantId, params.id, request.headers["last-event-id"] ?? "0"), (events) =>
        runEventStream(events, (event) => ({ stepId: event.stepId }))
      )
  )
})

export const ExecutionsHttp = HttpApiBuilder.group(
  Api,
  "executions",
  Traced.fn(function* (handlers) {
    return handlers.handleAll(executionHandlers(yield* Executions))
  })
)

export const ExecutionsV1Http = HttpApiBuilder.group(
  Api,
  "v1Executions",
  Traced.fn(function* (handlers) {
    return handlers.handleAll(executionHandlers(yield* Executions))
  })
)

export const layer = Layer.mergeAll(OrchestrationsHttp, OrchestrationsV1Http, ExecutionsHttp, ExecutionsV1Http).pipe(
  Layer.provide([Orchestrations.layer, Executions.layer])
)
