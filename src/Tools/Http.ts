import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Result from "effect/Result"
import type * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as HttpApiBuilder from "effect/http-api/HttpApiBuilder"
import * as Crypto from "node:crypto"
import { Api } from "../Api.ts"
import { firstValue } from "../Auth/Cookie.ts"
import { AppConfig } from "../Config.ts"
import type { ToolId } from "../Domain/Ids.ts"
import { forTenant, managementHandlers } from "../Http/Management.ts"
import * as Traced from "../Observability/Traced.ts"
import { ToolInvoker } from "./Invoke.ts"
import { McpOAuth } from "./McpOAuth.ts"
import { Tools } from "./Tools.ts"

export const ToolsHttp = HttpApiBuilder.group(
  Api,
  "tools",
  Traced.fn(function* (handlers) {
    const tools = yield* Tools
    const invoker = yield* ToolInvoker
    const oauth = yield* McpOAuth
    const config = yield* AppConfig
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
      .handle(
        "oauthStart",
        forTenant((tenantId, { params, request }) => oauth.start(tenantId, params.id, originOf(request, config)))
      )
      .handle(
        "oauthStatus",
        forTenant((tenantId, { params }) => oauth.status(tenantId, params.id))
      )
      .handle(
        "oauthDisconnect",
        forTenant((tenantId, { params }) => oauth.disconnect(tenantId, params.id))
      )
  })
)

/**
 * The origin the dashboard reached the service at, for the OAuth redirect
 * URI when PUBLIC_URL is unset: the Host header; a proxy's X-Forwarded-Host
 * and X-Forwarded-Proto only behind trusted proxies (TRUSTED_PROXY_HOPS).
 */
const originOf = (
  request: HttpServerRequest.HttpServerRequest,
  config: { readonly trustedProxyHops: number; readonly cookieSecure: boolean | undefined }
) => {
  const behindProxy = config.trustedProxyHops > 0
  const host =
    (behindProxy ? firstValue(request.headers["x-forwarded-host"]) : undefined) ??
    firstValue(request.headers.host) ??
    "localhost"
  const scheme =
    (behindProxy ? firstValue(request.headers["x-forwarded-proto"]) : undefined) ??
    (config.cookieSecure === true ? "https" : "http")
  return `${scheme === "https" ? "https" : "http"}://${host}`
}

const dashboardTools = "/app/tools"

/** The end of an OAuth authorization: tokens stored, the server's tools listed, the browser sent to the dashboard. */
export const McpOAuthHttp = HttpApiBuilder.group(
  Api,
  "mcpOAuth",
  Traced.fn(function* (handlers) {
    const tools = yield* Tools
    const oauth = yield* McpOAuth
    return handlers.handle(
      "callback",
      Traced.fn("McpOAuth.callbackRoute")(function* ({ query }) {
        const outcome = yield* oauth.callback(query)
        let error = outcome.error
        if (error === undefined && outcome.tenantId !== undefined && outcome.toolId !== undefined) {
          const listed = yield* Effect.result(tools.refresh(outcome.tenantId, outcome.toolId as ToolId))
          if (Result.isFailure(listed)) {
            error = `Connected, but the server's tools could not be listed: ${listed.failure.detail ?? listed.failure._tag}`
          }
        }
        const params = new URLSearchParams()
        if (outcome.toolId !== undefined) params.set("tool", outcome.toolId)
        params.set("oauth", error === undefined ? "connected" : "error")
        if (error !== undefined) params.set("detail", error)
        return HttpServerResponse.redirect(`${dashboardTools}?${params}`, { status: 302 })
      })
    )
  })
)

export const layer = Layer.mergeAll(ToolsHttp, McpOAuthHttp).pipe(
  Layer.provide([Tools.layer, ToolInvoker.layer, McpOAuth.layer])
)
