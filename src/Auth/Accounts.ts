import * as Context from "effect/Context"
import * as DateTime from "effect/DateTime"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import { AppConfig } from "../Config.ts"
import { newId, SessionId, type UserId } from "../Domain/Ids.ts"
import { Conflict, Unauthorized } from "../Domain/Problems.ts"
import type { Principal } from "./Api.ts"
import { AuthRepo } from "./Repo.ts"
import { hashPassword, hashSecret, newSecret, PasswordHasher } from "./Secrets.ts"
import { AuthThrottle } from "./Throttle.ts"
import * as Traced from "../Platform/Traced.ts"

const invalidCredentials = new Unauthorized({ detail: "Invalid e-mail or password" })

/** Accounts (a tenant and its owner) and the sessions of their users. */
export class Accounts extends Context.Service<Accounts>()("agent-host/Accounts", {
  make: Effect.gen(function*() {
    const repo = yield* AuthRepo
    const config = yield* AppConfig
    const hasher = yield* PasswordHasher
    const throttle = yield* AuthThrottle
    // Unknown e-mails are checked against this hash, so they cost the same time as a wrong password.
    const decoyHash = yield* Effect.cached(hashPassword(newSecret("st_")))

    /** `client`: the caller's address, for throttling. */
    const register = Traced.fn("Accounts.register")(function*(input: {
      readonly email: string
      readonly password: string
      readonly name?: string | undefined
    }, client: string) {
      // A taken e-mail counts as a failure of the pair (it tells that the account exists), not against the e-mail.
      const created = yield* throttle.guard(
        client,
        input.email,
        Effect.gen(function*() {
          const passwordHash = yield* hasher.hash(input.password)
          return yield* repo.createAccount({
            email: input.email.trim(),
            name: input.name ?? null,
            passwordHash,
            tenantName: input.name ?? input.email.trim()
          }).pipe(
            Effect.map((account) => Option.some(account)),
            Effect.catchTag("EmailTaken", () => Effect.succeedNone)
          )
        }),
        { ceiling: false }
      )
      if (Option.isNone(created)) return yield* new Conflict({ detail: "An account with this e-mail already exists" })
      return created.value
    })

    const login = Traced.fn("Accounts.login")(function*(
      input: { readonly email: string; readonly password: string },
      client: string
    ) {
      // The throttle's buckets come before the lookup: a known and an unknown e-mail are throttled alike.
      const user = yield* throttle.guard(
        client,
        input.email,
        Effect.gen(function*() {
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
      yield* repo.insertSession({
        id: SessionId.make(newId()),
        tenantId: user.value.tenantId,
        userId: user.value.id,
        tokenHash: hashSecret(token),
        expiresAt
      })
      return {
        token,
        expiresAt,
        user: { id: user.value.id, email: user.value.email, name: user.value.name }
      }
    })

    /** The session a token belongs to, if it is live. */
    const authenticate = Traced.fn("Accounts.authenticate")(function*(token: string) {
      if (!token.startsWith("st_")) return Option.none<Principal>()
      const session = yield* repo.findLiveSession(hashSecret(token))
      return Option.map(session, (row): Principal => ({
        _tag: "Session",
        tenantId: row.tenantId,
        userId: row.userId,
        sessionId: row.id
      }))
    })

    const logout = (sessionId: SessionId) => repo.revokeSession(sessionId)

    const account = Traced.fn("Accounts.account")(function*(userId: UserId) {
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
    Layer.provide([AuthRepo.layer, PasswordHasher.layer, AuthThrottle.layer])
  )
  static readonly sessionCookieMaxAge = (ttl: Duration.Duration) => Duration.toSeconds(ttl)
}
