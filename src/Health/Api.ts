import { Schema } from "effect"
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "effect/http-api"
import { ServiceUnavailable } from "../Domain/Problems.ts"

export const HealthStatus = Schema.Struct({ status: Schema.Literal("ok") })

export class HealthApi extends HttpApiGroup.make("health", { topLevel: true })
  .add(
    HttpApiEndpoint.get("live", "/health/live", { success: HealthStatus }),
    HttpApiEndpoint.get("ready", "/health/ready", { success: HealthStatus, error: ServiceUnavailable })
  )
  .annotateMerge(OpenApi.annotations({ title: "Health" }))
{}
