import * as Context from "effect/Context"
import * as Schema from "effect/Schema"
import * as HttpApiEndpoint from "effect/http-api/HttpApiEndpoint"
import * as HttpApiGroup from "effect/http-api/HttpApiGroup"
import * as HttpApiMiddleware from "effect/http-api/HttpApiMiddleware"
import * as HttpApiSchema from "effect/http-api/HttpApiSchema"
import * as HttpApiSecurity from "effect/http-api/HttpApiSecurity"
import * as OpenApi from "effect/http-api/OpenApi"
import { noCredential, operation, type OperationDoc } from "../Domain/ApiDocs.ts"
import { ApiKeyId, type SessionId, TenantId, UserId } from "../Domain/Ids.ts"
import { boundedArray, text } from "../Domain/Input.ts"
import { PageOf, PageQuery } from "../Domain/Page.ts"
import {
  BadRequest,
  Conflict,
  Forbidden,
  NotFound,
  QuotaReached,
  ServiceUnavailable,
  TooManyAttempts,
  TooManyRequests,
  Unauthorized
} from "../Domain/Problems.ts"

// ---------------------------------------------------------------------------
// Who is calling
// ---------------------------------------------------------------------------

export const Scope = Schema.Literals(["read", "chat", "execute", "teams", "approvals"])
export type Scope = typeof Scope.Type
export const allScopes: ReadonlyArray<Scope> = Scope.literals
/**
 * The scopes of a key created without a list (every key made before
 * `approvals` existed, too): deciding approvals is never granted unless asked
 * for by name.
 */
export const defaultScopes: ReadonlyArray<Scope> = allScopes.filter((scope) => scope !== "approvals")

export type Principal =
  | {
      readonly _tag: "Session"
      readonly tenantId: TenantId
      readonly userId: UserId
      readonly sessionId: SessionId
    }
  | {
      readonly _tag: "ApiKey"
      readonly tenantId: TenantId
      readonly keyId: ApiKeyId
      readonly scopes: ReadonlyArray<Scope>
    }

/** The authenticated caller, provided by the auth middlewares; the only source of the tenant. */
export class CurrentPrincipal extends Context.Service<CurrentPrincipal, Principal>()("agent-host/CurrentPrincipal") {}

/** The scope an API-key endpoint needs; endpoints are annotated with it. */
export const RequiredScope = Context.Reference<Scope>("agent-host/RequiredScope", {
  defaultValue: () => "read"
})

/**
 * The session cookie: `__Host-session` (Secure, Path=/, no Domain, so no
 * other origin can set or shadow it), or `session` without Secure where the
 * service is reached over plain HTTP on localhost (COOKIE_SECURE).
 */
export const sessionCookieName = "__Host-session"
export const plainSessionCookieName = "session"
export const sessionCookie = HttpApiSecurity.apiKey({ key: sessionCookieName, in: "cookie" }).pipe(
  HttpApiSecurity.annotate(
    OpenApi.Description,
    "The session cookie set by `POST /api/auth/login`: `__Host-session`, or `session` when the service is reached " +
      "over plain HTTP on localhost (COOKIE_SECURE); either name is accepted. Writes with it are refused (403) " +
      "unless they come from this service's own origin or ALLOWED_ORIGINS."
  )
)

/** Management routes: the session cookie, or `Authorization: Bearer <session token>`. */
export class SessionAuth extends HttpApiMiddleware.Service<
  SessionAuth,
  {
    provides: CurrentPrincipal
  }
>()("agent-host/SessionAuth", {
  security: {
    sessionCookie,
    sessionToken: HttpApiSecurity.bearer.pipe(
      HttpApiSecurity.annotate(OpenApi.Description, "The `token` of `POST /api/auth/login` as a bearer token.")
    )
  },
  // Forbidden: a cookie-authenticated write from a foreign Origin. TooManyAttempts:
  // too many failed credentials from the client's address (CREDENTIAL_FAILURES_PER_ADDRESS).
  error: [Unauthorized, Forbidden, TooManyAttempts]
}) {}

