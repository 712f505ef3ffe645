import type * as Effect from "effect/Effect"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import type * as LanguageModel from "effect/ai/LanguageModel"
import type * as Prompt from "effect/ai/Prompt"
import type * as Response from "effect/ai/Response"
import * as Tool from "effect/ai/Tool"
import type * as HttpClient from "effect/http/HttpClient"
import * as ProviderModel from "./ProviderModel.ts"

/**
 * An effect/ai `LanguageModel` over the Anthropic Messages API: text in,
 * text and tool calls out; no images.
 */

export interface AnthropicOptions {
  readonly client: HttpClient.HttpClient
  /** e.g. `https://api.anthropic.com`; `/v1/messages` is appended. */
  readonly baseUrl: string
  readonly apiKey: Redacted.Redacted<string>
  /** The model name without the `anthropic/` prefix. */
  readonly model: string
}

type ContentBlock =
  | { readonly type: "text"; readonly text: string }
  | { readonly type: "tool_use"; readonly id: string; readonly name: string; readonly input: object }
  | {
      readonly type: "tool_result"
      readonly tool_use_id: string
      readonly content: string
      readonly is_error?: true
    }

interface Turn {
  readonly role: "user" | "assistant"
  readonly content: string | Array<ContentBlock>
}

const isObject = (value: unknown): value is object =>
  typeof value === "object" && value !== null && !Array.isArray(value)

// Anthropic takes a call's input only as a JSON object: arguments a model
// once sent as something else (kept as their raw text) go back as none.
const toolInput = (params: unknown): object => {
  if (isObject(params)) return params
  if (typeof params === "string") {
    try {
      const parsed: unknown = JSON.parse(params)
      if (isObject(parsed)) return parsed
    } catch {
      // Not JSON: no input.
    }
  }
  return {}
}

const resultText = (result: unknown): string =>
  typeof result === "string" ? result : result === undefined ? "" : JSON.stringify(result)

const assistantTurn = (message: Prompt.AssistantMessage): Turn => {
  const text = ProviderModel.textOf(message.content)
  const calls = message.content.flatMap(
    (part): Array<ContentBlock> =>
      part.type === "tool-call"
        ? [{ type: "tool_use", id: part.id, name: part.name, input: toolInput(part.params) }]
        : []
  )
  // A turn without calls keeps its content a plain string.
  if (calls.length === 0) return { role: "assistant", content: text }
  return { role: "assistant", content: [...(text === "" ? [] : [{ type: "text" as const, text }]), ...calls] }
}

const toolResults = (message: Prompt.ToolMessage): Array<ContentBlock> =>
  message.content.flatMap(
    (part): Array<ContentBlock> =>
      part.type === "tool-result"
        ? [
            {
              type: "tool_result",
              tool_use_id: part.id,
              content: resultText(part.result),
              ...(part.isFailure ? { is_error: true as const } : {})
            }
          ]
        : []
  )

/**
 * The turns of a prompt. Anthropic wants every result of a turn's calls in
 * the one user message that follows it, so consecutive tool messages make
 * one user message of `tool_result` blocks.
 */
const toTurns = (prompt: Prompt.Prompt): Array<Turn> => {
  const turns: Array<Turn> = []
  let results: Array<ContentBlock> | undefined
  for (const message of prompt.content) {
    if (message.role === "tool") {
      if (results === undefined) {
        results = []
        turns.push({ role: "user", content: results })
      }
      results.push(...toolResults(message))
      continue
    }
    if (message.role === "system") continue
    results = undefined
    turns.push(
      message.role === "assistant"
        ? assistantTurn(message)
        : { role: "user", content: ProviderModel.textOf(message.content) }
    )
  }
  return turns
}

/**
 * The Messages API body: system prompt as the top-level `system`, the turns
 * as `messages`, and the ceiling on the reply the API requires.
 */
export const toBody = (model: string, prompt: Prompt.Prompt, maxOutputTokens: number) => {
  const system = prompt.content
    .flatMap((message) => (message.role === "system" ? [message.content] : []))
    .filter((content) => content !== "")
    .join("\n\n")
  return {
    model,
    max_tokens: maxOutputTokens,
    ...(system === "" ? {} : { system }),
    messages: toTurns(prompt)
  }
}

