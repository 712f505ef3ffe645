import * as Effect from "effect/Effect"
import * as Stream from "effect/Stream"
import type * as LanguageModel from "effect/ai/LanguageModel"
import * as Language from "./Language.ts"
import type * as Prompt from "effect/ai/Prompt"
import type * as Response from "effect/ai/Response"
import type * as Tool from "effect/ai/Tool"
import { localRoomTurn, sourcesHeader, sourcesIn } from "./Conventions.ts"
import type { ResponseFormat } from "./Models.ts"
import { instanceOf } from "./SchemaInstance.ts"
import { countTokens } from "./Tokens.ts"

/**
 * The built-in `local` model: offline, instant and deterministic, so the
 * service works and can be tested with nothing configured. It does not
 * understand anything; it answers from what it is given (the agent's
 * instructions, the earlier turns, the new message) so a conversation visibly
 * carries its context. Offered tools, it calls them when told to in so many
 * words (`call NAME {JSON}`) and answers from their results, so every tool
 * path runs offline (docs/tools.md, "The local model's tool rule").
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

const footer = "(I am the built-in offline model; configure an OpenAI or Anthropic model for real answers.)"

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

  lines.push(footer)
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

/** A call the local model makes: `params` parsed JSON, or the raw text when it was not JSON. */
interface LocalCall {
  readonly id: string
  readonly name: string
  readonly params: unknown
}

/** The arguments of a call as text: its JSON, or the raw text it was given as. */
const argumentsText = (params: unknown): string =>
  typeof params === "string" ? params : (JSON.stringify(params) ?? "")

/** What a tool result says, as text: the content Models passes is a string already. */
const resultText = (result: unknown): string => (typeof result === "string" ? result : (JSON.stringify(result) ?? ""))

/**
 * The tools the local model may call under `choice`, in the order offered,
 * and whether it must call one. A choice naming no offered tool leaves none.
 */
const callable = (
  tools: ReadonlyArray<Tool.Any>,
  choice: LanguageModel.ToolChoice<string>
): { readonly names: ReadonlyArray<string>; readonly required: boolean } => {
  const offered = tools.map((tool) => tool.name)
  if (choice === "none") return { names: [], required: false }
  if (choice === "auto") return { names: offered, required: false }
  if (choice === "required") return { names: offered, required: true }
  if ("tool" in choice) return { names: offered.filter((name) => name === choice.tool), required: true }
  return { names: offered.filter((name) => choice.oneOf.includes(name)), required: choice.mode === "required" }
}

// `call NAME`: `call` as a word of its own (not `recall`), in any case; the
// name as tools are named, exactly as offered (checked by the caller).
const callPhrase = /(?<![\p{L}\p{N}_-])call\s+([A-Za-z0-9_-]{1,64})(?![A-Za-z0-9_-])/giu

/** The end (exclusive) of the JSON object opening at `start`, braces in strings aside; none when it never closes. */
const objectEnd = (text: string, start: number): number | undefined => {
  let depth = 0
  let inString = false
  for (let index = start; index < text.length; index++) {
    const char = text[index]
    if (inString) {
      if (char === "\\") index++
      else if (char === '"') inString = false
    } else if (char === '"') inString = true
    else if (char === "{") depth++
    else if (char === "}" && --depth === 0) return index + 1
  }
  return undefined
}

/**
 * The `call NAME {JSON object}` phrases of `text` naming a tool in `names`,
 * in order: the object parsed, or its raw text when it is not JSON (an object
 * that never closes runs to the end of the text); no object is `{}`.
 */
const callsIn = (text: string, names: ReadonlySet<string>): Array<{ name: string; params: unknown }> => {
  const calls: Array<{ name: string; params: unknown }> = []
  const phrase = new RegExp(callPhrase)
  for (let match = phrase.exec(text); match !== null; match = phrase.exec(text)) {
    const name = match[1]!
    if (!names.has(name)) continue
    const after = phrase.lastIndex
    const start = after + (text.slice(after).match(/^\s*/)?.[0].length ?? 0)
    if (text[start] !== "{") {
      calls.push({ name, params: {} })
      continue
    }
    const end = objectEnd(text, start) ?? text.length
    const raw = text.slice(start, end).trim()
    let params: unknown
    try {
      params = JSON.parse(raw)
    } catch {
      params = raw
    }
    calls.push({ name, params })
    // A `call` inside the arguments is part of them, not another call.
    phrase.lastIndex = end
  }
  return calls
}

type ToolResult = Extract<Prompt.ToolMessage["content"][number], { readonly type: "tool-result" }>

/** The tool results the prompt ends with (its trailing `tool` messages), in order. */
const trailingResults = (prompt: Prompt.Prompt): Array<ToolResult> => {
  const messages = prompt.content
  let first = messages.length
  while (first > 0 && messages[first - 1]!.role === "tool") first--
  return messages
    .slice(first)
    .flatMap((message) =>
      message.role === "tool" ? message.content.filter((part): part is ToolResult => part.type === "tool-result") : []
    )
}

/** Every tool call and tool result the prompt holds: what the model has read of earlier calls. */
const earlierCalls = (prompt: Prompt.Prompt) =>
  prompt.content.flatMap((message) =>
    message.role === "assistant" ? message.content.flatMap((part) => (part.type === "tool-call" ? [part] : [])) : []
  )
const earlierResults = (prompt: Prompt.Prompt) =>
  prompt.content.flatMap((message) =>
    message.role === "tool" ? message.content.filter((part): part is ToolResult => part.type === "tool-result") : []
  )

