import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as HttpEffect from "effect/http/HttpEffect"
import * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import type * as HttpApiEndpoint from "effect/http-api/HttpApiEndpoint"
import { Forbidden, TooManyAttempts, Unauthorized } from "../Domain/Problems.ts"
import { Accounts } from "./Accounts.ts"
import { ApiKeyAuth, ApiKeyHeaderAuth, CurrentPrincipal, RequiredScope, SessionAuth, SessionQuota } from "./Api.ts"
import { CountedToday, Quota } from "../Billing/Quota.ts"
import { AppConfig } from "../Config.ts"
import type { TenantId } from "../Domain/Ids.ts"
import { ApiKeys } from "./ApiKeys.ts"
import { firstValue, sessionCookieValue } from "./Cookie.ts"
import { clientAddress } from "./Throttle.ts"

const missingSession = new Unauthorized({
  detail: "Missing session: log in, then send the session cookie or a bearer token"
})
const invalidSession = new Unauthorized({ detail: "Invalid or expired session" })
const missingKey = new Unauthorized({ detail: "Missing API key" })
const invalidKey = new Unauthorized({ detail: "Invalid or revoked API key" })

const safeMethods: ReadonlySet<string> = new Set(["GET", "HEAD", "OPTIONS"])

const withoutDefaultPort = (origin: string) => origin.replace(/^(https:\/\/[^/]+):443$|^(http:\/\/[^/]+):80$/, "$1$2")

/**
 * The origin the request was sent to: the Host (or X-Forwarded-Host) with the
 * scheme a proxy reports, else https when COOKIE_SECURE says the service is
 * behind HTTPS. Trusting these headers is safe here: a cross-site page cannot
 * set them on a victim's request without a CORS preflight, which fails.
 */
const ownOrigin = (request: HttpServerRequest.HttpServerRequest, https: boolean) => {
  const host = firstValue(request.headers["x-forwarded-host"]) ?? firstValue(request.headers.host)
  if (host === undefined) return undefined
  const scheme = firstValue(request.headers["x-forwarded-proto"]) ?? (https ? "https" : "http")
  return withoutDefaultPort(`${scheme}://${host}`)
}

/**
 * Cross-site request forgery guard for writes authenticated by the session
 * cookie: the browser's Origin must be the service's own or one of
 * ALLOWED_ORIGINS. Browsers send Origin on every cross-origin write, so a write
 * without one comes from a non-browser client (or an old browser, which
 * SameSite=Lax already keeps the cookie from on cross-site POSTs); it passes
 * unless Sec-Fetch-Site says it is cross-site.
 */
const makeOriginCheck = Effect.gen(function* () {
  const config = yield* AppConfig
  const allowed = new Set(config.allowedOrigins.map(withoutDefaultPort))
  return Effect.gen(function* () {
    const request = yield* HttpServerRequest.HttpServerRequest
    if (safeMethods.has(request.method.toUpperCase())) return
    const origin = request.headers.origin
    if (origin === undefined) {
      const site = request.headers["sec-fetch-site"]
      if (site === undefined || site === "same-origin" || site === "none") return
      return yield* new Forbidden({ detail: `Cross-site write refused (Sec-Fetch-Site: ${site})` })
    }
    const normalised = withoutDefaultPort(origin.trim().toLowerCase())
    if (allowed.has(normalised) || normalised === ownOrigin(request, config.cookieSecure === true)) return
    return yield* new Forbidden({
      detail: "Cookie-authenticated writes are only accepted from this service's own origin or ALLOWED_ORIGINS"
    })
  })
})

/** Retry-After on whatever response this request gets, when `effect` fails with TooManyAttempts. */
export const retryAfterOnTooMany = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.tapError(effect, (error) =>
    error instanceof TooManyAttempts
      ? HttpEffect.appendPreResponseHandler((_request, response) =>
          Effect.succeed(HttpServerResponse.setHeader(response, "retry-after", String(error.retryAfter)))
        )
      : Effect.void
  )

// The caller's address, for the guard's limit of failed credentials.
const makeClient = Effect.map(AppConfig, (config) =>
  Effect.map(HttpServerRequest.HttpServerRequest, (request) => clientAddress(request, config.trustedProxyHops))
)

export const SessionAuthLayer = Layer.effect(
  SessionAuth,
  Effect.gen(function* () {
    const accounts = yield* Accounts
    const originCheck = yield* makeOriginCheck
    const client = yield* makeClient
    const check = <A, E, R>(httpEffect: Effect.Effect<A, E, R>, token: string) =>
      Effect.gen(function* () {
        if (token === "") return yield* missingSession
        const principal = yield* retryAfterOnTooMany(accounts.authenticate(token, yield* client))
        if (Option.isNone(principal)) return yield* invalidSession
        yield* Effect.annotateCurrentSpan("tenant.id", principal.value.tenantId)
        return yield* Effect.provideService(httpEffect, CurrentPrincipal, principal.value)
      })
    // Why the cookie was refused, for the bearer check that runs next.
    const cookieRefusals = new WeakMap<
      HttpServerRequest.HttpServerRequest,
      Unauthorized | Forbidden | TooManyAttempts
    >()
    return SessionAuth.of({
      // `__Host-session`, else `session` (Cookie.ts). The origin is checked
      // before the session is looked up. A refusal here lets the bearer
      // token, tried next, still authenticate the request.
      sessionCookie: (httpEffect, { credential }) =>
        Effect.gen(function* () {
          const request = yield* HttpServerRequest.HttpServerRequest
          const token = Redacted.value(credential) || sessionCookieValue(request)
          if (token === "") return yield* missingSession
          return yield* Effect.andThen(originCheck, check(httpEffect, token)).pipe(
            Effect.tapError((refusal) =>
              Effect.sync(() => {
                if (
                  refusal instanceof Unauthorized ||
                  refusal instanceof Forbidden ||
                  refusal instanceof TooManyAttempts
                ) {
                  cookieRefusals.set(request, refusal)
                }
              })
            )
          )
        }),
      sessionToken: (httpEffect, { credential }) =>
        Effect.gen(function* () {
          // No bearer token: the cookie was the only credential, so its
          // refusal (foreign origin, invalid session, too many failures) is
          // the answer rather than "missing session".
          const token = Redacted.value(credential)
          const cookieRefusal = cookieRefusals.get(yield* HttpServerRequest.HttpServerRequest)
          if (token === "" && cookieRefusal !== undefined) return yield* Effect.fail(cookieRefusal)
          return yield* check(httpEffect, token)
        })
    })
  })
).pipe(Layer.provide(Accounts.layer))

