import { Effect, Layer } from "effect"
import { HttpApiBuilder } from "effect/http-api"
import { Api } from "../Api.ts"
import { CurrentPrincipal } from "../Auth/Api.ts"
import { Executions } from "./Executions.ts"
import { Orchestrations } from "./Orchestrations.ts"

export const OrchestrationsHttp = HttpApiBuilder.group(
  Api,
  "orchestrations",
  Effect.fn(function*(handlers) {
    const orchestrations = yield* Orchestrations
    return handlers.handleAll({
      list: Effect.fn(function*({ query }) {
        const { tenantId } = yield* CurrentPrincipal
        return yield* orchestrations.list(tenantId, { activeOnly: false, ...query })
      }),
      create: Effect.fn(function*({ payload }) {
        const { tenantId } = yield* CurrentPrincipal
        return yield* orchestrations.create(tenantId, payload)
      }),
      get: Effect.fn(function*({ params }) {
        const { tenantId } = yield* CurrentPrincipal
        return yield* orchestrations.get(tenantId, params.id)
      }),
      update: Effect.fn(function*({ params, payload }) {
        const { tenantId } = yield* CurrentPrincipal
        return yield* orchestrations.update(tenantId, params.id, payload)
      }),
      remove: Effect.fn(function*({ params }) {
        const { tenantId } = yield* CurrentPrincipal
        yield* orchestrations.remove(tenantId, params.id)
      })
    })
  })
)

export const OrchestrationsV1Http = HttpApiBuilder.group(
  Api,
  "v1Orchestrations",
  Effect.fn(function*(handlers) {
    const orchestrations = yield* Orchestrations
    const executions = yield* Executions
    return handlers.handleAll({
      list: Effect.fn(function*({ query }) {
        const { tenantId } = yield* CurrentPrincipal
        return yield* orchestrations.list(tenantId, { activeOnly: true, ...query })
      }),
      execute: Effect.fn(function*({ params, payload, headers }) {
        const { tenantId } = yield* CurrentPrincipal
        return yield* executions.start(tenantId, params.id, payload, headers["idempotency-key"])
      })
    })
  })
)

export const ExecutionsV1Http = HttpApiBuilder.group(
  Api,
  "v1Executions",
  Effect.fn(function*(handlers) {
    const executions = yield* Executions
    return handlers.handleAll({
      list: Effect.fn(function*({ query }) {
        const { tenantId } = yield* CurrentPrincipal
        return yield* executions.list(tenantId, query)
      }),
      get: Effect.fn(function*({ params }) {
        const { tenantId } = yield* CurrentPrincipal
        return yield* executions.get(tenantId, params.id)
      }),
      cancel: Effect.fn(function*({ params }) {
        const { tenantId } = yield* CurrentPrincipal
        return yield* executions.cancel(tenantId, params.id)
      })
    })
  })
)

export const layer = Layer.mergeAll(OrchestrationsHttp, OrchestrationsV1Http, ExecutionsV1Http).pipe(
  Layer.provide([Orchestrations.layer, Executions.layer])
)