/**
 * `tools` and `tool_choice` for the tools offered; none offered: neither.
 * Anthropic has no choice among some tools, so `oneOf` offers only those.
 */
export const toolFields = (
  tools: ReadonlyArray<Tool.Any>,
  choice: LanguageModel.ToolChoice<any>
): Record<string, unknown> => {
  let offered = tools
  let toolChoice: Record<string, unknown>
  if (choice === "auto") toolChoice = { type: "auto" }
  else if (choice === "none") toolChoice = { type: "none" }
  else if (choice === "required") toolChoice = { type: "any" }
  else if ("tool" in choice) toolChoice = { type: "tool", name: choice.tool }
  else {
    const names = new Set<string>(choice.oneOf)
    offered = tools.filter((tool) => names.has(tool.name))
    toolChoice = { type: choice.mode === "required" ? "any" : "auto" }
  }
  if (offered.length === 0) return {}
  return {
    tools: offered.map((tool) => {
      const description = Tool.getDescription(tool)
      return {
        name: tool.name,
        ...(description === undefined || description === "" ? {} : { description }),
        input_schema: Tool.getJsonSchema(tool)
      }
    }),
    tool_choice: toolChoice
  }
}

/**
 * A response format is asked for as a tool the model is made to call (the
 * "answer tool", named after the format): its input is the answer, which the
 * reply carries as its text, never as a tool call. Anthropic takes only an
 * object as a tool's input, so a schema of anything else is wrapped as the
 * `answer` property of one, and unwrapped from the call. When the tool loop
 * also offers tools, they are sent beside it and the model must call one of
 * them (`tool_choice: any`): calling the answer tool is answering. An offered
 * tool already named like the format keeps its name, and the format is then
 * asked for in no other way than the validation of the reply.
 */
type Format = ProviderModel.BodyInput["responseFormat"]

const answerDescription = "Respond with the answer as this tool's input"

/** The answer tool's name for a request, if it has one. */
const answerToolOf = (input: { readonly tools: ReadonlyArray<Tool.Any>; readonly responseFormat: Format }) => {
  const format = input.responseFormat
  if (format === undefined || input.tools.some((tool) => tool.name === format.name)) return undefined
  return { name: format.name, wrapped: format.schema.type !== "object", schema: format.schema }
}

type AnswerTool = NonNullable<ReturnType<typeof answerToolOf>>

const answerSpec = (answer: AnswerTool) => ({
  name: answer.name,
  description: answerDescription,
  input_schema: answer.wrapped
    ? { type: "object", properties: { answer: answer.schema }, required: ["answer"], additionalProperties: false }
    : answer.schema
})

/** The answer the model gave as the answer tool's input, as JSON text. */
const answerText = (answer: AnswerTool, input: unknown): string => {
  const value = answer.wrapped ? (isObject(input) ? (input as { answer?: unknown }).answer : undefined) : input
  return JSON.stringify(value ?? null)
}

/** `tools` and `tool_choice` with the answer tool of a response format, if there is one (see above). */
export const requestToolFields = (
  tools: ReadonlyArray<Tool.Any>,
  choice: LanguageModel.ToolChoice<any>,
  responseFormat: Format
): Record<string, unknown> => {
  const answer = answerToolOf({ tools, responseFormat })
  const fields = toolFields(tools, choice)
  if (answer === undefined) return fields
  const offered = fields.tools as ReadonlyArray<unknown> | undefined
  if (offered === undefined || choice === "none") {
    return { tools: [answerSpec(answer)], tool_choice: { type: "tool", name: answer.name } }
  }
  // A tool the caller forces stays forced; otherwise some tool must be called, the answer tool being one.
  const forced = typeof choice === "object" && "tool" in choice
  return { tools: [...offered, answerSpec(answer)], tool_choice: forced ? fields.tool_choice : { type: "any" } }
}

const finishReason = (reason: string | null | undefined): Response.FinishReason => {
  switch (reason) {
    case "end_turn":
    case "stop_sequence":
      return "stop"
    case "max_tokens":
      return "length"
    case "tool_use":
      return "tool-calls"
    case "refusal":
      return "content-filter"
    case "pause_turn":
      return "pause"
    case null:
    case undefined:
      return "unknown"
    default:
      return "other"
  }
}

