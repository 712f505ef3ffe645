// Token counting, worst cases side by side: the raw tokenizer (gpt-tokenizer's
// o200k_base countTokens) against the service's countTokens (src/Models/Tokens.ts),
// on texts of 32,000 characters. Each figure is the median of several counts of
// distinct texts (the tokenizer caches merges by exact piece, so repeating one
// text would measure the cache).
//
//   npm run bench:tokens          BENCH_TOKEN_RUNS=5 counts per case
import { createRequire } from "node:module"
import { countTokens } from "../src/Models/Tokens.ts"

const raw = createRequire(import.meta.url)(
  "gpt-tokenizer/encoding/o200k_base"
) as typeof import("gpt-tokenizer/encoding/o200k_base")
const plainText = { disallowedSpecial: new Set<string>() }
const runs = Number(process.env.BENCH_TOKEN_RUNS ?? 5)
const size = 32_000

const pick = (alphabet: ReadonlyArray<string>) => {
  let text = ""
  while (text.length < size) text += alphabet[Math.floor(Math.random() * alphabet.length)]
  return text
}
const range = (from: number, count: number) => Array.from({ length: count }, (_, i) => String.fromCodePoint(from + i))
const prose =
  "The quick brown fox jumps over the lazy dog, then rests; otters, meanwhile, float by the river bank. " +
  "Numbers like 3.14159 and 2026 appear too, with punctuation (and brackets) in between! "
const words = prose.split(" ")

const cases: ReadonlyArray<readonly [string, () => string]> = [
  ["CJK run (32,000 chars, no spaces)", () => pick(range(0x4e00, 20_000))],
  ["random letters (one run)", () => pick(range(0x61, 26))],
  ["punctuation run", () => pick([..."!@#$%^&*()-+=[]{};:,.<>/?|~"])],
  ["whitespace run", () => pick([" ", " ", " ", "\t"])],
  ["ordinary English prose", () => pick(words.map((word) => `${word} `))]
]

const median = (values: ReadonlyArray<number>) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!
const time = (count: () => number) => {
  const startedAt = performance.now()
  const tokens = count()
  return { ms: performance.now() - startedAt, tokens }
}

// Loads the tables and warms both paths up.
raw.countTokens("warm up", plainText)
countTokens("warm up")

console.log(`Token counting, median of ${runs} distinct texts of ${size} characters each\n`)
console.log(
  [
    "case".padEnd(36),
    "before ms".padStart(10),
    "after ms".padStart(10),
    "speed-up".padStart(9),
    "tokens before".padStart(14),
    "tokens after".padStart(13),
    "diff".padStart(7)
  ].join(" ")
)
for (const [name, make] of cases) {
  const before: Array<number> = []
  const after: Array<number> = []
  const diffs: Array<number> = []
  let tokensBefore = 0
  let tokensAfter = 0
  for (let i = 0; i < runs; i++) {
    const text = make()
    const exact = time(() => raw.countTokens(text, plainText))
    const bounded = time(() => countTokens(text))
    before.push(exact.ms)
    after.push(bounded.ms)
    diffs.push(((bounded.tokens - exact.tokens) / exact.tokens) * 100)
    tokensBefore = exact.tokens
    tokensAfter = bounded.tokens
  }
  const b = median(before)
  const a = median(after)
  console.log(
    [
      name.padEnd(36),
      b.toFixed(1).padStart(10),
      a.toFixed(1).padStart(10),
      `${(b / a).toFixed(1)}x`.padStart(9),
      String(tokensBefore).padStart(14),
      String(tokensAfter).padStart(13),
      `${median(diffs) >= 0 ? "+" : ""}${median(diffs).toFixed(2)}%`.padStart(7)
    ].join(" ")
  )
}
