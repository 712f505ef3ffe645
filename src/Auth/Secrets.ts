import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Semaphore from "effect/Semaphore"
import { AppConfig } from "../Config.ts"
import { ServiceUnavailable } from "../Domain/Problems.ts"
import * as Crypto from "node:crypto"
import * as Traced from "../Observability/Traced.ts"

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
export const hashPassword = Traced.fn("Secrets.hashPassword")(function* (password: string) {
  const salt = Crypto.randomBytes(16)
  const key = yield* scrypt(password, salt, scryptN, scryptR, scryptP, keyLength)
  return `scrypt$${scryptN}$${scryptR}$${scryptP}$${salt.toString("base64url")}$${key.toString("base64url")}`
})

/** Constant-time check of a password against a stored hash; a malformed hash never matches. */
export const verifyPassword = Traced.fn("Secrets.verifyPassword")(function* (password: string, stored: string) {
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

/**
 * What we store instead of a secret. The secrets carry 256 bits, so a fast
 * hash is enough (Node's one-shot hash: every key-authenticated request
 * hashes its key to find it).
 */
export const hashSecret = (secret: string): string => Crypto.hash("sha256", secret, "hex")

export const constantTimeEqual = (a: string, b: string): boolean => {
  const left = Buffer.from(a)
  const right = Buffer.from(b)
  return left.length === right.length && Crypto.timingSafeEqual(left, right)
}

/**
 * A bound on work running at once: at most `concurrency` run, at most
 * `queue` more wait, and beyond that `busy` fails at once instead of piling up.
 */
export const makeGate = <E>(concurrency: number, queue: number, busy: () => E) =>
  Effect.map(Semaphore.make(Math.max(1, concurrency)), (semaphore) => {
    let admitted = 0
    return <A, E2, R>(effect: Effect.Effect<A, E2, R>): Effect.Effect<A, E | E2, R> =>
      Effect.suspend((): Effect.Effect<A, E | E2, R> => {
        if (admitted >= Math.max(1, concurrency) + Math.max(0, queue)) return Effect.fail(busy())
        admitted++
        return semaphore
          .withPermits(1)(effect)
          .pipe(Effect.ensuring(Effect.sync(() => admitted--)))
      })
  })

/**
 * Password hashing with bounded concurrency. Each scrypt takes 32 MiB and a
 * thread of libuv's pool, which DNS lookups and file I/O share: a flood of
 * logins must neither exhaust memory nor starve the rest of the service, so
 * at most PASSWORD_HASH_CONCURRENCY hashes run and PASSWORD_HASH_QUEUE wait;
 * beyond that the answer is 503 with Retry-After.
 */
export class PasswordHasher extends Context.Service<PasswordHasher>()("agent-host/PasswordHasher", {
  make: Effect.gen(function* () {
    const config = yield* AppConfig
    const gate = yield* makeGate(
      config.passwordHashConcurrency,
      config.passwordHashQueue,
      () => new ServiceUnavailable({ detail: "Too many logins at once; try again in a moment" })
    )
    return {
      hash: (password: string) => gate(hashPassword(password)),
      verify: (password: string, stored: string) => gate(verifyPassword(password, stored))
    } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make)
}
