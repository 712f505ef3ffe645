import type * as Effect from "effect/Effect"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import type * as LanguageModel from "effect/ai/LanguageModel"
import type * as Prompt from "effect/ai/Prompt"
import type * as Response from "effect/ai/Response"
import type * as HttpClient from "effect/http/HttpClient"
import * as ProviderModel from "./ProviderModel.ts"

/**
 * An effect/ai `LanguageModel` over the Anthropic Messages API. Text in,
 * text out: no tools, no images.
 */

export interface AnthropicOptions {
  readonly client: HttpClient.HttpClient
  /** e.g. `https://api.anthropic.com`; `/v1/messages` is appended. */
  readonly baseUrl: string
  readonly apiKey: Redacted.Redacted<string>
  /** The model name without the `anthropic/` prefix. */
  readonly model: string
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
  const messages = prompt.content.flatMap((message) =>
    message.role === "user" || message.role === "assistant"
      ? [{ role: message.role, content: ProviderModel.textOf(message.content) }]
      : []
  )
  return {
    model,
    max_tokens: maxOutputTokens,
    ...(system === "" ? {} : { system }),
    messages
  }
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
  content: Schema.Array(Schema.Struct({ type: Schema.String, text: Schema.optional(Schema.String) })),
  stop_reason: Schema.optional(Schema.NullOr(Schema.String)),
  usage: Schema.optional(Usage)
})

const StreamEvent = Schema.Struct({
  type: Schema.String,
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
    body: (prompt, maxOutputTokens, stream) => {
      const body = toBody(options.model, prompt, maxOutputTokens)
      return stream ? { ...body, stream: true } : body
    },
    finishReason,
    reply: {
      schema: Message,
      name: "message",
      read: (message) => ({
        metadata: { type: "response-metadata", id: message.id, modelId: message.model },
        text: ProviderModel.textOf(message.content),
        finishReason: message.stop_reason,
        usage: toUsage(message.usage ?? {})
      })
    },
    stream: {
      schema: StreamEvent,
      name: "stream event",
      // Overload and other failures after the 200 arrive as an `error` event.
      isError: (json) => json?.type === "error",
      isLast: (event) => event.event === "message_stop",
      reader: () => {
        let started = false
        let stopped = false
        let reason: string | null | undefined
        let usage: Usage = {}
        return {
          onEvent: (event) => {
            switch (event.type) {
              case "message_start": {
                usage = { ...usage, ...event.message?.usage }
                return [{ type: "response-metadata", id: event.message?.id, modelId: event.message?.model }]
              }
              case "content_block_delta": {
                if (event.delta?.type !== "text_delta" || !event.delta.text) return []
                const parts: Array<Response.StreamPartEncoded> = []
                if (!started) {
                  started = true
                  parts.push({ type: "text-start", id: "0" })
                }
                parts.push({ type: "text-delta", id: "0", delta: event.delta.text })
                return parts
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
                return []
              }
              default:
                return []
            }
          },
          end: () => (stopped ? { textStarted: started, finishReason: reason, usage: toUsage(usage) } : undefined)
        }
      }
    }
  })