/**
 * Session routes that start model work or write knowledge (chat, execute,
 * team run, upload, rechunk, search): counted against the plan's daily
 * requests like their API-key twins, in the same count, refused at the same
 * count with the same 429 and RateLimit headers. Applied after SessionAuth,
 * whose principal it counts.
 */
export class SessionQuota extends HttpApiMiddleware.Service<
  SessionQuota,
  {
    requires: CurrentPrincipal
  }
>()("agent-host/SessionQuota", {
  error: TooManyRequests
}) {}

/** /api/v1: `Authorization: Bearer <API key>`. */
export class ApiKeyAuth extends HttpApiMiddleware.Service<
  ApiKeyAuth,
  {
    provides: CurrentPrincipal
  }
>()("agent-host/ApiKeyAuth", {
  security: {
    apiKeyBearer: HttpApiSecurity.bearer.pipe(
      HttpApiSecurity.annotate(OpenApi.Description, "An API key (`ak_...`) as a bearer token.")
    )
  },
  error: [Unauthorized, Forbidden, TooManyRequests, TooManyAttempts]
}) {}

/** /api/public: `X-API-Key: <API key>`, the same keys, scopes and quota as /api/v1. */
export class ApiKeyHeaderAuth extends HttpApiMiddleware.Service<
  ApiKeyHeaderAuth,
  {
    provides: CurrentPrincipal
  }
>()("agent-host/ApiKeyHeaderAuth", {
  security: {
    apiKeyHeader: HttpApiSecurity.apiKey({ key: "X-API-Key", in: "header" }).pipe(
      HttpApiSecurity.annotate(OpenApi.Description, "An API key (`ak_...`) in the `X-API-Key` header.")
    )
  },
  error: [Unauthorized, Forbidden, TooManyRequests, TooManyAttempts]
}) {}

// How each credential reads in an operation's description (src/Domain/ApiDocs.ts).
export const sessionCredential = "Session (cookie or bearer token)."

/**
 * An API-key operation's scope, and its documentation naming that scope: the
 * scope the auth middleware checks is the one the reference states.
 */
export const keyOperation = (scope: Scope, via: "bearer" | "header", doc: Omit<OperationDoc, "credential">) =>
  Context.add(
    operation({
      ...doc,
      credential: `API key ${via === "bearer" ? "as a bearer token" : "in `X-API-Key`"} with the \`${scope}\` scope.`
    }),
    RequiredScope,
    scope
  )

// ---------------------------------------------------------------------------
// Accounts and sessions
// ---------------------------------------------------------------------------

export const Email = text(
  Schema.isMaxLength(254),
  Schema.isPattern(/^[^\s@]+@[^\s@]+\.[^\s@]+$/, { message: "Expected an e-mail address" })
)

export const Password = text(
  Schema.isMinLength(8, { message: "Expected a password of at least 8 characters" }),
  Schema.isMaxLength(1024)
)

export const Plan = Schema.Literals(["free", "pro", "business"])
export type Plan = typeof Plan.Type

export const User = Schema.Struct({
  id: UserId,
  email: Schema.String,
  name: Schema.NullOr(Schema.String)
})
export type User = typeof User.Type

export const Tenant = Schema.Struct({
  id: TenantId,
  name: Schema.String,
  plan: Plan
})
export type Tenant = typeof Tenant.Type

export const RegisterRequest = Schema.Struct({
  email: Email,
  password: Password,
  name: Schema.optionalKey(text(Schema.isMinLength(1), Schema.isMaxLength(200)))
})

export const Account = Schema.Struct({ user: User, tenant: Tenant })

export const LoginRequest = Schema.Struct({
  email: text(Schema.isMaxLength(254)),
  password: text(Schema.isMaxLength(1024)),
  returnToken: Schema.optionalKey(
    Schema.Boolean.annotate({
      description: "Return the session `token` in the body even though the request comes from a browser."
    })
  )
})

