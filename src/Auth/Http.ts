import { Effect, Layer } from "effect"
import { HttpEffect, HttpServerResponse } from "effect/http"
import { HttpApiBuilder } from "effect/http-api"
import { Api } from "../Api.ts"
import { AppConfig } from "../Config.ts"
import { Accounts } from "./Accounts.ts"
import { CurrentPrincipal, sessionCookie, sessionCookieName } from "./Api.ts"
import { ApiKeys } from "./ApiKeys.ts"
import { currentSession } from "./Middleware.ts"

export const AuthHttp = HttpApiBuilder.group(
  Api,
  "auth",
  Effect.fn(function*(handlers) {
    const accounts = yield* Accounts
    const config = yield* AppConfig
    return handlers.handleAll({
      register: ({ payload }) => accounts.register(payload),
      login: Effect.fn(function*({ payload }) {
        const session = yield* accounts.login(payload)
        yield* HttpApiBuilder.securitySetCookie(sessionCookie, session.token, {
          httpOnly: true,
          sameSite: "lax",
          path: "/",
          secure: config.cookieSecure,
          expires: session.expiresAt
        })
        return session
      }),
      logout: Effect.fn(function*() {
        const session = yield* currentSession
        yield* accounts.logout(session.sessionId)
        yield* HttpEffect.appendPreResponseHandler((_request, response) =>
          Effect.succeed(HttpServerResponse.expireCookieUnsafe(response, sessionCookieName, { path: "/" }))
        )
      }),
      me: Effect.fn(function*() {
        const session = yield* currentSession
        return yield* accounts.account(session.userId)
      })
    })
  })
)

export const KeysHttp = HttpApiBuilder.group(
  Api,
  "keys",
  Effect.fn(function*(handlers) {
    const keys = yield* ApiKeys
    return handlers.handleAll({
      create: Effect.fn(function*({ payload }) {
        const principal = yield* CurrentPrincipal
        return yield* keys.create(principal.tenantId, payload)
      }),
      list: Effect.fn(function*() {
        const principal = yield* CurrentPrincipal
        return yield* keys.list(principal.tenantId)
      }),
      revoke: Effect.fn(function*({ params }) {
        const principal = yield* CurrentPrincipal
        yield* keys.revoke(principal.tenantId, params.id)
      })
    })
  })
)

export const layer = Layer.mergeAll(AuthHttp, KeysHttp).pipe(
  Layer.provide([Accounts.layer, ApiKeys.layer])
)

