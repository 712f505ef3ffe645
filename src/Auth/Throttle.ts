import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"
import type * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as Crypto from "node:crypto"
import { AppConfig } from "../Config.ts"
import { TooManyAttempts } from "../Domain/Problems.ts"
import { normalizeEmail } from "./Email.ts"
import { ThrottleRepo } from "./Repo.ts"
import * as Traced from "../Observability/Traced.ts"

// An IPv6 address as its /64: one host usually holds a whole /64, so one
// bucket per address would give it billions.
const ipv6Prefix = (address: string): string => {
  const [head, tail] = address.split("::") as [string, string | undefined]
  const left = head === "" ? [] : head.split(":")
  const right = tail === undefined || tail === "" ? [] : tail.split(":")
  const groups =
    tail === undefined ? left : [...left, ...Array(Math.max(0, 8 - left.length - right.length)).fill("0"), ...right]
  return `${groups
    .slice(0, 4)
    .map((group) => group.toLowerCase().replace(/^0+(?=.)/, ""))
    .join(":")}::/64`
}

const normaliseAddress = (address: string): string => {
  const plain = address
    .trim()
    .replace(/^\[(.*)\]$/, "$1")
    .replace(/%.*$/, "")
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(plain)
  if (mapped !== null) return mapped[1]!
  return plain.includes(":") ? ipv6Prefix(plain) : plain
}

/**
 * The client a request comes from: the socket's peer, or with
 * TRUSTED_PROXY_HOPS = n, the address the outermost of the n trusted proxies
 * saw (the n-th entry of X-Forwarded-For from the right). Entries further
 * left were written by the client and are ignored.
 */
export const clientAddress = (request: HttpServerRequest.HttpServerRequest, trustedProxyHops: number): string => {
  const peer = Option.getOrElse(request.peerAddress, () => "unknown")
  if (trustedProxyHops <= 0) return normaliseAddress(peer)
  const forwarded = (request.headers["x-forwarded-for"] ?? "")
    .split(",")
    .map((entry) => entry.trim())
    .filter((entry) => entry !== "")
  if (forwarded.length === 0) return normaliseAddress(peer)
  return normaliseAddress(forwarded[Math.max(0, forwarded.length - trustedProxyHops)]!)
}

// Keys are hashed: the table never holds the e-mails of accounts that may not exist.
const bucketKey = (kind: "address" | "pair" | "failures", value: string) =>
  Crypto.createHash("sha256").update(`${kind}:${value}`).digest("base64url")

// The account an e-mail names, as login finds it.
const accountOf = normalizeEmail

/**
 * Throttling of login and register, in leaky buckets in Postgres so the
 * limits hold across nodes (docs/security.md):
 * - every attempt from a client address counts against the address, before
 *   any password is hashed: this bounds the hashing one address can cause;
 * - failures count per (address, e-mail) pair: a guesser is stopped at its
 *   own address, and the owner, elsewhere, is not;
 * - failed logins count per e-mail from all addresses, with a much larger
 *   ceiling; past it a wrong password gets 429 instead of 401, but a login is
 *   still hashed and checked, so the right password still gets in: nobody
 *   can lock an account out from other addresses.
 * An unknown e-mail only ever fails, so it is throttled exactly like a known
 * one with wrong passwords: a refusal says nothing about the account.
 */
export class AuthThrottle extends Context.Service<AuthThrottle>()("agent-host/AuthThrottle", {
  make: Effect.gen(function* () {
    const repo = yield* ThrottleRepo
    const config = yield* AppConfig
    const windowSeconds = Math.max(1, Duration.toSeconds(config.authThrottleWindow))

    // Buckets idle for a whole window are empty; forgetting them keeps the table small.
    yield* repo.forgetIdle(windowSeconds).pipe(
      Effect.catchCause((cause) => Effect.logWarning("Forgetting idle login buckets failed", cause)),
      Effect.repeat(Schedule.spaced(config.authThrottleWindow)),
      Effect.forkScoped
    )

    const perSecond = (capacity: number) => capacity / windowSeconds

    const check = (key: string, capacity: number) =>
      Effect.gen(function* () {
        const bucket = yield* repo.attempt(key, capacity, perSecond(capacity))
        if (!bucket.refused) return
        // Time until one more attempt fits.
        const retryAfter = Math.max(1, Math.ceil((bucket.level + 1 - capacity) / perSecond(capacity)))
        return yield* new TooManyAttempts({
          detail: `Too many attempts; try again in ${retryAfter} s`,
          retryAfter
        })
      })

    const pairKey = (address: string, email: string) => bucketKey("pair", JSON.stringify([address, accountOf(email)]))

    /**
     * Runs `checkCredentials`, a login or register from `address` for `email` that
     * hashes a password: `Some` when the credentials were accepted, `None`
     * when they were wrong (or, to register, the e-mail taken). The pair's
     * failure is reserved before the check runs, so concurrent guesses cannot
     * overrun it, and given back unless the outcome is `None`: a success, a
     * 503 or an error does not use it. With `ceiling`, a `None` also counts
     * against the e-mail's ceiling, and past it fails with 429.
     */
    const guard = <A, E, R>(
      address: string,
      email: string,
      checkCredentials: Effect.Effect<Option.Option<A>, E, R>,
      options: { readonly ceiling: boolean }
    ): Effect.Effect<Option.Option<A>, E | TooManyAttempts, R> =>
      Effect.gen(function* () {
        yield* check(bucketKey("address", address), config.authAttemptsPerAddress)
        const pair = pairKey(address, email)
        yield* check(pair, config.authAttemptsPerAccount)
        const result = yield* checkCredentials.pipe(
          Effect.onExit((exit) =>
            Exit.isSuccess(exit) && Option.isNone(exit.value)
              ? Effect.void
              : repo.release(pair, perSecond(config.authAttemptsPerAccount))
          )
        )
        if (Option.isNone(result) && options.ceiling) {
          yield* check(bucketKey("failures", accountOf(email)), config.authFailuresPerAccount)
        }
        return result
      }).pipe(Traced.withSpan("AuthThrottle.guard"))

    return { guard } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make).pipe(Layer.provide(ThrottleRepo.layer))
}
