import type * as Effect from "effect/Effect"
import * as Stream from "effect/Stream"
import type * as LanguageModel from "effect/ai/LanguageModel"
import * as Language from "./Language.ts"
import type * as Prompt from "effect/ai/Prompt"
import type * as Response from "effect/ai/Response"
import { localRoomTurn, sourcesHeader, sourcesIn } from "./Conventions.ts"
import { countTokens } from "./Tokens.ts"

/**
 * The built-in `local` model: offline, instant and deterministic, so the
 * service works and can be tested with nothing configured. It does not
 * understand anything; it answers from what it is given (the agent's
 * instructions, the earlier turns, the new message) so a conversation visibly
 * carries its context.
 */

export const modelId = "local"

/** Every local reply starts with this, so nobody mistakes it for a real model. */
export const replyPrefix = "[local model] "

export interface Turn {
  readonly role: "user" | "assistant"
  readonly content: string
}

const stopWords = new Set(
  (
    "a an and are as at be been but by can could did do does for from had has have how i i'm if in into is it its " +
    "just me my of on or our so than that the their them then there these they this to too us was we were what " +
    "when where which who why will with would you your yours about again also any am some tell said say told " +
    "earlier before previous previously remember recall mention mentioned"
  ).split(" ")
)

/** Content words: lower-cased, without punctuation or stop words. */
const contentWords = (text: string): Set<string> =>
  new Set(
    text
      .toLowerCase()
      .split(/[^\p{L}\p{N}']+/u)
      .filter((word) => word.length > 1 && !stopWords.has(word))
  )

const sharedWords = (a: Set<string>, b: Set<string>) => {
  let shared = 0
  for (const word of a) if (b.has(word)) shared++
  return shared
}

/** `text` on one line, at most `max` characters, in quotes, ending a sentence. */
const quote = (text: string, max = 160): string => {
  const flat = text.replace(/\s+/g, " ").trim()
  const short = flat.length <= max ? flat : `${flat.slice(0, max - 1).trimEnd()}…`
  return /[.!?…]$/.test(short) ? `"${short}"` : `"${short}".`
}

const sentencesOf = (text: string): Array<string> =>
  text
    .split(/(?<=[.!?])\s+|\n+/)
    .map((sentence) => sentence.trim())
    .filter((sentence) => sentence !== "")

/** The candidate sharing most content words with `words`; ties go to the latest. None when nothing is shared. */
const mostRelevant = (candidates: ReadonlyArray<string>, words: Set<string>): string | undefined => {
  let best: string | undefined
  let bestScore = 0
  candidates.forEach((candidate) => {
    const score = sharedWords(words, contentWords(candidate))
    if (score > 0 && score >= bestScore) {
      best = candidate
      bestScore = score
    }
  })
  return best
}

const greeting = /^\s*(hi|hello|hey|howdy|greetings|good (morning|afternoon|evening))\b/i
const asksAboutEarlier =
  /\b(earlier|before|previous(ly)?|remember|recall|did i (say|tell|mention|ask)|what did i|i (said|told you|mentioned)|my name|so far)\b/i
const asksAboutSelf = /\b(who are you|what are you|your name|your (role|job|purpose|instructions)|what can you do)\b/i
const selfDescription = /\b(you are|you're|your name|act as|as an? )\b/i

/**
 * An extractive answer from the sources of a grounded prompt: the sentence
 * sharing most content words with the message, from the source sharing most
 * (ties go to the better-ranked source, then the earlier sentence); the best
 * source's first sentence when nothing is shared.
 */
const fromSources = (message: string, system: string): string | undefined => {
  const sources = sourcesIn(system)
  if (sources.length === 0) return undefined
  const words = contentWords(message)
  let best = sources[0]!
  let bestScore = 0
  for (const source of sources) {
    const score = sharedWords(words, contentWords(source.content))
    if (score > bestScore) {
      best = source
      bestScore = score
    }
  }
  const sentences = sentencesOf(best.content)
  let sentence = sentences[0] ?? best.content
  let sentenceScore = 0
  for (const candidate of sentences) {
    const score = sharedWords(words, contentWords(candidate))
    if (score > sentenceScore) {
      sentence = candidate
      sentenceScore = score
    }
  }
  return `According to [${best.n}] (${best.label}): ${quote(sentence, 300)}`
}

/** The local model's reply to a conversation; the same input always gives the same reply. */
export const reply = (prompt: string, turns: ReadonlyArray<Turn>): string => {
  const lastUser = turns.findLastIndex((turn) => turn.role === "user")
  if (lastUser === -1) return `${replyPrefix}There is no message to answer yet.`
  const message = turns[lastUser]!.content
  const grounded = fromSources(message, prompt)
  // The agent's own instructions are what comes before the sources.
  const system = grounded === undefined ? prompt : prompt.slice(0, prompt.lastIndexOf(sourcesHeader))
  // A turn in a team's room follows the room's protocol instead of chatting.
  const roomTurn = localRoomTurn(message)
  if (roomTurn !== undefined) return replyPrefix + (grounded === undefined ? "" : `${grounded}\n`) + roomTurn
  const earlier = turns
    .slice(0, lastUser)
    .filter((turn) => turn.role === "user")
    .map((turn) => turn.content)
  const words = contentWords(message)
  const instructions = sentencesOf(system)
  const lines: Array<string> = []

  if (greeting.test(message) && words.size <= 3) lines.push("Hello!")
  else if (message.includes("?")) lines.push(`You asked: ${quote(message)}`)
  else lines.push(`You said: ${quote(message)}`)

  if (grounded !== undefined) lines.push(grounded)
  else if (asksAboutSelf.test(message)) {
    const about = instructions.find((sentence) => selfDescription.test(sentence)) ?? instructions[0]
    lines.push(
      about === undefined
        ? "I am the built-in local model, and this agent has no instructions."
        : `My instructions say: ${quote(about)}`
    )
  } else if (instructions.length > 0) {
    const relevant = mostRelevant(instructions, words) ?? instructions[0]!
    lines.push(`I follow my instructions: ${quote(relevant)}`)
  }

  if (asksAboutEarlier.test(message)) {
    const recalled = mostRelevant(earlier, words) ?? earlier.at(-1)
    lines.push(
      recalled === undefined
        ? "This is the start of our conversation, so there is nothing earlier to recall."
        : `You said earlier: ${quote(recalled)}`
    )
  } else {
    const related = mostRelevant(earlier, words)
    if (related !== undefined) lines.push(`That relates to what you said earlier: ${quote(related)}`)
  }

  lines.push("(I am the built-in offline model; configure an OpenAI or Anthropic model for real answers.)")
  return replyPrefix + lines.join(" ")
}

/** Word-sized pieces of `text` that concatenate back to it exactly. */
export const words = (text: string): Array<string> => text.match(/\s*\S+\s*/g) ?? []

/** Tokens the local model reads: its instructions and every turn, with the service's tokenizer. */
export const inputTokens = (system: string, turns: ReadonlyArray<Turn>): number =>
  turns.reduce((total, turn) => total + countTokens(turn.content), countTokens(system))

const textOf = (parts: ReadonlyArray<{ readonly type: string; readonly text?: string | undefined }>) =>
  parts.flatMap((part) => (part.type === "text" && part.text !== undefined ? [part.text] : [])).join("")

const fromPrompt = (prompt: Prompt.Prompt) => ({
  system: prompt.content.flatMap((message) => (message.role === "system" ? [message.content] : [])).join("\n\n"),
  turns: prompt.content.flatMap(
    (message): Array<Turn> =>
      message.role === "user" || message.role === "assistant"
        ? [{ role: message.role, content: textOf(message.content) }]
        : []
  )
})

/**
 * `text` cut to its longest run of whole words within `maxTokens` tokens, as
 * a provider stops at `max_tokens`; `tokens` is what `text` counts.
 */
export const withinTokens = (text: string, tokens: number, maxTokens: number) => {
  if (tokens <= maxTokens) return { text, tokens, cut: false }
  const pieces = words(text)
  // The most words that fit, by bisection: a count per step, not per word.
  let fits = 0
  let over = pieces.length
  while (over - fits > 1) {
    const middle = (fits + over) >> 1
    if (countTokens(pieces.slice(0, middle).join("")) <= maxTokens) fits = middle
    else over = middle
  }
  const kept = pieces.slice(0, fits).join("")
  return { text: kept, tokens: countTokens(kept), cut: true }
}

const answer = (prompt: Prompt.Prompt, maxTokens: number) => {
  const { system, turns } = fromPrompt(prompt)
  const full = reply(system, turns)
  const { cut, text, tokens } = withinTokens(full, countTokens(full), maxTokens)
  const usage: typeof Response.Usage.Encoded = {
    inputTokens: {
      total: inputTokens(system, turns),
      uncached: undefined,
      cacheRead: undefined,
      cacheWrite: undefined
    },
    outputTokens: { total: tokens, text: undefined, reasoning: undefined }
  }
  return { text, usage, reason: cut ? ("length" as const) : ("stop" as const) }
}

/** The `local` model as an effect/ai `LanguageModel`, like the remote providers. */
export const make: Effect.Effect<LanguageModel.LanguageModel> = Language.make({
  generateText: (options) =>
    Language.MaxOutputTokens.useSync((maxTokens): Array<Response.PartEncoded> => {
      const { reason, text, usage } = answer(options.prompt, maxTokens)
      return [
        { type: "response-metadata", modelId },
        { type: "text", text },
        { type: "finish", reason, usage }
      ]
    }),
  streamText: (options) =>
    Stream.unwrap(
      Language.MaxOutputTokens.useSync((maxTokens) => {
        const { reason, text, usage } = answer(options.prompt, maxTokens)
        return Stream.fromIterable<Response.StreamPartEncoded>([
          { type: "response-metadata", modelId },
          { type: "text-start", id: "0" },
          ...words(text).map((delta) => ({ type: "text-delta" as const, id: "0", delta })),
          { type: "text-end", id: "0" },
          { type: "finish", reason, usage }
        ])
      })
    )
})
