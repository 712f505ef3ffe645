import { assert, describe, it } from "@effect/vitest"
import { scrubberOf } from "../../src/Tools/Invoke.ts"

describe("scrubbing secret values", () => {
  const value = "s3cr3t/value+with=signs"
  const scrub = scrubberOf(new Map([["TOKEN", value]]))

  it("replaces the value and its encoded forms", () => {
    const text = `a ${value} b ${encodeURIComponent(value)} c ${Buffer.from(value).toString("base64")}`
    const scrubbed = scrub(text)
    assert.strictEqual(scrubbed, "a [secret TOKEN] b [secret TOKEN] c [secret TOKEN]")
  })

  it("masks the start of a value that ends a text cut at a read limit", () => {
    for (const cut of [6, 10, value.length - 1]) {
      const scrubbed = scrub(`the answer: ${value.slice(0, cut)}`)
      assert.strictEqual(scrubbed, "the answer: [secret TOKEN]", `cut after ${cut} characters`)
    }
  })

  it("leaves a text whose end shares only a few characters with a value", () => {
    assert.strictEqual(scrub("ends with s3cr"), "ends with s3cr")
    assert.strictEqual(scrub("nothing secret here"), "nothing secret here")
  })
})
