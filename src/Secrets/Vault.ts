import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Schedule from "effect/Schedule"
import { AppConfig } from "../Config.ts"
import * as Traced from "../Observability/Traced.ts"
import * as Sealed from "../Runtime/Sealed.ts"
import { WebhookSecretKey } from "../Webhooks/Signing.ts"
import { type SealedRow, SecretsRepo, type StoredValue } from "./Repo.ts"

/** Whose value a sealed value is: the tenant and the secret's id. It opens only in that row. */
export interface SecretOwner {
  readonly tenantId: string
  readonly id: string
}

// The format of a sealed value (Runtime/Sealed.ts); its key is the row's `key_version`'s.
const label = "s1"

const aadOf = (owner: SecretOwner) => Sealed.additionalData("agent-host/tenant-secret", owner.tenantId, owner.id)

const keyOf = (key: Redacted.Redacted<string>) => Buffer.from(Redacted.value(key).trim(), "base64")

/**
 * Encrypts the tenants' secrets at rest (AES-256-GCM) under SECRETS_KEY, or,
 * when that is unset, the webhook key (WEBHOOK_SECRET_KEY or its key file,
 * which several nodes must share: Config.ts). A value is sealed with its
 * owner (`SecretOwner`) as additional data, and stored with the version of
 * the key that sealed it (SECRETS_KEY_VERSION); the keys of earlier versions
 * (SECRETS_PREVIOUS_KEYS) still open theirs. Each node starts a pass in the
 * background that re-seals values of any other version under the current key
 * (`resealOtherKeys`); until it has, they open with their own key.
 */
export class SecretVault extends Context.Service<
  SecretVault,
  {
    readonly seal: (value: Redacted.Redacted<string>, owner: SecretOwner) => StoredValue
    /**
     * The value, or undefined when it cannot be opened: no key of its version
     * is configured, the key of that version changed, or it was sealed for
     * another owner.
     */
    readonly open: (stored: StoredValue, owner: SecretOwner) => Redacted.Redacted<string> | undefined
  }
>()("agent-host/Secrets/SecretVault") {
  static readonly layer = Layer.effect(
    SecretVault,
    Effect.gen(function* () {
      const config = yield* AppConfig
      const repo = yield* SecretsRepo
      const current = Option.isSome(config.secretsKey) ? keyOf(config.secretsKey.value) : (yield* WebhookSecretKey).key
      const keys = new Map<number, Buffer>(config.secretsPreviousKeys.map(({ key, version }) => [version, keyOf(key)]))
      keys.set(config.secretsKeyVersion, current)

      const seal = (value: Redacted.Redacted<string>, owner: SecretOwner): StoredValue => ({
        sealedValue: Sealed.seal(current, label, Redacted.value(value), aadOf(owner)),
        keyVersion: config.secretsKeyVersion
      })
      const open = (stored: StoredValue, owner: SecretOwner) => {
        const key = keys.get(stored.keyVersion)
        const value = key === undefined ? undefined : Sealed.open(key, label, stored.sealedValue, aadOf(owner))
        return value === undefined ? undefined : Redacted.make(value)
      }

      yield* resealInBackground({
        what: "secrets",
        current: config.secretsKeyVersion,
        page: (after: SealedRow | undefined, limit: number) =>
          repo.sealedUnderOtherKeys(config.secretsKeyVersion, after?.id ?? "", limit),
        reseal: (row) => {
          const owner = { tenantId: row.tenantId, id: row.id }
          const value = open(row, owner)
          return value === undefined ? Effect.undefined : repo.reseal(row, seal(value, owner))
        }
      })
      return SecretVault.of({ seal, open })
    })
  ).pipe(Layer.provide([SecretsRepo.layer, WebhookSecretKey.layer]))
}

const resealBatch = 100

/** A kind of rows holding values sealed by the vault, for `resealInBackground`. */
export interface ResealPass<Row, E, R> {
  /** What the rows are, in the log: "secrets". */
  readonly what: string
  /** The current key version (SECRETS_KEY_VERSION). */
  readonly current: number
  /** Up to `limit` rows sealed under another key version than `current`, after `after`, in a stable order. */
  readonly page: (after: Row | undefined, limit: number) => Effect.Effect<ReadonlyArray<Row>, E, R>
  /**
   * Opens the row's values and writes them sealed under `current` if the row
   * still holds what was read: whether it did, or undefined when no
   * configured key opens them (the row is left as it is).
   */
  readonly reseal: (row: Row) => Effect.Effect<boolean | undefined, E, R>
}

/**
 * Starts, in the background of the layer's scope, a pass that re-seals every
 * row of `pass` stored under another key version, `resealBatch` rows at a
 * time, each written only if it still holds what was read (a rotation
 * meanwhile is sealed under a current key already). Rows no configured key
 * opens are left as they are, and counted in a warning. Idempotent, and safe
 * on several nodes at once; a node still sealing under an older key during a
 * rolling change leaves values the next start's pass takes. A failed pass is
 * started again 10 seconds later.
 */
export const resealInBackground = <Row, E, R>(pass: ResealPass<Row, E, R>) =>
  Effect.gen(function* () {
    let resealed = 0
    let unreadable = 0
    let after: Row | undefined
    while (true) {
      const rows = yield* pass.page(after, resealBatch)
      for (const row of rows) {
        const written = yield* pass.reseal(row)
        if (written === undefined) unreadable++
        else if (written) resealed++
      }
      if (rows.length < resealBatch) break
      after = rows[rows.length - 1]
    }
    if (resealed > 0)
      yield* Effect.logInfo(`Re-sealed ${resealed} ${pass.what} under the key of version ${pass.current}`)
    if (unreadable > 0) {
      yield* Effect.logWarning(
        `${unreadable} ${pass.what} are sealed under key versions that neither SECRETS_KEY nor SECRETS_PREVIOUS_KEYS ` +
          "opens: they stay unreadable until the key of their version is configured in SECRETS_PREVIOUS_KEYS"
      )
    }
  }).pipe(
    Traced.withSpan("SecretVault.resealOtherKeys", { attributes: { what: pass.what } }),
    Effect.tapError((error) =>
      Effect.logWarning(`Re-sealing ${pass.what} under the current key failed; trying again`, error)
    ),
    Effect.retry(Schedule.spaced("10 seconds")),
    Effect.forkScoped,
    Effect.asVoid
  )
