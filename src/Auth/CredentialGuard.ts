import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import * as Queue from "effect/Queue"
import * as Schedule from "effect/Schedule"
import { AppConfig } from "../Config.ts"
import { ListenerSql } from "../Database/Sql.ts"
import { TooManyAttempts } from "../Domain/Problems.ts"
import { credentialChannel } from "./Repo.ts"

export type CredentialKind = "api_key" | "session"

/** What the credential caches hear from every node (the payloads on `credentialChannel`). */
export type CredentialEvent =
  /** (Re)connected: anything may have changed while nobody listened. */
  | { readonly _tag: "Listening" }
  | { readonly _tag: "KeyRevoked"; readonly hash: string }
  | { readonly _tag: "SessionRevoked"; readonly hash: string }
  /** A key or session was inserted (the trigger of migration 0024). */
  | { readonly _tag: "Issued"; readonly hash: string }

// A bare hash is a key revocation, the payload from before sessions and new
// credentials shared the channel; nodes not yet upgraded still understand it.
const parseEvent = (payload: string): CredentialEvent =>
  payload.startsWith("issued:")
    ? { _tag: "Issued", hash: payload.slice(7) }
    : payload.startsWith("session:")
      ? { _tag: "SessionRevoked", hash: payload.slice(8) }
      : { _tag: "KeyRevoked", hash: payload }

const rejections = (credential: CredentialKind, by: "lookup" | "rejected_cache" | "address_limit") =>
  Metric.counter("auth_credential_rejections_total", {
    description:
      "API keys and session tokens refused, by credential and by what refused them: a database lookup, " +
      "the cache of rejected credentials, or the client address's limit of failures",
    incremental: true,
    attributes: { credential, by }
  })
const rejectionCounters = {
  api_key: {
    lookup: rejections("api_key", "lookup"),
    rejected_cache: rejections("api_key", "rejected_cache"),
    address_limit: rejections("api_key", "address_limit")
  },
  session: {
    lookup: rejections("session", "lookup"),
    rejected_cache: rejections("session", "rejected_cache"),
    address_limit: rejections("session", "address_limit")
  }
} as const

// Addresses whose failures are tracked at once; past it the one idle longest
// is forgotten (it had at most a window's failures to forget).
const maxTrackedAddresses = 100_000

/**
 * What stands between a presented API key or session token and the database:
 * - a bounded cache of the hashes of credentials recently rejected
 *   (REJECTED_CREDENTIALS_CACHE_SIZE, each for REJECTED_CREDENTIALS_CACHE_TTL),
 *   so a bad credential sent again and again costs one query;
 * - a leaky bucket of failed credentials per client address
 *   (CREDENTIAL_FAILURES_PER_ADDRESS per CREDENTIAL_FAILURES_WINDOW), past
 *   which a credential this node has not verified recently gets 429 before
 *   any lookup, so fresh random keys cannot reach the database at will either.
 *   Per node, in memory: what it protects is each node's queries, and checking
 *   a shared bucket would itself be a query. Credentials this node has
 *   verified recently (the positive caches) still pass.
 * It also listens on the credential channel for every node's revocations and
 * new credentials, and tells the positive caches (`subscribe`). A new
 * credential drops its hash from the rejected cache at once on the node that
 * made it and on the others when they hear of it; a lookup that overlapped
 * such news is not remembered as a rejection. Nothing cached is trusted
 * while the channel is not heard.
 */
