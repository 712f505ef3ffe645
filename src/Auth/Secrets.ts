import { Effect } from "effect"
import * as Crypto from "node:crypto"

// scrypt parameters: 32 MiB and ~50 ms per hash on a small machine. They are
// stored with each hash, so they can be raised later without breaking logins.
const scryptN = 32768
const scryptR = 8
const scryptP = 1
const keyLength = 32
const maxmem = 128 * scryptN * scryptR * 2

const scrypt = (password: string, salt: Buffer, n: number, r: number, p: number, length: number) =>
  Effect.callback<Buffer>((resume) => {
    Crypto.scrypt(password.normalize("NFKC"), salt, length, { N: n, r, p, maxmem }, (error, key) => {
      // Only impossible parameters make scrypt fail, and we choose them.
      if (error) resume(Effect.die(error))
      else resume(Effect.succeed(key))
    })
  })

/** `scrypt$N$r$p$salt$hash`, salt and hash in base64url. */
export const hashPassword = Effect.fn("Secrets.hashPassword")(function*(password: string) {
  const salt = Crypto.randomBytes(16)
  const key = yield* scrypt(password, salt, scryptN, scryptR, scryptP, keyLength)
  return `scrypt$${scryptN}$${scryptR}$${scryptP}$${salt.toString("base64url")}$${key.toString("base64url")}`
})

/** Constant-time check of a password against a stored hash; a malformed hash never matches. */
export const verifyPassword = Effect.fn("Secrets.verifyPassword")(function*(password: string, stored: string) {
  const parts = stored.split("$")
  if (parts.length !== 6 || parts[0] !== "scrypt") return false
  const [n, r, p] = [Number(parts[1]), Number(parts[2]), Number(parts[3])]
  const salt = Buffer.from(parts[4]!, "base64url")
  const expected = Buffer.from(parts[5]!, "base64url")
  if (!Number.isInteger(n) || !Number.isInteger(r) || !Number.isInteger(p) || expected.length === 0) return false
  const actual = yield* scrypt(password, salt, n, r, p, expected.length)
  return Crypto.timingSafeEqual(actual, expected)
})

/** A 256-bit random secret, base64url, behind a recognisable prefix (`ak_` keys, `st_` session tokens). */
export const newSecret = (prefix: "ak_" | "st_"): string => prefix + Crypto.randomBytes(32).toString("base64url")

/** What we store instead of a secret. The secrets carry 256 bits, so a fast hash is enough. */
export const hashSecret = (secret: string): string => Crypto.createHash("sha256").update(secret).digest("hex")

export const constantTimeEqual = (a: string, b: string): boolean => {
  const left = Buffer.from(a)
  const right = Buffer.from(b)
  return left.length === right.length && Crypto.timingSafeEqual(left, right)
}