export const LoginResponse = Schema.Struct({
  token: Schema.optionalKey(
    Schema.String.annotate({
      description:
        "The session as a bearer token, for API clients. Left out when the request comes from a browser " +
        "(it sends `Origin` or `Sec-Fetch-Site`), which has the HttpOnly cookie instead, unless it sent `returnToken: true`."
    })
  ),
  expiresAt: Schema.Date,
  user: User
})

export class AuthApi extends HttpApiGroup.make("auth")
  .add(
    HttpApiEndpoint.post("register", "/register", {
      payload: RegisterRequest,
      success: Account.pipe(HttpApiSchema.status(201)),
      error: [Conflict, TooManyAttempts, ServiceUnavailable]
    }).annotateMerge(
      operation({
        summary: "Register",
        description: "Creates a user and its tenant on the free plan. It does not log in.",
        credential: noCredential,
        errors:
          "400 on invalid fields, 409 when the e-mail is taken, 429 with Retry-After past AUTH_ATTEMPTS_PER_ADDRESS " +
          "attempts or AUTH_ATTEMPTS_PER_ACCOUNT failures from this address for this e-mail in AUTH_THROTTLE_WINDOW, 503 with Retry-After when too many passwords " +
          "are being hashed at once."
      })
    ),
    HttpApiEndpoint.post("login", "/login", {
      payload: LoginRequest,
      success: LoginResponse,
      error: [Unauthorized, TooManyAttempts, ServiceUnavailable]
    }).annotateMerge(
      operation({
        summary: "Log in",
        description:
          "Starts a session: sets the HttpOnly session cookie and returns the session's expiry and, to " +
          "API clients, the same session as a `token` for `Authorization: Bearer`. A browser's request (with `Origin` " +
          "or `Sec-Fetch-Site`) gets no `token` unless it sends `returnToken: true`: a script in the page cannot read " +
          "the cookie, and should not read the session from the body either.",
        credential: noCredential,
        errors:
          "400 on invalid fields, 401 on a wrong e-mail or password, 429 with Retry-After past the attempt limits " +
          "(as for register), 503 with Retry-After when too many passwords are being hashed at once."
      })
    ),
    HttpApiEndpoint.post("logout", "/logout", {
      success: HttpApiSchema.NoContent
    })
      .middleware(SessionAuth)
      .annotateMerge(
        operation({
          summary: "Log out",
          description: "Ends the session that authenticates the request and expires the session cookie.",
          credential: sessionCredential
        })
      ),
    HttpApiEndpoint.get("me", "/me", {
      success: Account
    })
      .middleware(SessionAuth)
      .annotateMerge(
        operation({
          summary: "Get the current account",
          description: "The logged-in user and their tenant, with its plan.",
          credential: sessionCredential
        })
      )
  )
  .prefix("/api/auth")
  .annotateMerge(
    OpenApi.annotations({
      title: "Accounts and sessions",
      description: "Register, log in and out. A session is the credential of every management route (/api/...)."
    })
  ) {}

// ---------------------------------------------------------------------------
// API keys
// ---------------------------------------------------------------------------

export const ApiKey = Schema.Struct({
  id: ApiKeyId,
  name: Schema.String,
  prefix: Schema.String,
  scopes: Schema.Array(Scope),
  createdAt: Schema.Date,
  expiresAt: Schema.NullOr(Schema.Date).annotate({
    description: "When the key stops working; null when it never expires."
  }),
  lastUsedAt: Schema.NullOr(Schema.Date).annotate({
    description: "When the key last authenticated a request; written in batches, so up to API_KEY_LAST_USED_FLUSH late."
  })
})
export type ApiKey = typeof ApiKey.Type

/** The longest lifetime a key may be given. */
export const maxKeyLifetimeDays = 3_650

