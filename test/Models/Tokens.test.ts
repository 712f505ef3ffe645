import { assert, describe, it } from "@effect/vitest"
import { createRequire } from "node:module"
import { countTokens } from "../../src/Models/Tokens.ts"

// The library's own count, without the service's bound on long runs.
const tokenizer = createRequire(import.meta.url)(
  "gpt-tokenizer/encoding/o200k_base"
) as typeof import("gpt-tokenizer/encoding/o200k_base")
const exact = (text: string) => tokenizer.countTokens(text, { disallowedSpecial: new Set<string>() })

const pick = (alphabet: ReadonlyArray<string>, size: number) => {
  let text = ""
  while (text.length < size) text += alphabet[Math.floor(Math.random() * alphabet.length)]
  return text
}
const range = (from: number, count: number) => Array.from({ length: count }, (_, i) => String.fromCodePoint(from + i))
const cjk = range(0x4e00, 20_000)

const ordinary = [
  "The quick brown fox jumps over the lazy dog. Otters float by the river bank, holding hands while they sleep.",
  'export const countTokens = (text: string): number => text === "" ? 0 : load().countTokens(text)\n\n  // done',
  JSON.stringify({ id: "01J9Z", steps: [{ id: "research", prompt: "Research {{input}}" }], timeoutMs: 300000 }),
  "今日は良い天気ですね。 我们明天去公园散步吧。 Mixed with English words, emoji 🦦🦦 and numbers 3.14159.",
  "Line one\r\nLine two\n\n\tIndented line with trailing spaces   \nКириллица тоже считается. Ελληνικά επίσης.",
  "<|endoftext|> is plain text here, not a special token."
]

describe("countTokens", () => {
  it("counts ordinary text exactly as the tokenizer does", () => {
    for (const text of ordinary) assert.strictEqual(countTokens(text), exact(text), text)
    const long = Array.from({ length: 400 }, (_, i) => ordinary[i % ordinary.length]).join(" ")
    assert.strictEqual(countTokens(long), exact(long))
    assert.strictEqual(countTokens(""), 0)
  })

  it("stays within a few percent of the tokenizer on long runs (CJK, letters, punctuation, whitespace, emoji)", () => {
    const runs = [
      pick(cjk, 32_000),
      pick(range(0x61, 26), 8_000),
      pick([..."!@#$%^&*()-+=[]{};:,.<>/?|~"], 8_000),
      pick([" ", " ", "\t"], 8_000),
      // Surrogate pairs: a cut inside one would count replacement characters instead.
      pick(range(0x1f400, 200), 8_000),
      `Before the run, ${pick(cjk, 4_000)} and after it.`
    ]
    for (const text of runs) {
      const expected = exact(text)
      const counted = countTokens(text)
      assert.isAtMost(
        Math.abs(counted - expected) / expected,
        0.03,
        `${counted} vs ${expected} for ${text.slice(0, 20)}…`
      )
    }
  }, 60_000)

  // Today's tokenizer takes seconds per such run; bounded, twenty of them fit
  // easily in this test's timeout. The time itself is measured by `npm run bench:tokens`.
  it("counts twenty distinct 32,000-character CJK runs within the test's bound", () => {
    for (let i = 0; i < 20; i++) {
      const text = pick(cjk, 32_000)
      const counted = countTokens(text)
      // Each of these characters is one to three tokens (three UTF-8 bytes).
      assert.isAtLeast(counted, text.length)
      assert.isAtMost(counted, text.length * 3)
    }
  }, 10_000)
})
