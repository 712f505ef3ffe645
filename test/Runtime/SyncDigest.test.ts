import { assert, describe, it } from "@effect/vitest"
import * as NodeCrypto from "node:crypto"
import * as SyncDigest from "../../src/Runtime/SyncDigest.ts"

describe("SyncDigest", () => {
  const crypto = SyncDigest.make()
  const native = NodeCrypto.webcrypto

  it("digests as the platform does, for every hash it computes itself and any view of the bytes", async () => {
    const bytes = new TextEncoder().encode("9:Execution:0123456789abcdef")
    const padded = new Uint8Array(bytes.length + 8)
    padded.set(bytes, 4)
    const view = padded.subarray(4, 4 + bytes.length)
    for (const name of ["SHA-1", "SHA-256", "SHA-384", "SHA-512"]) {
      const expected = Buffer.from(await native.subtle.digest(name, bytes)).toString("hex")
      assert.strictEqual(Buffer.from(await crypto.subtle.digest(name, bytes)).toString("hex"), expected, name)
      assert.strictEqual(Buffer.from(await crypto.subtle.digest({ name }, view)).toString("hex"), expected, name)
      assert.strictEqual(Buffer.from(await crypto.subtle.digest(name, bytes.buffer)).toString("hex"), expected, name)
    }
  })

  it("leaves everything else to the platform", async () => {
    const random = crypto.getRandomValues(new Uint8Array(16))
    assert.strictEqual(random.length, 16)
    assert.match(crypto.randomUUID(), /^[0-9a-f-]{36}$/)
    const key = await crypto.subtle.generateKey({ name: "HMAC", hash: "SHA-256" }, true, ["sign"])
    const signed = await crypto.subtle.sign("HMAC", key, new Uint8Array([1, 2, 3]))
    assert.strictEqual(signed.byteLength, 32)
  })
})
