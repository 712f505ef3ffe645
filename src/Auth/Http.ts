import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { ServiceUnavailable, TooManyAttempts } from "../Domain/Problems.ts"
import * as HttpEffect from "effect/http/HttpEffect"
import * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as HttpApiBuilder from "effect/http-api/HttpApiBuilder"
import * as HttpApiSecurity from "effect/http-api/HttpApiSecurity"
import { Api } from "../Api.ts"
import { AppConfig } from "../Config.ts"
import { Accounts } from "./Accounts.ts"
import { CurrentPrincipal } from "./Api.ts"
import { ApiKeys } from "./ApiKeys.ts"
import { expireSessionCookies, sessionCookieFor } from "./Cookie.ts"
import { currentSession } from "./Middleware.ts"
import { clientAddress } from "./Throttle.ts"
import * as Traced from "../Observability/Traced.ts"

/** Retry-After on a throttled attempt, and on a 503 for too many password hashes at once. */
const withRetryAfter = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.tapError(effect, (error) => {
    if (!(error instanceof TooManyAttempts) && !(error instanceof ServiceUnavailable)) return Effect.void
    const seconds = error instanceof TooManyAttempts ? error.retryAfter : 1
    return HttpEffect.appendPreResponseHandler((_request, response) =>
      Effect.succeed(HttpServerResponse.setHeader(response, "retry-after", String(seconds)))
    )
  })

export const AuthHttp = HttpApiBuilder.group(
  Api,
  "auth",
  Traced.fn(function* (handlers) {
    const accounts = yield* Accounts
    const config = yield* AppConfig
    return handlers.handleAll({
      register: ({ payload, request }) =>
        withRetryAfter(accounts.register(payload, clientAddress(request, config.trustedProxyHops))),
      login: Traced.fn(function* ({ payload, request }) {
        const session = yield* withRetryAfter(accounts.login(payload, clientAddress(request, config.trustedProxyHops)))
        const cookie = sessionCookieFor(request, config.cookieSecure)
        yield* HttpApiBuilder.securitySetCookie(
          HttpApiSecurity.apiKey({ key: cookie.name, in: "cookie" }),
          session.token,
          {
            httpOnly: true,
            sameSite: "lax",
            path: "/",
            secure: cookie.secure,
            expires: session.expiresAt
          }
        )
        // A browser keeps the session in the HttpOnly cookie; the token in the
        // body is for API clients, which send neither header.
        const fromBrowser = request.headers.origin !== undefined || request.headers["sec-fetch-site"] !== undefined
        if (fromBrowser && payload.returnToken !== true) {
          const { token: _token, ...withoutToken } = session
          return withoutToken
        }
        return session
      }),
      logout: Traced.fn(function* () {
        const session = yield* currentSession
        yield* accounts.logout(session.sessionId)
        yield* expireSessionCookies(yield* HttpServerRequest.HttpServerRequest, config.cookieSecure)
      }),
      me: Traced.fn(function* () {
        const session = yield* currentSession
        return yield* accounts.account(session.userId)
      })
    })
  })
)

export const KeysHttp = HttpApiBuilder.group(
  Api,
  "keys",
  Traced.fn(function* (handlers) {
    const keys = yield* ApiKeys
    return handlers.handleAll({
      create: Traced.fn(function* ({ payload }) {
        const principal = yield* CurrentPrincipal
        return yield* keys.create(principal.tenantId, payload)
      }),
      list: Traced.fn(function* ({ query }) {
        const principal = yield* CurrentPrincipal
        return yield* keys.list(principal.tenantId, query)
      }),
      revoke: Traced.fn(function* ({ params }) {
        const principal = yield* CurrentPrincipal
        yield* keys.revoke(principal.tenantId, params.id)
      })
    })
  })
)

export const layer = Layer.mergeAll(AuthHttp, KeysHttp).pipe(Layer.provide([Accounts.layer, ApiKeys.layer]))
