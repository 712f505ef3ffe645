import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"
import type * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as Crypto from "node:crypto"
import { AppConfig } from "../Config.ts"
import { TooManyAttempts } from "../Domain/Problems.ts"
import { ThrottleRepo } from "./Repo.ts"
import * as Traced from "../Platform/Traced.ts"

// An IPv6 address as its /64: one host usually holds a whole /64, so one
// bucket per address would give it billions.
const ipv6Prefix = (address: string): string => {
  const [head, tail] = address.split("::") as [string, string | undefined]
  const left = head === "" ? [] : head.split(":")
  const right = tail === undefined || tail === "" ? [] : tail.split(":")
  const groups = tail === undefined ? left : [...left, ...Array(Math.max(0, 8 - left.length - right.length)).fill("0"), ...right]
  return `${groups.slice(0, 4).map((group) => group.toLowerCase().replace(/^0+(?=.)/, "")).join(":")}::/64`
}

const normaliseAddress = (address: string): string => {
  const plain = address.trim().replace(/^\[(.*)\]$/, "$1").replace(/%.*$/, "")
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
  const forwarded = (request.headers["x-forwarded-for"] ?? "").split(",").map((entry) => entry.trim()).filter((entry) =>
    entry !== ""
  )
  if (forwarded.length === 0) return normaliseAddress(peer)
  return normaliseAddress(forwarded[Math.max(0, forwarded.length - trustedProxyHops)]!)
}

// Keys are hashed: the table never holds the e-mails of accounts that may not exist.
const bucketKey = (kind: "address" | "account", value: string) =>
  Crypto.createHash("sha256").update(`${kind}:${value}`).digest("base64url")

/**
 * Throttling of login and register, per client address and per e-mail:
 * leaky buckets in Postgres, so the limits hold across nodes. Every attempt
 * counts, before any password is hashed, whether the account exists or not,
 * so a refusal says nothing about the account and a flood costs no scrypt.
 */
export class AuthThrottle extends Context.Service<AuthThrottle>()("agent-host/AuthThrottle", {
  make: Effect.gen(function*() {
    const repo = yield* ThrottleRepo
    const config = yield* AppConfig
    const windowSeconds = Math.max(1, Duration.toSeconds(config.authThrottleWindow))

    // Buckets idle for a whole window are empty; forgetting them keeps the table small.
    yield* repo.forgetIdle(windowSeconds).pipe(
      Effect.catchCause((cause) => Effect.logWarning("Forgetting idle login buckets failed", cause)),
      Effect.repeat(Schedule.spaced(config.authThrottleWindow)),
      Effect.forkScoped
    )

    const check = (kind: "address" | "account", value: string, capacity: number) =>
      Effect.gen(function*() {
        const perSecond = capacity / windowSeconds
        const bucket = yield* repo.attempt(bucketKey(kind, value), capacity, perSecond)
        if (!bucket.refused) return
        // Time until one more attempt fits.
        const retryAfter = Math.max(1, Math.ceil((bucket.level + 1 - capacity) / perSecond))
        return yield* new TooManyAttempts({
          detail: `Too many attempts; try again in ${retryAfter} s`,
          retryAfter
        })
      })

    /** One login or register attempt from `address`, for `email`. */
    const attempt = Traced.fn("AuthThrottle.attempt")(function*(address: string, email: string) {
      yield* check("address", address, config.authAttemptsPerAddress)
      yield* check("account", email.trim().toLowerCase(), config.authAttemptsPerAccount)
    })

    return { attempt } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make).pipe(Layer.provide(ThrottleRepo.layer))
}
