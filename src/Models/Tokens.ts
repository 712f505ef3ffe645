import { createRequire } from "node:module"

// o200k_base is the encoding of the GPT-4o family. Other providers tokenize
// differently, but within a few percent, which is what a history budget needs.
// Its tables take about 70 MB, so they are loaded on the first count rather
// than at start: a service that never chats never pays for them.
type Encoding = typeof import("gpt-tokenizer/encoding/o200k_base")
let encoding: Encoding | undefined
const load = (): Encoding => (encoding ??= createRequire(import.meta.url)("gpt-tokenizer/encoding/o200k_base") as Encoding)

// Special-token text such as "<|endoftext|>" in user input is counted as plain
// text instead of making the tokenizer throw.
const plainText = { disallowedSpecial: new Set<string>() }

/** Tokens of `text` under the o200k_base encoding. */
export const countTokens = (text: string): number => text === "" ? 0 : load().countTokens(text, plainText)