/**
 * Counts a request against the tenant's daily limit (Quota), for key routes
 * and their session twins alike: the 429 and RateLimit headers, and the day
 * as counted for the token budget of the request's model calls.
 */
const makeDailyCount = Effect.gen(function* () {
  const quota = yield* Quota
  const { enforceDailyLimits } = yield* AppConfig
  return <A, E, R>(httpEffect: Effect.Effect<A, E, R>, tenantId: TenantId) =>
    !enforceDailyLimits
      ? httpEffect
      : Effect.gen(function* () {
          const allowance = yield* quota
            .consume(tenantId)
            .pipe(Effect.tapError((refused) => setLimitHeaders(refused.limit, 0, new Date(refused.resetAt), true)))
          if (allowance.limit !== null)
            yield* setLimitHeaders(allowance.limit, allowance.remaining!, allowance.resetAt, false)
          return yield* Effect.provideService(httpEffect, CountedToday, allowance.counted)
        })
})

// The API-key check, kept apart from its credential so that the X-API-Key
// routes of /api/public can share it.
const makeApiKeyCheck = Effect.gen(function* () {
  const keys = yield* ApiKeys
  const count = yield* makeDailyCount
  const client = yield* makeClient
  return <A, E, R>(httpEffect: Effect.Effect<A, E, R>, credential: Redacted.Redacted, endpoint: HttpApiEndpoint.Top) =>
    Effect.gen(function* () {
      const key = Redacted.value(credential)
      if (key === "") return yield* missingKey
      const principal = yield* retryAfterOnTooMany(keys.authenticate(key, yield* client))
      if (Option.isNone(principal)) return yield* invalidKey
      yield* Effect.annotateCurrentSpan("tenant.id", principal.value.tenantId)
      const required = Context.get(endpoint.annotations, RequiredScope)
      if (!principal.value.scopes.includes(required)) {
        return yield* new Forbidden({ detail: `This API key lacks the "${required}" scope`, requiredScope: required })
      }
      // Counted once authenticated and allowed: refusals for auth, scope or quota do not count.
      return yield* count(
        Effect.provideService(httpEffect, CurrentPrincipal, principal.value),
        principal.value.tenantId
      )
    })
})

/** The session twins of key routes: counted like them (SessionQuota in Api.ts). */
export const SessionQuotaLayer = Layer.effect(
  SessionQuota,
  Effect.map(makeDailyCount, (count) =>
    SessionQuota.of((httpEffect) =>
      Effect.flatMap(CurrentPrincipal, (principal) => count(httpEffect, principal.tenantId))
    )
  )
)

/** RateLimit-* headers (and Retry-After when refused) on whatever response this request gets. */
export const setLimitHeaders = (limit: number, remaining: number, resetAt: Date, refused: boolean) =>
  Effect.gen(function* () {
    const seconds = String(Math.max(0, Math.ceil((resetAt.getTime() - (yield* Clock.currentTimeMillis)) / 1000)))
    const headers: Record<string, string> = {
      "ratelimit-limit": String(limit),
      "ratelimit-remaining": String(remaining),
      "ratelimit-reset": seconds
    }
    if (refused) headers["retry-after"] = seconds
    yield* HttpEffect.appendPreResponseHandler((_request, response) =>
      Effect.succeed(HttpServerResponse.setHeaders(response, headers))
    )
  })

export const ApiKeyAuthLayer = Layer.effect(
  ApiKeyAuth,
  Effect.map(makeApiKeyCheck, (check) =>
    ApiKeyAuth.of({
      apiKeyBearer: (httpEffect, { credential, endpoint }) => check(httpEffect, credential, endpoint)
    })
  )
)

export const ApiKeyHeaderAuthLayer = Layer.effect(
  ApiKeyHeaderAuth,
  Effect.map(makeApiKeyCheck, (check) =>
    ApiKeyHeaderAuth.of({
      apiKeyHeader: (httpEffect, { credential, endpoint }) => check(httpEffect, credential, endpoint)
    })
  )
)

/** The auth middlewares. */
export const layer = Layer.mergeAll(SessionAuthLayer, SessionQuotaLayer, ApiKeyAuthLayer, ApiKeyHeaderAuthLayer).pipe(
  Layer.provide(ApiKeys.layer)
)

/** The session behind a session-authenticated route. */
export const currentSession = Effect.flatMap(CurrentPrincipal, (principal) =>
  principal._tag === "Session"
    ? Effect.succeed(principal)
    : Effect.die(new Error("A session route ran without a session principal"))
)
