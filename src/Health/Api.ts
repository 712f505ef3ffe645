import * as Schema from "effect/Schema"
import * as HttpApiEndpoint from "effect/http-api/HttpApiEndpoint"
import * as HttpApiGroup from "effect/http-api/HttpApiGroup"
import * as OpenApi from "effect/http-api/OpenApi"
import { noCredential, operation } from "../Domain/ApiDocs.ts"
import { ServiceUnavailable } from "../Domain/Problems.ts"

export const HealthStatus = Schema.Struct({ status: Schema.Literal("ok") })

export class HealthApi extends HttpApiGroup.make("health", { topLevel: true })
  .add(
    HttpApiEndpoint.get("live", "/health/live", { success: HealthStatus }).annotateMerge(
      operation({
        summary: "Liveness",
        description: "Answers while the process serves HTTP; it reads nothing.",
        credential: noCredential
      })
    ),
    HttpApiEndpoint.get("ready", "/health/ready", { success: HealthStatus, error: ServiceUnavailable }).annotateMerge(
      operation({
        summary: "Readiness",
        description: "Answers once the database does, within 2 seconds: the check for a load balancer.",
        credential: noCredential,
        errors: "503 when the database does not answer in time."
      })
    )
  )
  .annotateMerge(
    OpenApi.annotations({
      title: "Health",
      description: "Probes for orchestrators and load balancers."
    })
  ) {}
