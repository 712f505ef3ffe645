import * as Layer from "effect/Layer"
import * as HttpApiBuilder from "effect/http-api/HttpApiBuilder"
import { Api } from "../Api.ts"
import { managementHandlers } from "../Http/Management.ts"
import * as Traced from "../Observability/Traced.ts"
import { Secrets } from "./Secrets.ts"

export const SecretsHttp = HttpApiBuilder.group(
  Api,
  "secrets",
  Traced.fn(function* (handlers) {
    return handlers.handleAll(managementHandlers(yield* Secrets))
  })
)

export const layer = SecretsHttp.pipe(Layer.provide(Secrets.layer))
