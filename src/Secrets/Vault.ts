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

      yield* resealOtherKeys(repo, config.secretsKeyVersion, (row) => {
        const owner = { tenantId: row.tenantId, id: row.id }
        const value = open(row, owner)
        return value === undefined ? undefined : seal(value, owner)
      }).pipe(
        Effect.tapError((error) =>
          Effect.logWarning("Re-sealing secrets under the current key failed; trying again", error)
        ),
        Effect.retry(Schedule.spaced("10 seconds")),
        Effect.forkScoped
      )
      return SecretVault.of({ seal, open })
    })
  ).pipe(Layer.provide([SecretsRepo.layer, WebhookSecretKey.layer]))
}

const resealBatch = 100

/**
 * Re-seals every value stored under another key version than `current`,
 * `resealBatch` rows at a time, each row written only if it still holds what
 * was read (a rotation meanwhile is sealed under a current key already).
 * Values no configured key opens are left as they are, and counted in a
 * warning. Idempotent, and safe on several nodes at once; a node still
 * sealing under an older key during a rolling change leaves values the
 * next start's pass takes.
 */
const resealOtherKeys = (
  repo: SecretsRepo["Service"],
  current: number,
  reseal: (row: SealedRow) => StoredValue | undefined
) =>
  Effect.gen(function* () {
    let resealed = 0
    let unreadable = 0
    let after = ""
    while (true) {
      const rows = yield* repo.sealedUnderOtherKeys(current, after, resealBatch)
      for (const row of rows) {
        const value = reseal(row)
        if (value === undefined) unreadable++
        else if (yield* repo.reseal(row, value)) resealed++
      }
      if (rows.length < resealBatch) break
      after = rows[rows.length - 1]!.id
    }
    if (resealed > 0) yield* Effect.logInfo(`Re-sealed ${resealed} secrets under the key of version ${current}`)
    if (unreadable > 0) {
      yield* Effect.logWarning(
        `${unreadable} secrets are sealed under key versions that neither SECRETS_KEY nor SECRETS_PREVIOUS_KEYS ` +
          "opens: they stay unreadable until the key of their version is configured in SECRETS_PREVIOUS_KEYS"
      )
    }
  }).pipe(Traced.withSpan("SecretVault.resealOtherKeys"))
