import { Effect, Layer } from "effect"
import { HttpApiBuilder } from "effect/http-api"
import { Api } from "../Api.ts"
import { CurrentPrincipal } from "../Auth/Api.ts"
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
    return handlers.handleAll({
      list: Effect.fn(function*({ query }) {
        const { tenantId } = yield* CurrentPrincipal
        return yield* orchestrations.list(tenantId, { activeOnly: true, ...query })
      })
    })
  })
)

export const layer = Layer.mergeAll(OrchestrationsHttp, OrchestrationsV1Http).pipe(Layer.provide(Orchestrations.layer))
