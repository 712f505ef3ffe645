import { countTokens as countO200k } from "gpt-tokenizer/encoding/o200k_base"

// o200k_base is the encoding of the GPT-4o family. Other providers tokenize
// differently, but within a few percent, which is what a history budget needs.
// Special-token text such as "<|endoftext|>" in user input is counted as plain
// text instead of making the tokenizer throw.
const plainText = { disallowedSpecial: new Set<string>() }

/** Tokens of `text` under the o200k_base encoding. */
export const countTokens = (text: string): number => text === "" ? 0 : countO200k(text, plainText)
