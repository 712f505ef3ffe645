import { Context, Schema } from "effect"
import {
  HttpApiEndpoint,
  HttpApiGroup,
  HttpApiMiddleware,
  HttpApiSchema,
  HttpApiSecurity,
  OpenApi
} from "effect/http-api"
import { ApiKeyId, SessionId, TenantId, UserId } from "../Domain/Ids.ts"
import { boundedArray, text } from "../Domain/Input.ts"
import {
  Conflict,
  Forbidden,
  NotFound,
  ServiceUnavailable,
  TooManyAttempts,
  TooManyRequests,
  Unauthorized
} from "../Domain/Problems.ts"

// ---------------------------------------------------------------------------
// Who is calling
// ---------------------------------------------------------------------------

export const Scope = Schema.Literals(["read", "chat", "execute", "teams"])
export type Scope = typeof Scope.Type
export const allScopes: ReadonlyArray<Scope> = Scope.literals

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

export const sessionCookieName = "session"
export const sessionCookie = HttpApiSecurity.apiKey({ key: sessionCookieName, in: "cookie" })

/** Management routes: the session cookie, or `Authorization: Bearer <session token>`. */
export class SessionAuth extends HttpApiMiddleware.Service<SessionAuth, {
  provides: CurrentPrincipal
}>()("agent-host/SessionAuth", {
  security: {
    sessionCookie,
    sessionToken: HttpApiSecurity.bearer
  },
  // Forbidden: a cookie-authenticated write from a foreign Origin.
  error: [Unauthorized, Forbidden]
}) {}

/** /api/v1: `Authorization: Bearer <API key>`. */
export class ApiKeyAuth extends HttpApiMiddleware.Service<ApiKeyAuth, {
  provides: CurrentPrincipal
}>()("agent-host/ApiKeyAuth", {
  security: {
    apiKeyBearer: HttpApiSecurity.bearer.pipe(
      HttpApiSecurity.annotate(OpenApi.Description, "An API key (`ak_...`) as a bearer token.")
    )
  },
  error: [Unauthorized, Forbidden, TooManyRequests]
}) {}

/** /api/public: `X-API-Key: <API key>`, the same keys, scopes and quota as /api/v1. */
export class ApiKeyHeaderAuth extends HttpApiMiddleware.Service<ApiKeyHeaderAuth, {
  provides: CurrentPrincipal
}>()("agent-host/ApiKeyHeaderAuth", {
  security: {
    apiKeyHeader: HttpApiSecurity.apiKey({ key: "X-API-Key", in: "header" }).pipe(
      HttpApiSecurity.annotate(OpenApi.Description, "An API key (`ak_...`) in the `X-API-Key` header.")
    )
  },
  error: [Unauthorized, Forbidden, TooManyRequests]
}) {}

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
  password: text(Schema.isMaxLength(1024))
})

export const LoginResponse = Schema.Struct({
  token: Schema.String,
  expiresAt: Schema.Date,
  user: User
})

export class AuthApi extends HttpApiGroup.make("auth")
  .add(
    HttpApiEndpoint.post("register", "/register", {
      payload: RegisterRequest,
      success: Account.pipe(HttpApiSchema.status(201)),
      error: [Conflict, TooManyAttempts, ServiceUnavailable]
    }),
    HttpApiEndpoint.post("login", "/login", {
      payload: LoginRequest,
      success: LoginResponse,
      error: [Unauthorized, TooManyAttempts, ServiceUnavailable]
    }),
    HttpApiEndpoint.post("logout", "/logout", {
      success: HttpApiSchema.NoContent
    }).middleware(SessionAuth),
    HttpApiEndpoint.get("me", "/me", {
      success: Account
    }).middleware(SessionAuth)
  )
  .prefix("/api/auth")
  .annotateMerge(OpenApi.annotations({ title: "Accounts and sessions" }))
{}

// ---------------------------------------------------------------------------
// API keys
// ---------------------------------------------------------------------------

export const ApiKey = Schema.Struct({
  id: ApiKeyId,
  name: Schema.String,
  prefix: Schema.String,
  scopes: Schema.Array(Scope),
  createdAt: Schema.Date,
  expiresAt: Schema.NullOr(Schema.Date).annotate({ description: "When the key stops working; null when it never expires." }),
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
  return Number(month) >= 1 && Number(month) <= 12 && Number(day) >= 1 &&
    Number(day) <= new Date(Date.UTC(Number(year), Number(month), 0)).getUTCDate() &&
    Number(hour) <= 23 && Number(minute) <= 59 && Number(second) <= 59 &&
    Number(offsetHours) <= 23 && Number(offsetMinutes) <= 59 && !Number.isNaN(Date.parse(raw))
}
export const KeyExpiry = text(
  Schema.makeFilter((raw: string) =>
    isIsoDateTime(raw) || "Expected an ISO 8601 date-time with a time zone, such as 2027-01-31T00:00:00Z"
  ),
  Schema.makeFilter((raw: string) => {
    const at = Date.parse(raw)
    return at > Date.now() && at <= Date.now() + maxKeyLifetimeDays * 86_400_000 ||
      `Expected a time in the future, at most ${maxKeyLifetimeDays} days ahead`
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
      success: CreatedApiKey.pipe(HttpApiSchema.status(201))
    }),
    HttpApiEndpoint.get("list", "/", {
      success: Schema.Struct({ data: Schema.Array(ApiKey), total: Schema.Int })
    }),
    HttpApiEndpoint.delete("revoke", "/:id", {
      params: { id: ApiKeyId },
      success: HttpApiSchema.NoContent,
      error: NotFound
    })
  )
  .middleware(SessionAuth)
  .prefix("/api/keys")
  .annotateMerge(OpenApi.annotations({ title: "API keys" }))
{}

