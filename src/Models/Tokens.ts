import { createRequire } from "node:module"

// o200k_base is the encoding of the GPT-4o family. Other providers tokenize
// differently, but within a few percent, which is what a history budget needs.
// Its tables take about 70 MB, so they are loaded on the first count rather
// than at start: a service that never chats never pays for them.
type Encoding = typeof import("gpt-tokenizer/encoding/o200k_base")
let encoding: Encoding | undefined
const load = (): Encoding =>
  (encoding ??= createRequire(import.meta.url)("gpt-tokenizer/encoding/o200k_base") as Encoding)

// Special-token text such as "<|endoftext|>" in user input is counted as plain
// text instead of making the tokenizer throw.
const plainText = { disallowedSpecial: new Set<string>() }

/**
 * The tokenizer's merge step is quadratic in the length of one pre-token, and
 * the o200k pre-tokenizer keeps a run of CJK characters, letters, punctuation
 * or whitespace as one piece: 32,000 CJK characters took seconds of blocked
 * event loop. Runs of at least this many UTF-16 units are counted in pieces
 * of this size, which costs at most one token per cut (`npm run bench:tokens`
 * measures the error); ordinary text, whose runs are words, is counted exactly.
 */
export const maxRunChars = 128

/**
 * What JavaScript's \s matches, by UTF-16 code unit: the pre-tokenizer's runs
 * break at these, and the splitter cuts its pieces there. Most code units are
 * printable ASCII, answered by the first test.
 */
export const isSpace = (code: number) =>
  code > 0x20 && code < 0xa0
    ? false
    : code === 0x20 ||
      (code >= 0x09 && code <= 0x0d) ||
      code === 0xa0 ||
      code === 0x1680 ||
      (code >= 0x2000 && code <= 0x200a) ||
      code === 0x2028 ||
      code === 0x2029 ||
      code === 0x202f ||
      code === 0x205f ||
      code === 0x3000 ||
      code === 0xfeff

export const isHighSurrogate = (code: number) => code >= 0xd800 && code <= 0xdbff

/** Tokens of `text` under the o200k_base encoding. */
export const countTokens = (text: string): number => {
  if (text === "") return 0
  const count = (part: string) => load().countTokens(part, plainText)
  let total = 0
  // Start of the text not counted yet; it holds no long run.
  let pending = 0
  // One linear scan for maximal runs of whitespace or of anything else.
  let runStart = 0
  for (let i = 1; i <= text.length; i++) {
    if (i < text.length && isSpace(text.charCodeAt(i)) === isSpace(text.charCodeAt(i - 1))) continue
    if (i - runStart >= maxRunChars) {
      if (runStart > pending) total += count(text.slice(pending, runStart))
      let start = runStart
      while (start < i) {
        let end = Math.min(start + maxRunChars, i)
        // Never cut a surrogate pair in two.
        if (end < i && isHighSurrogate(text.charCodeAt(end - 1))) end--
        total += count(text.slice(start, end))
        start = end
      }
      pending = i
    }
    runStart = i
  }
  if (pending < text.length) total += count(text.slice(pending))
  return total
}