export class CredentialGuard extends Context.Service<CredentialGuard>()("agent-host/CredentialGuard", {
  make: Effect.gen(function* () {
    const config = yield* AppConfig
    const rejectedTtl = Duration.toMillis(config.rejectedCredentialsCacheTtl)
    const capacity = Math.max(1, config.credentialFailuresPerAddress)
    const windowMs = Math.max(1, Duration.toMillis(config.credentialFailuresWindow))
    const drainPerMs = capacity / windowMs

    // Insertion order is the order of rejection: the oldest leaves first.
    const rejected = new Map<string, number>()
    let generation = 0
    let listening = false
    const subscribers: Array<(event: CredentialEvent) => Effect.Effect<void>> = []

    const issued = (hash: string) => {
      generation++
      rejected.delete(hash)
    }

    const publish = (event: CredentialEvent) =>
      Effect.gen(function* () {
        if (event._tag === "Issued") issued(event.hash)
        if (event._tag === "Listening") {
          generation++
          rejected.clear()
        }
        for (const subscriber of subscribers) yield* subscriber(event)
      })

    const pg = yield* ListenerSql
    yield* Effect.gen(function* () {
      const events = yield* pg.listen(credentialChannel)
      yield* publish({ _tag: "Listening" })
      listening = true
      while (true) yield* publish(parseEvent((yield* Queue.take(events)).payload))
    }).pipe(
      Effect.scoped,
      Effect.ensuring(
        Effect.sync(() => {
          listening = false
        })
      ),
      Effect.tapCause((cause) => Effect.logWarning("Credential change listener lost; reconnecting", cause)),
      Effect.retry(Schedule.spaced("1 second")),
      Effect.forkScoped
    )

    const isRejected = (hash: string, now: number) => {
      const until = rejected.get(hash)
      if (until === undefined) return false
      if (until > now) return true
      rejected.delete(hash)
      return false
    }

    const remember = (hash: string, now: number) => {
      if (config.rejectedCredentialsCacheSize <= 0) return
      rejected.delete(hash)
      rejected.set(hash, now + rejectedTtl)
      while (rejected.size > config.rejectedCredentialsCacheSize) rejected.delete(rejected.keys().next().value!)
    }

    // Leaky buckets: the level drains evenly over the window; a refused
    // request does not fill it. Insertion order is the order of last failure.
    const buckets = new Map<string, { level: number; at: number }>()
    const levelOf = (address: string, now: number) => {
      const bucket = buckets.get(address)
      return bucket === undefined ? 0 : Math.max(0, bucket.level - (now - bucket.at) * drainPerMs)
    }
    const fail = (address: string, now: number) => {
      const level = levelOf(address, now) + 1
      buckets.delete(address)
      buckets.set(address, { level, at: now })
      while (buckets.size > maxTrackedAddresses) buckets.delete(buckets.keys().next().value!)
    }

    /**
     * Verifies the credential whose hash is `hash`, presented by `client`:
     * `known`, read from memory only, says whether this node verified it
     * recently; `lookup` asks the database (and fills the positive cache).
     * None when the credential is not valid.
     */
    const verify = <P>(options: {
      readonly credential: CredentialKind
      readonly hash: string
      readonly client: string
      readonly known: Effect.Effect<Option.Option<P>>
      readonly lookup: Effect.Effect<Option.Option<P>>
    }): Effect.Effect<Option.Option<P>, TooManyAttempts> =>
      Effect.gen(function* () {
        const counters = rejectionCounters[options.credential]
        if (listening) {
          const known = yield* options.known
          if (Option.isSome(known)) return known
        }
        const now = Date.now()
        const level = levelOf(options.client, now)
        if (level + 1 > capacity) {
          yield* Metric.update(counters.address_limit, 1)
          const retryAfter = Math.max(1, Math.ceil((level + 1 - capacity) / drainPerMs / 1000))
          return yield* new TooManyAttempts({
            detail: `Too many invalid credentials from this address; try again in ${retryAfter} s`,
            retryAfter
          })
        }
        if (listening && isRejected(options.hash, now)) {
          fail(options.client, now)
          yield* Metric.update(counters.rejected_cache, 1)
          return Option.none<P>()
        }
        const started = generation
        const wasListening = listening
        const found = yield* options.lookup
        if (Option.isNone(found)) {
          const at = Date.now()
          if (wasListening && listening && generation === started) remember(options.hash, at)
          fail(options.client, at)
          yield* Metric.update(counters.lookup, 1)
        }
        return found
      })

    return {
      verify,
      /** Whether the credential channel is heard now; caches filled before may not be trusted otherwise. */
      listening: () => listening,
      /** Called by whoever stores a new credential, before handing it out: no rejection of it stands. */
      issued: (hash: string) => Effect.sync(() => issued(hash)),
      /** Registers a positive cache for the channel's news (and for every reconnection). */
      subscribe: (subscriber: (event: CredentialEvent) => Effect.Effect<void>) =>
        Effect.sync(() => {
          subscribers.push(subscriber)
        })
    } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make)
}
