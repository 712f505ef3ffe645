import * as Layer from "effect/Layer"
import * as HttpApiBuilder from "effect/http-api/HttpApiBuilder"
import { Api } from "../Api.ts"
import { managementHandlers } from "../Http/Management.ts"
import * as Traced from "../Observability/Traced.ts"
import { Tools } from "./Tools.ts"

export const ToolsHttp = HttpApiBuilder.group(
  Api,
  "tools",
  Traced.fn(function* (handlers) {
    return handlers.handleAll(managementHandlers(yield* Tools))
  })
)

export const layer = ToolsHttp.pipe(Layer.provide(Tools.layer))
