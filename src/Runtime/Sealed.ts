import * as Crypto from "node:crypto"

// Values kept encrypted at rest (webhook signing secrets, the tenants'
// secrets vault): AES-256-GCM under a 32-byte key, stored as
// `<label>.<iv>.<tag>.<ciphertext>` (base64 parts). The label names the
// format (and so how to open it); the additional data binds a value to the
// row that holds it, so a value copied into another row does not open there.

/** The additional data of a value: a JSON array, so no two owners give the same bytes. */
export const additionalData = (...parts: ReadonlyArray<string>): Buffer => Buffer.from(JSON.stringify(parts), "utf8")

/** `plaintext` sealed under `key` with `aad`, as `<label>.<iv>.<tag>.<ciphertext>`. */
export const seal = (key: Buffer, label: string, plaintext: string, aad: Buffer): string => {
  const iv = Crypto.randomBytes(12)
  const cipher = Crypto.createCipheriv("aes-256-gcm", key, iv)
  cipher.setAAD(aad)
  const sealed = Buffer.concat([cipher.update(plaintext, "utf8"), cipher.final()])
  return [label, iv.toString("base64"), cipher.getAuthTag().toString("base64"), sealed.toString("base64")].join(".")
}

/**
 * The plaintext of a value `seal` made with `label`, or undefined when it is
 * not of that label's format or does not open with `key` and `aad` (another
 * key, another owner, altered bytes). No `aad`: a value sealed without one.
 */
export const open = (key: Buffer, label: string, sealed: string, aad: Buffer | undefined): string | undefined => {
  const [found, iv, tag, data, extra] = sealed.split(".")
  if (found !== label || iv === undefined || tag === undefined || data === undefined || extra !== undefined)
    return undefined
  try {
    const decipher = Crypto.createDecipheriv("aes-256-gcm", key, Buffer.from(iv, "base64"))
    if (aad !== undefined) decipher.setAAD(aad)
    decipher.setAuthTag(Buffer.from(tag, "base64"))
    return Buffer.concat([decipher.update(Buffer.from(data, "base64")), decipher.final()]).toString("utf8")
  } catch {
    return undefined
  }
}
