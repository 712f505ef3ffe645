import * as Cache from "effect/Cache"
import * as Context from "effect/Context"
import * as DateTime from "effect/DateTime"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import { AppConfig } from "../Config.ts"
import { newId, SessionId, type UserId } from "../Domain/Ids.ts"
import { Conflict, Unauthorized } from "../Domain/Problems.ts"
import type { Principal } from "./Api.ts"
import { CredentialGuard } from "./CredentialGuard.ts"
import { AuthRepo } from "./Repo.ts"
import { hashPassword, hashSecret, newSecret, PasswordHasher } from "./Secrets.ts"
import { AuthThrottle } from "./Throttle.ts"
import * as Traced from "../Observability/Traced.ts"

const invalidCredentials = new Unauthorized({ detail: "Invalid e-mail or password" })

/** Accounts (a tenant and its owner) and the sessions of their users. */
export class Accounts extends Context.Service<Accounts>()("agent-host/Accounts", {
  make: Effect.gen(function* () {
    const repo = yield* AuthRepo
    const config = yield* AppConfig
    const hasher = yield* PasswordHasher
    const throttle = yield* AuthThrottle
    const guard = yield* CredentialGuard
    // Unknown e-mails are checked against this hash, so they cost the same time as a wrong password.
    const decoyHash = yield* Effect.cached(hashPassword(newSecret("st_")))

    type LiveSession = { readonly expiresAt: number; readonly principal: Principal & { readonly _tag: "Session" } }
    const lookup = (tokenHash: string) =>
      repo.findLiveSession(tokenHash).pipe(
        Effect.map(
          Option.map(
            (row): LiveSession => ({
              expiresAt: row.expiresAt.getTime(),
              principal: { _tag: "Session", tenantId: row.tenantId, userId: row.userId, sessionId: row.id }
            })
          )
        )
      )
    // Live sessions are trusted for SESSION_CACHE_TTL and never past their
    // expiry; a logout on any node drops the entry (the guard's channel, which
    // also empties the cache at each reconnection).
    const live = yield* Cache.makeWith(lookup, {
      capacity: 10_000,
      timeToLive: (exit) => (Exit.isSuccess(exit) && Option.isSome(exit.value) ? config.sessionCacheTtl : Duration.zero)
    })
    yield* guard.subscribe((event) =>
      event._tag === "Listening"
        ? Cache.invalidateAll(live)
        : event._tag === "SessionRevoked"
          ? Cache.invalidate(live, event.hash)
          : Effect.void
    )
    const unexpired = (found: Option.Option<LiveSession>) =>
      Option.map(
        Option.filter(found, (session) => session.expiresAt > Date.now()),
        (session) => session.principal
      )

    /** `client`: the caller's address, for throttling. */
    const register = Traced.fn("Accounts.register")(function* (
      input: {
        readonly email: string
        readonly password: string
        readonly name?: string | undefined
      },
      client: string
    ) {
      // A taken e-mail counts as a failure of the pair (it tells that the account exists), not against the e-mail.
      const created = yield* throttle.guard(
        client,
        input.email,
        Effect.gen(function* () {
          const passwordHash = yield* hasher.hash(input.password)
          return yield* repo
            .createAccount({
              email: input.email.trim(),
              name: input.name ?? null,
              passwordHash,
              tenantName: input.name ?? input.email.trim()
            })
            .pipe(
              Effect.map((account) => Option.some(account)),
              Effect.catchTag("EmailTaken", () => Effect.succeedNone)
            )
        }),
        { ceiling: false }
      )
      if (Option.isNone(created)) return yield* new Conflict({ detail: "An account with this e-mail already exists" })
      return created.value
    })

    const login = Traced.fn("Accounts.login")(function* (
      input: { readonly email: string; readonly password: string },
      client: string
    ) {
      // The throttle's buckets come before the lookup: a known and an unknown e-mail are throttled alike.
      const user = yield* throttle.guard(
        client,
        input.email,
        Effect.gen(function* () {
          const found = yield* repo.findUserByEmail(input.email.trim())
          const storedHash = Option.isSome(found) ? found.value.passwordHash : yield* decoyHash
          const matches = yield* hasher.verify(input.password, storedHash)
          return matches ? found : Option.none()
        }),
        { ceiling: true }
      )
      if (Option.isNone(user)) return yield* invalidCredentials
      const token = newSecret("st_")
      const now = yield* DateTime.now
      const expiresAt = DateTime.toDateUtc(DateTime.addDuration(now, config.sessionTtl))
      const tokenHash = hashSecret(token)
      const sessionId = SessionId.make(newId())
      yield* repo.insertSession({
        id: sessionId,
        tenantId: user.value.tenantId,
        userId: user.value.id,
        tokenHash,
        expiresAt
      })
      // Known valid here at once, even from an address past its failures;
      // other nodes hear of it from the insert's trigger (migration 0024).
      yield* guard.issued(tokenHash)
      yield* Cache.set(
        live,
        tokenHash,
        Option.some<LiveSession>({
          expiresAt: expiresAt.getTime(),
          principal: { _tag: "Session", tenantId: user.value.tenantId, userId: user.value.id, sessionId }
        })
      )
      return {
        token,
        expiresAt,
        user: { id: user.value.id, email: user.value.email, name: user.value.name }
      }
    })

    /** The session a token belongs to, if it is live; `client` is the caller's address (CredentialGuard). */
    const authenticate = Traced.fn("Accounts.authenticate")(function* (token: string, client: string) {
      if (!token.startsWith("st_")) return Option.none<Principal>()
      const tokenHash = hashSecret(token)
      return yield* guard.verify<Principal>({
        credential: "session",
        hash: tokenHash,
        client,
        known: Effect.map(Cache.getSuccess(live, tokenHash), (cached) => unexpired(Option.flatten(cached))),
        lookup: Effect.suspend(() => (guard.listening() ? Cache.get(live, tokenHash) : lookup(tokenHash))).pipe(
          Effect.map(unexpired)
        )
      })
    })

    const logout = Traced.fn("Accounts.logout")(function* (sessionId: SessionId) {
      const tokenHash = yield* repo.revokeSession(sessionId)
      if (Option.isSome(tokenHash)) yield* Cache.invalidate(live, tokenHash.value)
    })

    const account = Traced.fn("Accounts.account")(function* (userId: UserId) {
      const row = yield* repo.findAccount(userId)
      return {
        user: { id: row.id, email: row.email, name: row.name },
        tenant: { id: row.tenantId, name: row.tenantName, plan: row.plan }
      }
    })

    return { register, login, authenticate, logout, account } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make).pipe(
    Layer.provide([AuthRepo.layer, PasswordHasher.layer, AuthThrottle.layer, CredentialGuard.layer])
  )
  static readonly sessionCookieMaxAge = (ttl: Duration.Duration) => Duration.toSeconds(ttl)
}
