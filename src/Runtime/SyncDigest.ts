import * as WebCrypto from "effect/crypto/WebCrypto"
import * as NodeCrypto from "node:crypto"

type Crypto = NodeCrypto.webcrypto.Crypto

// Web Crypto names of the digests node:crypto computes the same way.
const algorithms: Record<string, string> = {
  "SHA-1": "sha1",
  "SHA-256": "sha256",
  "SHA-384": "sha384",
  "SHA-512": "sha512"
}

/**
 * The platform's Web Crypto, whose `subtle.digest` of the usual hashes is
 * computed at once with node:crypto. effect's workflows hash every
 * workflow's and activity's id with `subtle.digest`, which Node runs as a job
 * on its thread pool: a round trip through the pool for 32 bytes, per id. Everything else is the
 * platform's own.
 */
export const make = (platform: Crypto = NodeCrypto.webcrypto): Crypto => {
  const digest = (
    algorithm: NodeCrypto.webcrypto.AlgorithmIdentifier,
    data: NodeCrypto.webcrypto.BufferSource
  ): Promise<ArrayBuffer> => {
    const name = algorithms[(typeof algorithm === "string" ? algorithm : algorithm.name).toUpperCase()]
    if (name === undefined) return platform.subtle.digest(algorithm, data)
    const bytes = ArrayBuffer.isView(data)
      ? new Uint8Array(data.buffer, data.byteOffset, data.byteLength)
      : new Uint8Array(data)
    const hashed = NodeCrypto.createHash(name).update(bytes).digest()
    return Promise.resolve(hashed.buffer.slice(hashed.byteOffset, hashed.byteOffset + hashed.byteLength) as ArrayBuffer)
  }
  const own = <T extends object>(target: T, overrides: Record<PropertyKey, unknown>): T =>
    new Proxy(target, {
      get: (object, property) => {
        if (Object.hasOwn(overrides, property)) return overrides[property]
        const value = Reflect.get(object, property, object)
        return typeof value === "function" ? value.bind(object) : value
      }
    })
  return own(platform, { subtle: own(platform.subtle, { digest }) })
}

/** Web Crypto with synchronous digests, for everything that runs in the service. */
export const layer = WebCrypto.layer(make() as unknown as Parameters<typeof WebCrypto.layer>[0])
