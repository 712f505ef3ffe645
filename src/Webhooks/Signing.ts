import * as Context from "effect/Context"
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Schedule from "effect/Schedule"
import * as Crypto from "node:crypto"
import * as Fs from "node:fs/promises"
import * as Path from "node:path"
import { AppConfig } from "../Config.ts"
import * as Traced from "../Observability/Traced.ts"
import * as Sealed from "../Runtime/Sealed.ts"
import { WebhooksRepo } from "./Repo.ts"

/**
 * Standard Webhooks signing (symmetric scheme): the secret is `whsec_` + the
 * base64 of a random HMAC-SHA256 key, and a signature is
 * `v1,<base64 HMAC of "id.timestamp.body">`.
 */
export const newSecret = (): string => `whsec_${Crypto.randomBytes(32).toString("base64")}`

export const sign = (secret: string, id: string, timestamp: number, body: string): string => {
  const key = Buffer.from(secret.replace(/^whsec_/, ""), "base64")
  return `v1,${Crypto.createHmac("sha256", key).update(`${id}.${timestamp}.${body}`).digest("base64")}`
}

/** An event id: `msg_` and 24 random bytes, URL-safe (no `.`, as the signed content needs). */
export const newEventId = (): string => `msg_${Crypto.randomBytes(18).toString("base64url")}`

/**
 * Whose secret a sealed value is: the tenant and the owner (a team's room or
 * an orchestration) of the one endpoint row that holds it. Sealed values are
 * bound to it, so a value copied into another row does not open there.
 */
export interface SecretOwner {
  readonly tenantId: string
  readonly kind: string
  readonly id: string
}

// The additional data of a v2 value.
const aadOf = (owner: SecretOwner) =>
  Sealed.additionalData("agent-host/webhook-secret", owner.tenantId, owner.kind, owner.id)

/** A stored value in the format before v2 (sealed without its owner). */
export const isLegacy = (sealed: string | null): sealed is string => sealed !== null && sealed.startsWith("v1.")

/**
 * The key that seals webhook signing secrets: WEBHOOK_SECRET_KEY, or the key
 * file beside the embedded database's data (made on first use). One per
 * process: the secrets vault uses it too while SECRETS_KEY is unset
 * (src/Secrets/Vault.ts).
 */
export class WebhookSecretKey extends Context.Service<WebhookSecretKey, { readonly key: Buffer }>()(
  "agent-host/Webhooks/WebhookSecretKey"
) {
  static readonly layer = Layer.effect(
    WebhookSecretKey,
    Effect.gen(function* () {
      const config = yield* AppConfig
      const key = Option.isSome(config.webhookSecretKey)
        ? Buffer.from(Redacted.value(config.webhookSecretKey.value).trim(), "base64")
        : yield* keyFile(
            Option.match(config.embeddedPostgresDataDir, {
              onNone: () => Path.resolve(".data", "webhook-secret.key"),
              onSome: (dir) => Path.join(Path.dirname(dir), "webhook-secret.key")
            })
          )
      return WebhookSecretKey.of({ key })
    })
  )
}

/**
 * Encrypts signing secrets at rest (AES-256-GCM) with WEBHOOK_SECRET_KEY, or,
 * when that is unset (one node only: Config.ts refuses several without it), a
 * key generated once and kept in a file beside the embedded database's data.
 * A stored secret is `v2.<iv>.<tag>.<ciphertext>`, sealed with its owner
 * (`SecretOwner`) as additional data.
 *
 * Values of the earlier format (`v1`, no additional data) are re-sealed as v2
 * by a pass each node starts in the background (`resealLegacy`); the pass that
 * finds none left records it (`webhook_secret_upgrades`), and from then on v1
 * is refused: a v1 value copied into a row later does not open. Until this
 * node's pass has finished, v1 still opens, so deliveries go on meanwhile.
 */
export class SecretBox extends Context.Service<
  SecretBox,
  {
    readonly seal: (secret: string, owner: SecretOwner) => string
    /**
     * The secret, or undefined when it cannot be opened: the key changed, it
     * was sealed for another owner, or it is a v1 value once v1 is refused.
     */
    readonly open: (sealed: string, owner: SecretOwner) => string | undefined
  }
>()("agent-host/Webhooks/SecretBox") {
  static readonly layer = Layer.effect(
    SecretBox,
    Effect.gen(function* () {
      const repo = yield* WebhooksRepo
      const { key } = yield* WebhookSecretKey
      // v1 opens only while the re-seal has not finished: false once the
      // record says it has (or this node's pass finished).
      let legacyOpens = !(yield* repo.secretsUpgraded.pipe(Effect.retry(startRetry), Effect.orDie))
      const seal = (secret: string, owner: SecretOwner) => Sealed.seal(key, "v2", secret, aadOf(owner))
      if (legacyOpens) {
        yield* resealLegacy(repo, (sealed, owner) => {
          const secret = Sealed.open(key, "v1", sealed, undefined)
          return secret === undefined ? undefined : seal(secret, owner)
        }).pipe(
          Effect.tap(() =>
            Effect.sync(() => {
              legacyOpens = false
            })
          ),
          Effect.tapError((error) =>
            Effect.logWarning("Re-sealing webhook signing secrets failed; trying again", error)
          ),
          Effect.retry(Schedule.spaced("10 seconds")),
          Effect.forkScoped
        )
      }
      return SecretBox.of({
        seal,
        open: (sealed, owner) =>
          sealed.startsWith("v2.")
            ? Sealed.open(key, "v2", sealed, aadOf(owner))
            : legacyOpens
              ? Sealed.open(key, "v1", sealed, undefined)
              : undefined
      })
    })
  ).pipe(Layer.provide([WebhooksRepo.layer, WebhookSecretKey.layer]))
}