const OptionalCount = Schema.optional(Schema.NullOr(Schema.Number))

const Usage = Schema.Struct({
  input_tokens: OptionalCount,
  output_tokens: OptionalCount,
  cache_creation_input_tokens: OptionalCount,
  cache_read_input_tokens: OptionalCount
})
type Usage = typeof Usage.Type

const Message = Schema.Struct({
  id: Schema.optional(Schema.String),
  model: Schema.optional(Schema.String),
  content: Schema.Array(
    Schema.Struct({
      type: Schema.String,
      text: Schema.optional(Schema.String),
      id: Schema.optional(Schema.String),
      name: Schema.optional(Schema.String),
      input: Schema.optional(Schema.Unknown)
    })
  ),
  stop_reason: Schema.optional(Schema.NullOr(Schema.String)),
  usage: Schema.optional(Usage)
})

const StreamEvent = Schema.Struct({
  type: Schema.String,
  index: Schema.optional(Schema.Number),
  content_block: Schema.optional(
    Schema.Struct({
      type: Schema.String,
      id: Schema.optional(Schema.String),
      name: Schema.optional(Schema.String),
      input: Schema.optional(Schema.Unknown)
    })
  ),
  message: Schema.optional(
    Schema.Struct({
      id: Schema.optional(Schema.String),
      model: Schema.optional(Schema.String),
      usage: Schema.optional(Usage)
    })
  ),
  delta: Schema.optional(
    Schema.Struct({
      type: Schema.optional(Schema.String),
      text: Schema.optional(Schema.String),
      partial_json: Schema.optional(Schema.String),
      stop_reason: Schema.optional(Schema.NullOr(Schema.String))
    })
  ),
  usage: Schema.optional(Usage)
})

// Anthropic counts cached prompt tokens apart from `input_tokens`; the total is what was read.
const toUsage = (usage: Usage): typeof Response.Usage.Encoded => {
  const uncached = usage.input_tokens ?? 0
  const cacheWrite = usage.cache_creation_input_tokens ?? 0
  const cacheRead = usage.cache_read_input_tokens ?? 0
  return {
    inputTokens: { total: Math.trunc(uncached + cacheWrite + cacheRead), uncached, cacheRead, cacheWrite },
    outputTokens: { total: Math.trunc(usage.output_tokens ?? 0), text: undefined, reasoning: undefined }
  }
}

