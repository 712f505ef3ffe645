import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import * as AiError from "effect/ai/AiError"
import type * as LanguageModel from "effect/ai/LanguageModel"
import * as Language from "./Language.ts"
import type * as Prompt from "effect/ai/Prompt"
import type * as Response from "effect/ai/Response"
import type * as HttpClient from "effect/http/HttpClient"
import * as ProviderHttp from "./ProviderHttp.ts"

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

const moduleName = "OpenAiLanguageModel"

const textOf = (parts: ReadonlyArray<{ readonly type: string; readonly text?: string | undefined }>) =>
  parts.flatMap((part) => (part.type === "text" && part.text !== undefined ? [part.text] : [])).join("")

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
        return [{ role: message.role, content: textOf(message.content) }]
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

const decode = <S extends Schema.Top & { readonly DecodingServices: never }>(
  schema: S,
  method: string,
  what: string
) => {
  const decodeUnknown = Schema.decodeUnknownEffect(schema)
  return (input: unknown): Effect.Effect<S["Type"], AiError.AiError> =>
    decodeUnknown(input).pipe(
      Effect.mapError(() => ProviderHttp.invalidResponse(moduleName, method, `Unexpected ${what}`))
    )
}

/** The provider for `openai/<model>`. */
export const make = (options: OpenAiOptions): Effect.Effect<LanguageModel.LanguageModel> => {
  const url = `${options.baseUrl.replace(/\/+$/, "")}/chat/completions`
  const headers: Record<string, string> = Option.match(options.apiKey, {
    onNone: () => ({}),
    onSome: (key) => ({ authorization: `Bearer ${Redacted.value(key)}` })
  })
  const post = (method: string, body: Record<string, unknown>) =>
    ProviderHttp.postJson({ client: options.client, module: moduleName, method, url, headers, body })
  const decodeCompletion = decode(ChatCompletion, "generateText", "chat completion")
  const decodeChunk = decode(ChatCompletionChunk, "streamText", "chat completion chunk")
  const ceiling = ceilingField(options.baseUrl)

  return Language.make({
    generateText: Effect.fnUntraced(function* (providerOptions) {
      const response = yield* post("generateText", {
        model: options.model,
        messages: toMessages(providerOptions.prompt),
        [ceiling]: yield* Language.MaxOutputTokens
      })
      const completion = yield* ProviderHttp.readJson(
        moduleName,
        "generateText"
      )(response).pipe(Effect.flatMap(decodeCompletion))
      const choice = completion.choices[0]
      const parts: Array<Response.PartEncoded> = [metadata(completion)]
      const text = choice?.message.content ?? choice?.message.refusal ?? ""
      if (text !== "") parts.push({ type: "text", text })
      parts.push({
        type: "finish",
        reason: finishReason(choice?.finish_reason),
        usage: toUsage(completion.usage),
        ...Language.finishMetadata(choice?.finish_reason)
      })
      return parts
    }),

    streamText: (providerOptions) =>
      Language.MaxOutputTokens.use((maxOutputTokens) =>
        post("streamText", {
          model: options.model,
          messages: toMessages(providerOptions.prompt),
          [ceiling]: maxOutputTokens,
          stream: true,
          // Without it the stream carries no token counts.
          stream_options: { include_usage: true }
        })
      ).pipe(
        Effect.map((response) =>
          Stream.suspend(() => {
            let started = false
            let done = false
            let reason: string | null | undefined
            let usage: typeof Usage.Type | null | undefined

            const onEvent = (data: string): Effect.Effect<Array<Response.StreamPartEncoded>, AiError.AiError> => {
              if (data === "[DONE]") {
                done = true
                return Effect.succeed([])
              }
              return ProviderHttp.parseJson(moduleName, "streamText", data).pipe(
                Effect.flatMap((json) => {
                  // An error after the 200 arrives as a `data:` payload of its own.
                  if (json !== null && typeof json === "object" && "error" in json) {
                    return Effect.fail(
                      AiError.make({
                        module: moduleName,
                        method: "streamText",
                        reason: new AiError.InternalProviderError({
                          description: ProviderHttp.providerMessage(data) ?? "The stream reported an error"
                        })
                      })
                    )
                  }
                  return decodeChunk(json)
                }),
                Effect.map((chunk) => {
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
                })
              )
            }

            const end = Stream.suspend((): Stream.Stream<Response.StreamPartEncoded, AiError.AiError> => {
              // Some compatible servers close after the finish reason without [DONE].
              if (!done && reason === undefined) {
                return Stream.fail(ProviderHttp.streamCut(moduleName, "streamText", url))
              }
              return Stream.fromIterable<Response.StreamPartEncoded>([
                ...(started ? [{ type: "text-end" as const, id: "0" }] : []),
                {
                  type: "finish",
                  reason: finishReason(reason),
                  usage: toUsage(usage),
                  ...Language.finishMetadata(reason)
                }
              ])
            })

            return ProviderHttp.sseEvents(moduleName, "streamText", response).pipe(
              Stream.takeUntil((event) => event.data === "[DONE]"),
              Stream.mapEffect((event) => onEvent(event.data)),
              Stream.flattenIterable,
              Stream.concat(end)
            )
          })
        ),
        Stream.unwrap
      )
  })
}
