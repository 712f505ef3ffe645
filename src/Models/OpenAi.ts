import type * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import type * as LanguageModel from "effect/ai/LanguageModel"
import type * as Prompt from "effect/ai/Prompt"
import type * as Response from "effect/ai/Response"
import type * as HttpClient from "effect/http/HttpClient"
import * as ProviderModel from "./ProviderModel.ts"

/**
 * An effect/ai `LanguageModel` over the OpenAI Chat Completions API, which
 * OpenAI-compatible servers (Ollama, vLLM, LM Studio, llama.cpp) speak too.
 * Text in, text out: no tools, no images.
 */

export interface OpenAiOptions {
  readonly client: HttpClient.HttpClient
  /** e.g. `https://api.openai.com/v1` or `http://localhost:11434/v1`. */
  readonly baseUrl: string
  /** Sent as a bearer token; local servers take requests without one. */
  readonly apiKey: Option.Option<Redacted.Redacted<string>>
  /** The model name without the `openai/` prefix. */
  readonly model: string
}

/**
 * The name of the reply's ceiling: OpenAI's own API takes
 * `max_completion_tokens` (its reasoning models refuse `max_tokens`, which it
 * deprecated); OpenAI-compatible servers (Ollama, vLLM, llama.cpp) know `max_tokens`.
 */
export const ceilingField = (baseUrl: string): "max_tokens" | "max_completion_tokens" => {
  try {
    return new URL(baseUrl).hostname === "api.openai.com" ? "max_completion_tokens" : "max_tokens"
  } catch {
    return "max_tokens"
  }
}

/** Chat Completions messages, the system prompt first as a `system` message. */
export const toMessages = (prompt: Prompt.Prompt): Array<{ readonly role: string; readonly content: string }> =>
  prompt.content.flatMap((message) => {
    switch (message.role) {
      case "system":
        return [{ role: "system", content: message.content }]
      case "user":
      case "assistant":
        return [{ role: message.role, content: ProviderModel.textOf(message.content) }]
      case "tool":
        // No tools are offered, so no tool results are ever sent back.
        return []
    }
  })

const finishReason = (reason: string | null | undefined): Response.FinishReason => {
  switch (reason) {
    case "stop":
      return "stop"
    case "length":
      return "length"
    case "content_filter":
      return "content-filter"
    case "tool_calls":
    case "function_call":
      return "tool-calls"
    case null:
    case undefined:
      return "unknown"
    default:
      return "other"
  }
}

const Usage = Schema.Struct({
  prompt_tokens: Schema.Number,
  completion_tokens: Schema.Number,
  prompt_tokens_details: Schema.optional(
    Schema.NullOr(
      Schema.Struct({
        cached_tokens: Schema.optional(Schema.NullOr(Schema.Number))
      })
    )
  )
})

const ChatCompletion = Schema.Struct({
  id: Schema.optional(Schema.String),
  model: Schema.optional(Schema.String),
  created: Schema.optional(Schema.Number),
  choices: Schema.Array(
    Schema.Struct({
      message: Schema.Struct({
        content: Schema.optional(Schema.NullOr(Schema.String)),
        refusal: Schema.optional(Schema.NullOr(Schema.String))
      }),
      finish_reason: Schema.optional(Schema.NullOr(Schema.String))
    })
  ),
  usage: Schema.optional(Schema.NullOr(Usage))
})

const ChatCompletionChunk = Schema.Struct({
  id: Schema.optional(Schema.String),
  model: Schema.optional(Schema.String),
  created: Schema.optional(Schema.Number),
  choices: Schema.optional(
    Schema.NullOr(
      Schema.Array(
        Schema.Struct({
          delta: Schema.optional(
            Schema.NullOr(
              Schema.Struct({
                content: Schema.optional(Schema.NullOr(Schema.String)),
                refusal: Schema.optional(Schema.NullOr(Schema.String))
              })
            )
          ),
          finish_reason: Schema.optional(Schema.NullOr(Schema.String))
        })
      )
    )
  ),
  usage: Schema.optional(Schema.NullOr(Usage))
})

const toUsage = (usage: typeof Usage.Type | null | undefined): typeof Response.Usage.Encoded => ({
  inputTokens: {
    total: usage ? Math.trunc(usage.prompt_tokens) : undefined,
    cacheRead: usage?.prompt_tokens_details?.cached_tokens ?? undefined,
    uncached: undefined,
    cacheWrite: undefined
  },
  outputTokens: {
    total: usage ? Math.trunc(usage.completion_tokens) : undefined,
    text: undefined,
    reasoning: undefined
  }
})

const metadata = (chunk: {
  readonly id?: string | undefined
  readonly model?: string | undefined
  readonly created?: number | undefined
}): Response.ResponseMetadataPartEncoded => ({
  type: "response-metadata",
  id: chunk.id,
  modelId: chunk.model,
  timestamp: chunk.created === undefined ? undefined : new Date(chunk.created * 1000).toISOString()
})

/** The provider for `openai/<model>`. */
export const make = (options: OpenAiOptions): Effect.Effect<LanguageModel.LanguageModel> => {
  const ceiling = ceilingField(options.baseUrl)
  return ProviderModel.make({
    module: "OpenAiLanguageModel",
    client: options.client,
    url: `${options.baseUrl.replace(/\/+$/, "")}/chat/completions`,
    headers: Option.match(options.apiKey, {
      onNone: (): Record<string, string> => ({}),
      onSome: (key) => ({ authorization: `Bearer ${Redacted.value(key)}` })
    }),
    body: (prompt, maxOutputTokens, stream) => ({
      model: options.model,
      messages: toMessages(prompt),
      [ceiling]: maxOutputTokens,
      // Without `stream_options` the stream carries no token counts.
      ...(stream ? { stream: true, stream_options: { include_usage: true } } : {})
    }),
    finishReason,
    reply: {
      schema: ChatCompletion,
      name: "chat completion",
      read: (completion) => {
        const choice = completion.choices[0]
        return {
          metadata: metadata(completion),
          text: choice?.message.content ?? choice?.message.refusal ?? "",
          finishReason: choice?.finish_reason,
          usage: toUsage(completion.usage)
        }
      }
    },
    stream: {
      schema: ChatCompletionChunk,
      name: "chat completion chunk",
      // An error after the 200 arrives as a `data:` payload of its own.
      isError: (json) => json !== null && typeof json === "object" && "error" in json,
      isLast: (event) => event.data === "[DONE]",
      marker: "[DONE]",
      reader: () => {
        let started = false
        let done = false
        let reason: string | null | undefined
        let usage: typeof Usage.Type | null | undefined
        return {
          onEvent: (chunk) => {
            const parts: Array<Response.StreamPartEncoded> = []
            if (!started) {
              started = true
              parts.push(metadata(chunk), { type: "text-start", id: "0" })
            }
            for (const choice of chunk.choices ?? []) {
              const delta = choice.delta?.content ?? choice.delta?.refusal
              if (delta) parts.push({ type: "text-delta", id: "0", delta })
              if (choice.finish_reason) reason = choice.finish_reason
            }
            if (chunk.usage) usage = chunk.usage
            return parts
          },
          onMarker: () => {
            done = true
          },
          // Some compatible servers close after the finish reason without [DONE].
          end: () =>
            !done && reason === undefined
              ? undefined
              : { textStarted: started, finishReason: reason, usage: toUsage(usage) }
        }
      }
    }
  })
}
