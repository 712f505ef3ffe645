import * as Layer from "effect/Layer"
import * as HttpApiBuilder from "effect/http-api/HttpApiBuilder"
import { Api } from "../Api.ts"
import { forTenant } from "../Http/Management.ts"
import * as Traced from "../Observability/Traced.ts"
import { Schedules } from "./Schedules.ts"

export const SchedulesHttp = HttpApiBuilder.group(
  Api,
  "schedules",
  Traced.fn(function* (handlers) {
    const schedules = yield* Schedules
    return handlers.handleAll({
      list: forTenant((tenantId, { query }) => schedules.list(tenantId, query)),
      create: forTenant((tenantId, { payload }) => schedules.create(tenantId, payload)),
      get: forTenant((tenantId, { params }) => schedules.get(tenantId, params.id)),
      update: forTenant((tenantId, { params, payload }) => schedules.update(tenantId, params.id, payload)),
      remove: forTenant((tenantId, { params }) => schedules.remove(tenantId, params.id)),
      pause: forTenant((tenantId, { params }) => schedules.pause(tenantId, params.id)),
      resume: forTenant((tenantId, { params }) => schedules.resume(tenantId, params.id)),
      runs: forTenant((tenantId, { params, query }) => schedules.runs(tenantId, params.id, query))
    })
  })
)

export const layer = SchedulesHttp.pipe(Layer.provide(Schedules.layer))
