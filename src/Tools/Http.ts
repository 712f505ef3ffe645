import * as Layer from "effect/Layer"
import * as HttpApiBuilder from "effect/http-api/HttpApiBuilder"
import * as Crypto from "node:crypto"
import { Api } from "../Api.ts"
import { forTenant, managementHandlers } from "../Http/Management.ts"
import * as Traced from "../Observability/Traced.ts"
import { ToolInvoker } from "./Invoke.ts"
import { Tools } from "./Tools.ts"

export const ToolsHttp = HttpApiBuilder.group(
  Api,
  "tools",
  Traced.fn(function* (handlers) {
    const tools = yield* Tools
    const invoker = yield* ToolInvoker
    return handlers
      .handleAll(managementHandlers(tools))
      .handle(
        "test",
        forTenant(
          Traced.fn("Tools.test")(function* (tenantId, { params, payload }) {
            const tool = yield* tools.get(tenantId, params.id)
            const { errorKind, exchange, ...outcome } = yield* invoker.invoke(tool, payload.arguments ?? {}, {
              tenantId,
              runId: `test-${Crypto.randomUUID()}`,
              callId: "test",
              agentChain: []
            })
            return { ...outcome, ...(errorKind === undefined ? {} : { errorKind }), exchange }
          })
        )
      )
      .handle(
        "refresh",
        forTenant(
          Traced.fn("Tools.refreshRoute")(function* (tenantId, { params }) {
            return yield* tools.refresh(tenantId, params.id)
          })
        )
      )
  })
)

export const layer = ToolsHttp.pipe(Layer.provide([Tools.layer, ToolInvoker.layer]))
