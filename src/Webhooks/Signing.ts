import * as Context from "effect/Context"
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Crypto from "node:crypto"
import * as Fs from "node:fs/promises"
import * as Path from "node:path"
import { AppConfig } from "../Config.ts"

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
 * Encrypts signing secrets at rest (AES-256-GCM) with WEBHOOK_SECRET_KEY, or,
 * when that is unset (one node only: Config.ts refuses several without it), a
 * key generated once and kept in a file beside the embedded database's data.
 * A stored secret is `v1.<iv>.<tag>.<ciphertext>`.
 */
export class SecretBox extends Context.Service<SecretBox, {
  readonly seal: (secret: string) => string
  /** The secret, or undefined when it cannot be opened (the key changed). */
  readonly open: (sealed: string) => string | undefined
}>()("agent-host/Webhooks/SecretBox") {
  static readonly layer = Layer.effect(
    SecretBox,
    Effect.gen(function*() {
      const config = yield* AppConfig
      const key = Option.isSome(config.webhookSecretKey)
        ? Buffer.from(Redacted.value(config.webhookSecretKey.value).trim(), "base64")
        : yield* keyFile(Option.match(config.embeddedPostgresDataDir, {
          onNone: () => Path.resolve(".data", "webhook-secret.key"),
          onSome: (dir) => Path.join(Path.dirname(dir), "webhook-secret.key")
        }))
      return SecretBox.of({
        seal: (secret) => {
          const iv = Crypto.randomBytes(12)
          const cipher = Crypto.createCipheriv("aes-256-gcm", key, iv)
          const sealed = Buffer.concat([cipher.update(secret, "utf8"), cipher.final()])
          return ["v1", iv.toString("base64"), cipher.getAuthTag().toString("base64"), sealed.toString("base64")].join(".")
        },
        open: (sealed) => {
          const [version, iv, tag, data] = sealed.split(".")
          if (version !== "v1" || iv === undefined || tag === undefined || data === undefined) return undefined
          try {
            const decipher = Crypto.createDecipheriv("aes-256-gcm", key, Buffer.from(iv, "base64"))
            decipher.setAuthTag(Buffer.from(tag, "base64"))
            return Buffer.concat([decipher.update(Buffer.from(data, "base64")), decipher.final()]).toString("utf8")
          } catch {
            return undefined
          }
        }
      })
    })
  )
}

/** The key file exists but cannot be used: the start stops rather than replace it. */
export class SecretKeyFileError extends Data.TaggedError("SecretKeyFileError")<{ readonly message: string }> {}

// The key file: read when it exists, otherwise made (mode 0600). An existing
// file that cannot be read or decoded stops the start: replacing it would make
// every stored signing secret unreadable.
const keyFile = (file: string) =>
  Effect.gen(function*() {
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
      return key.length === 32 ? Effect.succeed(key) : Effect.fail(unusable(file, "does not hold the base64 of 32 bytes"))
    })
  )

const unusable = (file: string, problem: string) =>
  new SecretKeyFileError({
    message: `The webhook secret key file ${file} ${problem}. It is left as it is: replacing it would make every ` +
      "stored webhook signing secret unreadable. Restore the file, or set WEBHOOK_SECRET_KEY to the key " +
      "(base64 of 32 bytes); remove the file only if the stored signing secrets may be lost."
  })