// Reading the record at start: a database that is briefly out is waited for.
const startRetry = { schedule: Schedule.exponential("200 millis"), times: 6 }

const resealBatch = 100

/**
 * Re-seals every v1 value (a row's secret and previous secret) as v2, `resealBatch`
 * rows at a time, each row written only if it still holds what was read: a
 * rotation or another node's pass meanwhile leaves it, and the walk is made
 * again until one meets no such row. Values the key cannot open are left as
 * they are (they could not sign anyway). Then the upgrade is recorded.
 * Idempotent, and safe on several nodes at once.
 */
const resealLegacy = (
  repo: WebhooksRepo["Service"],
  reseal: (sealed: string, owner: SecretOwner) => string | undefined
) =>
  Effect.gen(function* () {
    let resealed = 0
    let unreadable = 0
    for (let round = 1; ; round++) {
      // Rows that keep changing under the pass: it fails, and is started again later.
      if (round > 5)
        return yield* Effect.fail(new Error("Webhook endpoints kept changing while their secrets were re-sealed"))
      let after = ""
      let changedMeanwhile = 0
      while (true) {
        const rows = yield* repo.legacySecrets(after, resealBatch)
        for (const row of rows) {
          const owner = { tenantId: row.tenantId, kind: row.ownerKind, id: row.ownerId }
          const secret = isLegacy(row.secret) ? (reseal(row.secret, owner) ?? row.secret) : row.secret
          const previous = isLegacy(row.previousSecret)
            ? (reseal(row.previousSecret, owner) ?? row.previousSecret)
            : row.previousSecret
          unreadable += (isLegacy(secret) ? 1 : 0) + (isLegacy(previous) ? 1 : 0)
          if (secret === row.secret && previous === row.previousSecret) continue
          const written = yield* repo.resealSecrets(row, { secret, previousSecret: previous })
          if (written) resealed++
          else changedMeanwhile++
        }
        if (rows.length < resealBatch) break
        after = rows[rows.length - 1]!.id
      }
      if (changedMeanwhile === 0) break
      unreadable = 0
    }
    yield* repo.markSecretsUpgraded
    if (resealed > 0 || unreadable > 0) {
      yield* Effect.logInfo(
        `Re-sealed ${resealed} webhook endpoints' signing secrets bound to their owners` +
          (unreadable === 0
            ? ""
            : `; ${unreadable} stored secrets could not be opened with this key and stay unreadable`)
      )
    }
  }).pipe(Traced.withSpan("SecretBox.resealLegacy"))

/** The key file exists but cannot be used: the start stops rather than replace it. */
export class SecretKeyFileError extends Data.TaggedError("SecretKeyFileError")<{ readonly message: string }> {}

// The key file: read when it exists, otherwise made (mode 0600). An existing
// file that cannot be read or decoded stops the start: replacing it would make
// every stored signing secret unreadable.
const keyFile = (file: string) =>
  Effect.gen(function* () {
    const existing = yield* readKeyFile(file)
    if (existing !== undefined) return existing
    const key = Crypto.randomBytes(32)
    const made = yield* Effect.tryPromise({
      try: async () => {
        await Fs.mkdir(Path.dirname(file), { recursive: true })
        // `wx`: two processes starting at once keep the first one's key.
        await Fs.writeFile(file, `${key.toString("base64")}\n`, { mode: 0o600, flag: "wx" })
        return true
      },
      catch: (error) => error
    }).pipe(
      Effect.catch((error) =>
        (error as NodeJS.ErrnoException).code === "EEXIST"
          ? Effect.succeed(false)
          : Effect.fail(unusable(file, `cannot be created (${(error as NodeJS.ErrnoException).code ?? String(error)})`))
      )
    )
    if (!made) {
      // Another process made the file between the read and the write: use its key.
      const theirs = yield* readKeyFile(file)
      if (theirs !== undefined) return theirs
      return yield* unusable(file, "disappeared while it was being created")
    }
    yield* Effect.logInfo(
      `Webhook signing secrets are encrypted with a key generated in ${file}; ` +
        "keep it with the database's backups, or set WEBHOOK_SECRET_KEY (base64 of 32 bytes) instead"
    )
    return key
  })

// The key in the file; undefined only when there is no file.
const readKeyFile = (file: string) =>
  Effect.tryPromise({ try: () => Fs.readFile(file, "utf8"), catch: (error) => error }).pipe(
    Effect.catch((error) =>
      (error as NodeJS.ErrnoException).code === "ENOENT"
        ? Effect.succeed(undefined)
        : Effect.fail(unusable(file, `cannot be read (${(error as NodeJS.ErrnoException).code ?? String(error)})`))
    ),
    Effect.flatMap((text) => {
      if (text === undefined) return Effect.succeed(undefined)
      const key = Buffer.from(text.trim(), "base64")
      return key.length === 32
        ? Effect.succeed(key)
        : Effect.fail(unusable(file, "does not hold the base64 of 32 bytes"))
    })
  )

const unusable = (file: string, problem: string) =>
  new SecretKeyFileError({
    message:
      `The webhook secret key file ${file} ${problem}. It is left as it is: replacing it would make every ` +
      "stored webhook signing secret unreadable. Restore the file, or set WEBHOOK_SECRET_KEY to the key " +
      "(base64 of 32 bytes); remove the file only if the stored signing secrets may be lost."
  })