/** The provider for `anthropic/<model>`. */
export const make = (options: AnthropicOptions): Effect.Effect<LanguageModel.LanguageModel> =>
  ProviderModel.make({
    module: "AnthropicLanguageModel",
    client: options.client,
    url: `${options.baseUrl.replace(/\/+$/, "")}/v1/messages`,
    headers: {
      "x-api-key": Redacted.value(options.apiKey),
      "anthropic-version": "2023-06-01"
    },
    body: ({ maxOutputTokens, prompt, responseFormat, stream, toolChoice, tools }) => {
      const body = {
        ...toBody(options.model, prompt, maxOutputTokens),
        ...requestToolFields(tools, toolChoice, responseFormat)
      }
      return stream ? { ...body, stream: true } : body
    },
    finishReason,
    reply: {
      schema: Message,
      name: "message",
      read: (message, input) => {
        const answer = answerToolOf(input)
        const answered = message.content.find((block) => block.type === "tool_use" && block.name === answer?.name)
        return {
          metadata: { type: "response-metadata", id: message.id, modelId: message.model },
          // The answer tool's input is the whole answer: text beside it is left out.
          text:
            answer !== undefined && answered !== undefined
              ? answerText(answer, answered.input ?? {})
              : ProviderModel.textOf(message.content),
          toolCalls: message.content.flatMap((block) =>
            block.type === "tool_use" && block.id !== undefined && block.name !== undefined && block !== answered
              ? [{ id: block.id, name: block.name, params: block.input ?? {} }]
              : []
          ),
          finishReason: message.stop_reason,
          usage: toUsage(message.usage ?? {})
        }
      }
    },
    stream: {
      schema: StreamEvent,
      name: "stream event",
      // Overload and other failures after the 200 arrive as an `error` event.
      isError: (json) => json?.type === "error",
      isLast: (event) => event.event === "message_stop",
      reader: (input) => {
        let started = false
        let stopped = false
        let reason: string | null | undefined
        let usage: Usage = {}
        // Tool-use blocks still open, by their index: text and tool blocks may interleave.
        const open = new Map<number, { id: string; name: string; input: unknown; json: string }>()
        const answer = answerToolOf(input)
        // The answer tool's blocks still open, by index: their input is the reply's text.
        const answering = new Map<number, { input: unknown; json: string }>()
        const textDelta = (delta: string): Array<Response.StreamPartEncoded> => {
          const parts: Array<Response.StreamPartEncoded> = []
          if (!started) {
            started = true
            parts.push({ type: "text-start", id: "0" })
          }
          parts.push({ type: "text-delta", id: "0", delta })
          return parts
        }
        // An unwrapped answer streams as it comes; a wrapped one (or one sent whole at the start) when it ends.
        const closeAnswer = (index: number): Array<Response.StreamPartEncoded> => {
          const block = answering.get(index)
          if (block === undefined || answer === undefined) return []
          answering.delete(index)
          if (!answer.wrapped && block.json !== "") return []
          const value = block.json === "" ? (block.input ?? {}) : ProviderModel.parseArguments(block.json)
          return textDelta(answerText(answer, value))
        }
        const close = (index: number): ProviderModel.ToolCall | undefined => {
          const block = open.get(index)
          if (block === undefined) return undefined
          open.delete(index)
          // The start's `input` is `{}`; the input comes in the deltas, unless there were none.
          const params =
            block.json === "" && block.input !== undefined ? block.input : ProviderModel.parseArguments(block.json)
          return { id: block.id, name: block.name, params }
        }
        return {
          onEvent: (event) => {
            switch (event.type) {
              case "message_start": {
                usage = { ...usage, ...event.message?.usage }
                return [{ type: "response-metadata", id: event.message?.id, modelId: event.message?.model }]
              }
              case "content_block_start": {
                const block = event.content_block
                if (block?.type !== "tool_use" || event.index === undefined) return []
                if (answer !== undefined && block.name === answer.name) {
                  answering.set(event.index, { input: block.input, json: "" })
                  return []
                }
                const id = block.id ?? `toolu_${event.index}`
                const name = block.name ?? ""
                open.set(event.index, { id, name, input: block.input, json: "" })
                return [{ type: "tool-params-start", id, name, providerExecuted: false }]
              }
              case "content_block_delta": {
                if (event.delta?.type === "input_json_delta") {
                  const piece = event.delta.partial_json ?? ""
                  const answerBlock = event.index === undefined ? undefined : answering.get(event.index)
                  if (answerBlock !== undefined) {
                    answerBlock.json += piece
                    return piece === "" || answer?.wrapped ? [] : textDelta(piece)
                  }
                  const block = event.index === undefined ? undefined : open.get(event.index)
                  if (block === undefined || piece === "") return []
                  block.json += piece
                  return [{ type: "tool-params-delta", id: block.id, delta: piece }]
                }
                if (event.delta?.type !== "text_delta" || !event.delta.text) return []
                return textDelta(event.delta.text)
              }
              case "content_block_stop": {
                if (event.index !== undefined && answering.has(event.index)) return closeAnswer(event.index)
                const call = event.index === undefined ? undefined : close(event.index)
                if (call === undefined) return []
                return [{ type: "tool-params-end", id: call.id }, ProviderModel.toolCallPart(call)]
              }
              case "message_delta": {
                // Counts here are cumulative and override those of message_start.
                reason = event.delta?.stop_reason ?? reason
                for (const [key, value] of Object.entries(event.usage ?? {})) {
                  if (typeof value === "number") usage = { ...usage, [key]: value }
                }
                return []
              }
              case "message_stop": {
                stopped = true
                // An answer block the stream never closed is the answer all the same.
                return [...answering.keys()].flatMap(closeAnswer)
              }
              default:
                return []
            }
          },
          end: () => {
            if (!stopped) return undefined
            // A tool block the stream never closed still counts once the message is complete.
            const toolCalls = [...open.keys()].flatMap((index) => {
              const call = close(index)
              return call === undefined ? [] : [call]
            })
            return { textStarted: started, finishReason: reason, usage: toUsage(usage), toolCalls }
          }
        }
      }
    }
  })
