import { Effect, Layer } from "effect"
import { HttpApiBuilder } from "effect/http-api"
import { Api } from "../Api.ts"
import { CurrentPrincipal } from "../Auth/Api.ts"
import { Agents } from "./Agents.ts"

export const AgentsHttp = HttpApiBuilder.group(
  Api,
  "agents",
  Effect.fn(function*(handlers) {
    const agents = yield* Agents
    return handlers.handleAll({
      list: Effect.fn(function*({ query }) {
        const { tenantId } = yield* CurrentPrincipal
        return yield* agents.list(tenantId, { activeOnly: false, ...query })
      }),
      create: Effect.fn(function*({ payload }) {
        const { tenantId } = yield* CurrentPrincipal
        return yield* agents.create(tenantId, payload)
      }),
      get: Effect.fn(function*({ params }) {
        const { tenantId } = yield* CurrentPrincipal
        return yield* agents.get(tenantId, params.id)
      }),
      update: Effect.fn(function*({ params, payload }) {
        const { tenantId } = yield* CurrentPrincipal
        return yield* agents.update(tenantId, params.id, payload)
      }),
      remove: Effect.fn(function*({ params }) {
        const { tenantId } = yield* CurrentPrincipal
        yield* agents.remove(tenantId, params.id)
      })
    })
  })
)

export const AgentsV1Http = HttpApiBuilder.group(
  Api,
  "v1Agents",
  Effect.fn(function*(handlers) {
    const agents = yield* Agents
    return handlers.handleAll({
      list: Effect.fn(function*({ query }) {
        const { tenantId } = yield* CurrentPrincipal
        return yield* agents.list(tenantId, { activeOnly: true, ...query })
      })
    })
  })
)

export const layer = Layer.mergeAll(AgentsHttp, AgentsV1Http).pipe(Layer.provide(Agents.layer))
