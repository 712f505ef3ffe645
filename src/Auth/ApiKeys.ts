import * as Cache from "effect/Cache"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"
import { Limits } from "../Billing/Limits.ts"
import { AppConfig } from "../Config.ts"
import { decodeCursor } from "../Domain/Cursor.ts"
import { type ApiKeyId, isId, type TenantId } from "../Domain/Ids.ts"
import { defaultPageSize, type PageRequest } from "../Domain/Page.ts"
import { NotFound } from "../Domain/Problems.ts"
import type { Principal, Scope } from "./Api.ts"
import { CredentialGuard } from "./CredentialGuard.ts"
import { AuthRepo, toApiKey } from "./Repo.ts"
import { constantTimeEqual, hashSecret, newSecret } from "./Secrets.ts"
import * as Traced from "../Observability/Traced.ts"

// `ak_` + 43 base64url characters (256 bits). Anything else cannot be a key,
// so it is refused without touching the cache or the database.
const keyPattern = /^ak_[A-Za-z0-9_-]{43}$/

interface VerifiedKey {
  readonly keyHash: string
  /** Epoch milliseconds; null when the key never expires. */
  readonly expiresAt: number | null
  readonly principal: Principal & { readonly _tag: "ApiKey" }
}

/** The dashboard's API keys: created once in plaintext, stored as hashes, verified from a short cache. */
export class ApiKeys extends Context.Service<ApiKeys>()("agent-host/ApiKeys", {
  make: Effect.gen(function* () {
    const repo = yield* AuthRepo
    const limits = yield* Limits
    const config = yield* AppConfig
    const guard = yield* CredentialGuard

    const lookup = (keyHash: string) =>
      repo.findApiKeyByHash(keyHash).pipe(
        Effect.map(Option.filter((row) => row.revokedAt === null)),
        Effect.map(
          Option.map(
            (row): VerifiedKey => ({
              keyHash: row.keyHash,
              expiresAt: row.expiresAt === null ? null : row.expiresAt.getTime(),
              principal: { _tag: "ApiKey", tenantId: row.tenantId, keyId: row.id, scopes: toApiKey(row).scopes }
            })
          )
        )
      )

    // Verified keys are trusted for apiKeyCacheTtl; revocation drops the entry
    // at once, on every node (through the guard's channel, which also empties
    // the cache at each reconnection). Unknown keys are not kept here but in
    // the guard's cache of rejected credentials, so they cannot crowd out
    // the keys in use.
    const verified = yield* Cache.makeWith(lookup, {
      capacity: 10_000,
      timeToLive: (exit) => (Exit.isSuccess(exit) && Option.isSome(exit.value) ? config.apiKeyCacheTtl : Duration.zero)
    })
    yield* guard.subscribe((event) =>
      event._tag === "Listening"
        ? Cache.invalidateAll(verified)
        : event._tag === "KeyRevoked"
          ? Cache.invalidate(verified, event.hash)
          : Effect.void
    )

    // When each key was last used, since the last flush: one map entry per
    // key, written by one statement for all of them every apiKeyLastUsedFlush
    // (and at shutdown), so the request path never writes for it.
    let used = new Map<ApiKeyId, Date>()
    const flushUses = Effect.suspend(() => {
      if (used.size === 0) return Effect.void
      const batch = used
      used = new Map()
      return repo.touchApiKeys([...batch]).pipe(
        Effect.catchCause((cause) => {
          // Kept for the next flush, unless the key was used again since.
          for (const [id, at] of batch) if (!used.has(id)) used.set(id, at)
          return Effect.logWarning("Could not record when API keys were last used; retrying", cause)
        })
      )
    })
    yield* flushUses.pipe(Effect.repeat(Schedule.spaced(config.apiKeyLastUsedFlush)), Effect.forkScoped)
    yield* Effect.addFinalizer(() => flushUses)

    // An expired key is refused like an unknown one, from the cache as well.
    const live = (keyHash: string) => (found: Option.Option<VerifiedKey>) =>
      Option.filter(
        found,
        (key) => constantTimeEqual(key.keyHash, keyHash) && (key.expiresAt === null || key.expiresAt > Date.now())
      )

    /** The key's principal when it is valid; `client` is the caller's address (CredentialGuard). */
    const authenticate = Traced.fn("ApiKeys.authenticate")(function* (key: string, client: string) {
      if (!keyPattern.test(key)) return Option.none<VerifiedKey["principal"]>()
      const keyHash = hashSecret(key)
      const found = yield* guard.verify({
        credential: "api_key",
        hash: keyHash,
        client,
        known: Cache.getSuccess(verified, keyHash).pipe(Effect.map((cached) => live(keyHash)(Option.flatten(cached)))),
        lookup: Effect.suspend(() => (guard.listening() ? Cache.get(verified, keyHash) : lookup(keyHash))).pipe(
          Effect.map(live(keyHash))
        )
      })
      if (Option.isNone(found)) return Option.none()
      used.set(found.value.principal.keyId, new Date())
      return Option.some(found.value.principal)
    })

    const create = Traced.fn("ApiKeys.create")(function* (
      tenantId: TenantId,
      input: {
        readonly name: string
        readonly scopes?: ReadonlyArray<Scope> | undefined
        readonly expiresAt?: string | null | undefined
      }
    ) {
      const key = newSecret("ak_")
      const prefix = key.slice(0, 11)
      const scopes = input.scopes === undefined ? null : [...new Set(input.scopes)]
      const expiresAt = input.expiresAt == null ? null : new Date(input.expiresAt)
      const keyHash = hashSecret(key)
      const row = yield* limits.admit(
        tenantId,
        "apiKeys",
        repo.insertApiKey({ tenantId, name: input.name, prefix, keyHash, scopes, expiresAt })
      )
      const created = toApiKey({
        ...row,
        tenantId,
        name: input.name,
        prefix,
        keyHash: "",
        scopes,
        revokedAt: null,
        expiresAt,
        lastUsedAt: null
      })
      // Known valid here at once, even from an address past its failures;
      // other nodes hear of it from the insert's trigger (migration 0024).
      yield* guard.issued(keyHash)
      yield* Cache.set(
        verified,
        keyHash,
        Option.some({
          keyHash,
          expiresAt: expiresAt === null ? null : expiresAt.getTime(),
          principal: { _tag: "ApiKey", tenantId, keyId: row.id, scopes: created.scopes }
        })
      )
      return { ...created, key }
    })

    const list = Traced.fn("ApiKeys.list")(function* (tenantId: TenantId, page: PageRequest) {
      const after = yield* decodeCursor(page.cursor, isId)
      const rows = yield* repo.listApiKeys(tenantId, { after, limit: page.limit ?? defaultPageSize })
      return { ...rows, data: rows.data.map(toApiKey) }
    })

    const revoke = Traced.fn("ApiKeys.revoke")(function* (tenantId: TenantId, id: ApiKeyId) {
      const keyHash = yield* repo.revokeApiKey(tenantId, id)
      if (Option.isNone(keyHash)) return yield* new NotFound({ detail: `No API key ${id}` })
      yield* Cache.invalidate(verified, keyHash.value)
    })

    return { authenticate, create, list, revoke } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make).pipe(
    Layer.provide([AuthRepo.layer, Limits.layer, CredentialGuard.layer])
  )
}