const localIdPrefix = "local_call_"

/** The number after which this reply's call ids go on: the highest `local_call_N` the prompt holds. */
const lastLocalId = (prompt: Prompt.Prompt): number => {
  let last = 0
  for (const { id } of [...earlierCalls(prompt), ...earlierResults(prompt)]) {
    const number = id.startsWith(localIdPrefix) ? Number(id.slice(localIdPrefix.length)) : Number.NaN
    if (Number.isSafeInteger(number) && number > last) last = number
  }
  return last
}

/**
 * The calls the local model makes for a prompt (see docs/tools.md, "The
 * local model's tool rule"): the `call NAME {…}` phrases of the last user
 * message, or of the tool results the prompt ends with; under a required
 * choice with no phrase, the first callable tool with `{}`.
 */
const callsFor = (
  prompt: Prompt.Prompt,
  tools: ReadonlyArray<Tool.Any>,
  choice: LanguageModel.ToolChoice<string>
): Array<LocalCall> => {
  const { names, required } = callable(tools, choice)
  if (names.length === 0) return []
  const last = prompt.content.at(-1)
  const sources =
    last?.role === "user"
      ? [textOf(last.content)]
      : last?.role === "tool"
        ? trailingResults(prompt).map((result) => resultText(result.result))
        : []
  const allowed = new Set(names)
  const found = sources.flatMap((text) => callsIn(text, allowed))
  const calls = found.length === 0 && required ? [{ name: names[0]!, params: {} }] : found
  const after = lastLocalId(prompt)
  return calls.map((call, index) => ({ id: `${localIdPrefix}${after + index + 1}`, ...call }))
}

/** The answer to the tool results the prompt ends with: what each said, or that it failed. */
const fromResults = (results: ReadonlyArray<ToolResult>): string =>
  replyPrefix +
  [
    ...results.map(
      (result) => `${result.name} ${result.isFailure ? "failed" : "answered"}: ${quote(resultText(result.result))}`
    ),
    footer
  ].join(" ")

const usageOf = (input: number, output: number): typeof Response.Usage.Encoded => ({
  inputTokens: { total: input, uncached: undefined, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: output, text: undefined, reasoning: undefined }
})

/**
 * The local model's reply to the provider options: tool calls, or text cut
 * to `maxTokens`; with a response format, a value of its schema as JSON
 * (SchemaInstance.ts), never cut.
 */
const respond = (options: LanguageModel.ProviderOptions, maxTokens: number, format: ResponseFormat | undefined) => {
  const { prompt } = options
  const { system, turns } = fromPrompt(prompt)
  // It reads the earlier calls and their results as well as the turns' text.
  const input =
    inputTokens(system, turns) +
    earlierCalls(prompt).reduce(
      (total, call) => total + countTokens(call.name) + countTokens(argumentsText(call.params)),
      0
    ) +
    earlierResults(prompt).reduce((total, result) => total + countTokens(resultText(result.result)), 0)
  const calls = callsFor(prompt, options.tools, options.toolChoice)
  if (calls.length > 0) {
    const output = calls.reduce(
      (total, call) => total + countTokens(call.name) + countTokens(argumentsText(call.params)),
      0
    )
    return { text: "", calls, usage: usageOf(input, output), reason: "tool-calls" as const }
  }
  if (format !== undefined) {
    const message = turns.findLast((turn) => turn.role === "user")?.content ?? ""
    const text = JSON.stringify(instanceOf(format.schema, message)) ?? "null"
    return { text, calls, usage: usageOf(input, countTokens(text)), reason: "stop" as const }
  }
  const results = trailingResults(prompt)
  const full = results.length > 0 ? fromResults(results) : reply(system, turns)
  const { cut, text, tokens } = withinTokens(full, countTokens(full), maxTokens)
  return { text, calls, usage: usageOf(input, tokens), reason: cut ? ("length" as const) : ("stop" as const) }
}

const callPart = (call: LocalCall): Response.ToolCallPartEncoded => ({
  type: "tool-call",
  id: call.id,
  name: call.name,
  params: call.params,
  providerExecuted: false
})

/** The `local` model as an effect/ai `LanguageModel`, like the remote providers. */
export const make: Effect.Effect<LanguageModel.LanguageModel> = Language.make({
  generateText: (options) =>
    Effect.gen(function* () {
      const { calls, reason, text, usage } = respond(
        options,
        yield* Language.MaxOutputTokens,
        yield* Language.ResponseFormat
      )
      const parts: Array<Response.PartEncoded> = [
        { type: "response-metadata", modelId },
        ...(calls.length > 0 ? calls.map(callPart) : [{ type: "text" as const, text }]),
        { type: "finish", reason, usage }
      ]
      return parts
    }),
  streamText: (options) =>
    Stream.unwrap(
      Effect.gen(function* () {
        const { calls, reason, text, usage } = respond(
          options,
          yield* Language.MaxOutputTokens,
          yield* Language.ResponseFormat
        )
        const body: Array<Response.StreamPartEncoded> =
          calls.length > 0
            ? calls.map(callPart)
            : [
                { type: "text-start", id: "0" },
                ...words(text).map((delta) => ({ type: "text-delta" as const, id: "0", delta })),
                { type: "text-end", id: "0" }
              ]
        return Stream.fromIterable<Response.StreamPartEncoded>([
          { type: "response-metadata", modelId },
          ...body,
          { type: "finish", reason, usage }
        ])
      })
    )
})
