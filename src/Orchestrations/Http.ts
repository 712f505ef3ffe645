import * as Layer from "effect/Layer"
import * as Stream from "effect/Stream"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as HttpApiBuilder from "effect/http-api/HttpApiBuilder"
import { Api } from "../Api.ts"
import { CurrentPrincipal } from "../Auth/Api.ts"
import type { OrchestrationId } from "../Domain/Ids.ts"
import { asksNotToWait } from "../Domain/RunQueue.ts"
import type { ExecuteRequest, ExecutionStatus } from "./Api.ts"
import { withBudgetHeaders } from "../Billing/Budget.ts"
import { Executions } from "./Executions.ts"
import { Orchestrations } from "./Orchestrations.ts"
import * as Traced from "../Platform/Traced.ts"

/** Starting an execution, with a key or a session alike. */
const executeHandler = (executions: Executions["Service"]) =>
  Traced.fn(function*({ params, payload, headers }: {
    readonly params: { readonly id: OrchestrationId }
    readonly payload: ExecuteRequest
    readonly headers: { readonly "idempotency-key"?: string | undefined; readonly prefer?: string | undefined }
  }) {
    const { tenantId } = yield* CurrentPrincipal
    return yield* withBudgetHeaders(
      executions.start(tenantId, params.id, payload, headers["idempotency-key"], !asksNotToWait(headers.prefer))
    )
  })

export const OrchestrationsHttp = HttpApiBuilder.group(
  Api,
  "orchestrations",
  Traced.fn(function*(handlers) {
    const orchestrations = yield* Orchestrations
    const executions = yield* Executions
    return handlers.handleAll({
      list: Traced.fn(function*({ query }) {
        const { tenantId } = yield* CurrentPrincipal
        return yield* orchestrations.listViews(tenantId, query)
      }),
      execute: executeHandler(executions),
      create: Traced.fn(function*({ payload }) {
        const { tenantId } = yield* CurrentPrincipal
        return yield* orchestrations.create(tenantId, payload)
      }),
      get: Traced.fn(function*({ params }) {
        const { tenantId } = yield* CurrentPrincipal
        return yield* orchestrations.view(tenantId, params.id)
      }),
      update: Traced.fn(function*({ params, payload }) {
        const { tenantId } = yield* CurrentPrincipal
        return yield* orchestrations.update(tenantId, params.id, payload)
      }),
      remove: Traced.fn(function*({ params }) {
        const { tenantId } = yield* CurrentPrincipal
        yield* orchestrations.remove(tenantId, params.id)
      }),
      deliveries: Traced.fn(function*({ params, query }) {
        const { tenantId } = yield* CurrentPrincipal
        return yield* orchestrations.deliveries(tenantId, params.id, query)
      }),
      redeliver: Traced.fn(function*({ params }) {
        const { tenantId } = yield* CurrentPrincipal
        return yield* orchestrations.redeliver(tenantId, params.id, params.eventId)
      }),
      rotateSecret: Traced.fn(function*({ params }) {
        const { tenantId } = yield* CurrentPrincipal
        return yield* orchestrations.rotateSecret(tenantId, params.id)
      })
    })
  })
)

export const OrchestrationsV1Http = HttpApiBuilder.group(
  Api,
  "v1Orchestrations",
  Traced.fn(function*(handlers) {
    const orchestrations = yield* Orchestrations
    const executions = yield* Executions
    return handlers.handleAll({
      list: Traced.fn(function*({ query }) {
        const { tenantId } = yield* CurrentPrincipal
        return yield* orchestrations.list(tenantId, { activeOnly: true, ...query })
      }),
      execute: executeHandler(executions)
    })
  })
)

const encoder = new TextEncoder()

/** The execution handlers, for a key or a session alike. */
const executionHandlers = (executions: Executions["Service"]) => ({
  list: Traced.fn(function*({ query }: {
    readonly query: {
      readonly limit?: number | undefined
      readonly cursor?: string | undefined
      readonly orchestrationId?: string | undefined
      readonly status?: ExecutionStatus | undefined
    }
  }) {
    const { tenantId } = yield* CurrentPrincipal
    return yield* executions.list(tenantId, query)
  }),
  get: Traced.fn(function*({ params }: { readonly params: { readonly id: string } }) {
    const { tenantId } = yield* CurrentPrincipal
    return yield* executions.get(tenantId, params.id)
  }),
  cancel: Traced.fn(function*({ params }: { readonly params: { readonly id: string } }) {
    const { tenantId } = yield* CurrentPrincipal
    return yield* executions.cancel(tenantId, params.id)
  }),
  events: Traced.fn(function*({ params, request }: {
    readonly params: { readonly id: string }
    readonly request: { readonly headers: Readonly<Record<string, string | undefined>> }
  }) {
    const { tenantId } = yield* CurrentPrincipal
    const events = yield* executions.events(tenantId, params.id, request.headers["last-event-id"] ?? "0")
    return HttpServerResponse.stream(
      Stream.map(events, (event) =>
        encoder.encode(
          "reason" in event
            // No id: a client resuming with Last-Event-ID goes on from the last real event.
            ? `event: ${event.type}\ndata: ${JSON.stringify(event)}\n\n`
            : `id: ${event.id}\nevent: ${event.type}\ndata: ${
              JSON.stringify({ type: event.type, stepId: event.stepId, ...(event.data as object), at: event.createdAt })
            }\n\n`
        )),
      { contentType: "text/event-stream", headers: { "cache-control": "no-cache", "x-accel-buffering": "no" } }
    )
  })
})

export const ExecutionsHttp = HttpApiBuilder.group(
  Api,
  "executions",
  Traced.fn(function*(handlers) {
    return handlers.handleAll(executionHandlers(yield* Executions))
  })
)

export const ExecutionsV1Http = HttpApiBuilder.group(
  Api,
  "v1Executions",
  Traced.fn(function*(handlers) {
    return handlers.handleAll(executionHandlers(yield* Executions))
  })
)

export const layer = Layer.mergeAll(OrchestrationsHttp, OrchestrationsV1Http, ExecutionsHttp, ExecutionsV1Http).pipe(
  Layer.provide([Orchestrations.layer, Executions.layer])
)