// An ISO 8601 date-time with a time zone (`2027-01-31T00:00:00Z`), in the future, at most ten years ahead.
const isoDateTime = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2})(?:\.\d{1,9})?)?(?:Z|[+-](\d{2}):(\d{2}))$/
// Date.parse rolls 2030-02-31 over into March; a date that does not exist is refused instead.
const isIsoDateTime = (raw: string) => {
  const match = isoDateTime.exec(raw)
  if (match === null) return false
  const [year, month, day, hour, minute, second = "0", offsetHours = "0", offsetMinutes = "0"] = match.slice(1)
  return (
    Number(month) >= 1 &&
    Number(month) <= 12 &&
    Number(day) >= 1 &&
    Number(day) <= new Date(Date.UTC(Number(year), Number(month), 0)).getUTCDate() &&
    Number(hour) <= 23 &&
    Number(minute) <= 59 &&
    Number(second) <= 59 &&
    Number(offsetHours) <= 23 &&
    Number(offsetMinutes) <= 59 &&
    !Number.isNaN(Date.parse(raw))
  )
}
export const KeyExpiry = text(
  Schema.makeFilter(
    (raw: string) =>
      isIsoDateTime(raw) || "Expected an ISO 8601 date-time with a time zone, such as 2027-01-31T00:00:00Z"
  ),
  Schema.makeFilter((raw: string) => {
    const at = Date.parse(raw)
    return (
      (at > Date.now() && at <= Date.now() + maxKeyLifetimeDays * 86_400_000) ||
      `Expected a time in the future, at most ${maxKeyLifetimeDays} days ahead`
    )
  })
).annotate({ description: "When the key stops working (ISO 8601, in the future, at most ten years ahead)." })

export const CreatedApiKey = Schema.Struct({
  ...ApiKey.fields,
  key: Schema.String.annotate({ description: "The plaintext key. Shown only in this response." })
})

export const CreateApiKeyRequest = Schema.Struct({
  name: text(Schema.isMinLength(1), Schema.isMaxLength(200)),
  scopes: Schema.optionalKey(
    // Duplicates are dropped, so a list longer than the scopes themselves has nothing to say.
    boundedArray(Scope, {
      min: 1,
      max: allScopes.length,
      tooFew: "Expected at least one scope; omit scopes for all",
      tooMany: `Expected at most ${allScopes.length} scopes`
    })
  ),
  expiresAt: Schema.optionalKey(Schema.NullOr(KeyExpiry))
})

export class KeysApi extends HttpApiGroup.make("keys")
  .add(
    HttpApiEndpoint.post("create", "/", {
      payload: CreateApiKeyRequest,
      success: CreatedApiKey.pipe(HttpApiSchema.status(201)),
      error: QuotaReached
    }).annotateMerge(
      operation({
        summary: "Create an API key",
        description:
          "Creates a key with the given scopes (all of them when `scopes` is omitted) and, optionally, an " +
          "`expiresAt` from which it is refused. The plaintext `key` is in this response only; the service keeps a hash.",
        credential: sessionCredential,
        errors:
          "400 on invalid fields, 429 when the tenant has as many keys (neither revoked nor expired) as its plan " +
          "allows (MAX_API_KEYS)."
      })
    ),
    HttpApiEndpoint.get("list", "/", {
      query: PageQuery,
      success: PageOf(ApiKey),
      error: BadRequest
    }).annotateMerge(
      operation({
        summary: "List API keys",
        description:
          "The tenant's keys that are not revoked, by prefix and scopes (never the key itself), with " +
          "when each expires and when it was last used, a page at a time (`limit`, `cursor`), oldest first.",
        credential: sessionCredential,
        errors: "400 on a bad `limit` or `cursor`."
      })
    ),
    HttpApiEndpoint.delete("revoke", "/:id", {
      params: { id: ApiKeyId },
      success: HttpApiSchema.NoContent,
      error: NotFound
    }).annotateMerge(
      operation({
        summary: "Revoke an API key",
        description: "Revokes the key at once, on every node.",
        credential: sessionCredential,
        errors: "404 when the key is not the tenant's or is already revoked."
      })
    )
  )
  .middleware(SessionAuth)
  .prefix("/api/keys")
  .annotateMerge(
    OpenApi.annotations({
      title: "API keys",
      description:
        "The keys that authenticate /api/v1 (as a bearer token) and /api/public (in `X-API-Key`), " +
        "each limited to scopes: `read`, `chat`, `execute`, `teams`."
    })
  ) {}
