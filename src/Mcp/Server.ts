import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import * as McpProtocol from "effect/ai/McpProtocol"
import * as McpServer from "effect/ai/McpServer"
import * as HttpRouter from "effect/http/HttpRouter"
import * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as HttpServerRespondable from "effect/http/HttpServerRespondable"
import { CurrentPrincipal } from "../Auth/Api.ts"
import { ApiKeys } from "../Auth/ApiKeys.ts"
import { clientAddress } from "../Auth/Throttle.ts"
import { AppConfig } from "../Config.ts"
import { type TooManyAttempts, Unauthorized } from "../Domain/Problems.ts"
import * as Tools from "./Tools.ts"

export const path = "/mcp"

// The MCP routes' methods, for the request pipeline's route table (metrics, span names).
export const routes: ReadonlyArray<readonly [string, string]> = [
  ["POST", path],
  ["GET", path],
  ["DELETE", path]
]

/** A refusal as the key routes answer it: the problem, with its headers. */
const refusal = (problem: Unauthorized | TooManyAttempts, headers: Record<string, string>) =>
  Effect.map(HttpServerRespondable.toResponse(problem), HttpServerResponse.setHeaders(headers))

// The challenge of a 401, so that a client knows to send a bearer token.
const challenge = { "www-authenticate": 'Bearer realm="mcp"' }

/**
 * Every request to /mcp carries an API key as a bearer token, checked as the
 * key routes check it (ApiKeys, with the failed-credential guard): without a
 * valid one the request is refused with 401 before any MCP message is read.
 * The key's principal is the request's CurrentPrincipal, which the tools read
 * for the tenant and the scopes (Tools.ts).
 */
const KeyAuth = HttpRouter.middleware<{ provides: CurrentPrincipal }>()(
  Effect.gen(function* () {
    const keys = yield* ApiKeys
    const { trustedProxyHops } = yield* AppConfig
    return (httpEffect) =>
      Effect.gen(function* () {
        const request = yield* HttpServerRequest.HttpServerRequest
        const header = request.headers.authorization ?? ""
        const key = header.toLowerCase().startsWith("bearer ") ? header.slice(7).trim() : ""
        if (key === "") return yield* refusal(new Unauthorized({ detail: "Missing API key" }), challenge)
        const checked = yield* Effect.result(keys.authenticate(key, clientAddress(request, trustedProxyHops)))
        // Too many failed credentials from this address: 429, as on the key routes.
        if (Result.isFailure(checked)) {
          return yield* refusal(checked.failure, { "retry-after": String(checked.failure.retryAfter) })
        }
        const principal = checked.success
        if (Option.isNone(principal)) {
          return yield* refusal(new Unauthorized({ detail: "Invalid or revoked API key" }), challenge)
        }
        yield* Effect.annotateCurrentSpan("tenant.id", principal.value.tenantId)
        return yield* Effect.provideService(httpEffect, CurrentPrincipal, principal.value)
      })
  })
)

/**
 * The service as an MCP server: Streamable HTTP at /mcp, the tools of
 * Tools.ts, each call made with the key's tenant and scopes.
 */
export const layer = McpServer.layerHttp({
  name: "agent-host",
  version: "1.0.0",
  path,
  protocols: [McpProtocol.v2025_11_25, McpProtocol.v2025_06_18, McpProtocol.v2025_03_26],
  allowSessionTermination: true,
  registrations: McpServer.toolkit(Tools.McpToolkit).pipe(Layer.provide(Tools.layer))
}).pipe(Layer.provide(KeyAuth.layer), Layer.provide(ApiKeys.layer))
