import * as Context from "effect/Context"
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
 * when that is unset, a key generated once and kept in a file beside the
 * embedded database's data. A stored secret is `v1.<iv>.<tag>.<ciphertext>`.
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

// The key file: read when it exists, otherwise made (mode 0600). Several
// nodes each make their own, which cannot open each other's secrets: hence the log line.
const keyFile = (file: string) =>
  Effect.gen(function*() {
    const existing = yield* Effect.promise(() => Fs.readFile(file, "utf8").catch(() => undefined))
    const decoded = existing === undefined ? undefined : Buffer.from(existing.trim(), "base64")
    if (decoded !== undefined && decoded.length === 32) return decoded
    const key = Crypto.randomBytes(32)
    yield* Effect.tryPromise(async () => {
      await Fs.mkdir(Path.dirname(file), { recursive: true })
      // `wx`: two processes starting at once keep the first one's key.
      await Fs.writeFile(file, `${key.toString("base64")}\n`, { mode: 0o600, flag: existing === undefined ? "wx" : "w" })
    }).pipe(Effect.orDie)
    yield* Effect.logInfo(
      `Webhook signing secrets are encrypted with a key generated in ${file}; ` +
        "several nodes must share one key: set WEBHOOK_SECRET_KEY (base64 of 32 bytes) on each"
    )
    return key
  }).pipe(
    Effect.catchDefect(() =>
      // Another process made the file between the read and the write: use its key.
      Effect.promise(() => Fs.readFile(file, "utf8")).pipe(Effect.map((text) => Buffer.from(text.trim(), "base64")))
    )
  )
