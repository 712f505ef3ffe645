import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import * as AiError from "effect/ai/AiError"
import type * as LanguageModel from "effect/ai/LanguageModel"
import type * as Prompt from "effect/ai/Prompt"
import type * as Response from "effect/ai/Response"
import type * as Tool from "effect/ai/Tool"
import type * as HttpClient from "effect/http/HttpClient"
import * as Language from "./Language.ts"
import type { ResponseFormat } from "./Models.ts"
import * as ProviderHttp from "./ProviderHttp.ts"

/**
 * What the provider adapters (OpenAi.ts, Anthropic.ts) share around their
 * wire formats: the POST, the reply decoded and turned into effect/ai parts,
 * the stream's events parsed and decoded, an error the provider reports
 * after the 200 failed, and a stream cut before its end failed too. Each
 * adapter says how to build its body and how to read its reply and events.
 */

type Decodable = Schema.Top & { readonly DecodingServices: never }

/** The text parts of a prompt message, joined. */
export const textOf = (parts: ReadonlyArray<{ readonly type: string; readonly text?: string | undefined }>) =>
  parts.flatMap((part) => (part.type === "text" && part.text !== undefined ? [part.text] : [])).join("")

/** The end of a reply: the provider's own finish reason and the usage. */
export interface Ending {
  readonly finishReason: string | null | undefined
  readonly usage: typeof Response.Usage.Encoded
}

/** A tool call as the model made it: its arguments parsed from JSON, or the text itself when it is not JSON. */
export interface ToolCall {
  readonly id: string
  readonly name: string
  readonly params: unknown
}

/** Arguments as a model sent them (JSON text), parsed; "" counts as no arguments. */
export const parseArguments = (text: string): unknown => {
  if (text.trim() === "") return {}
  try {
    return JSON.parse(text)
  } catch {
    return text
  }
}

/** A tool call as an effect/ai response part. */
export const toolCallPart = (call: ToolCall): Response.ToolCallPartEncoded => ({
  type: "tool-call",
  id: call.id,
  name: call.name,
  params: call.params,
  providerExecuted: false
})

/** What an adapter reads of a whole reply. */
export interface Reply extends Ending {
  readonly metadata: Response.ResponseMetadataPartEncoded
  readonly text: string
  readonly toolCalls: ReadonlyArray<ToolCall>
}

/** What a request's body is made of. */
export interface BodyInput {
  readonly prompt: Prompt.Prompt
  readonly maxOutputTokens: number
  /** Ask for a streamed reply. */
  readonly stream: boolean
  /** The tools offered (none: none are sent) and how the model may use them. */
  readonly tools: ReadonlyArray<Tool.Any>
  readonly toolChoice: LanguageModel.ToolChoice<any>
  /** The JSON reply asked for (Language.ResponseFormat); none: text. */
  readonly responseFormat: ResponseFormat | undefined
}

/** One streamed reply's reading, fed its decoded events in order. */
export interface StreamReader<Event> {
  readonly onEvent: (event: Event) => Array<Response.StreamPartEncoded>
  /** The stream's `marker` came. */
  readonly onMarker?: () => void
  /**
   * How the stream ended, whether it opened a text part and the tool calls
   * it made that `onEvent` has not yet given out; undefined: it was cut
   * before its end.
   */
  readonly end: () =>
    | (Ending & { readonly textStarted: boolean; readonly toolCalls?: ReadonlyArray<ToolCall> | undefined })
    | undefined
}

export interface Provider<ReplySchema extends Decodable, EventSchema extends Decodable> {
  /** The `module` of its AiErrors. */
  readonly module: string
  readonly client: HttpClient.HttpClient
  readonly url: string
  readonly headers: Record<string, string>
  readonly body: (input: BodyInput) => Record<string, unknown>
  /** effect's finish reason for the provider's. */
  readonly finishReason: (reason: string | null | undefined) => Response.FinishReason
  readonly reply: {
    readonly schema: ReplySchema
    /** What the reply is called in the error when it does not decode. */
    readonly name: string
    /** `input`: what the request's body was made of. */
    readonly read: (reply: ReplySchema["Type"], input: BodyInput) => Reply
  }
  readonly stream: {
    readonly schema: EventSchema
    readonly name: string
    /** A payload that reports an error after the 200. */
    readonly isError: (json: any) => boolean
    /** The provider's last event: nothing after it is read. */
    readonly isLast: (event: ProviderHttp.SseEvent) => boolean
    /** A `data:` payload that is no JSON event but a bare marker (OpenAI's `[DONE]`). */
    readonly marker?: string
    readonly reader: (input: BodyInput) => StreamReader<EventSchema["Type"]>
  }
}

const decoder = <S extends Decodable>(module: string, schema: S, method: string, what: string) => {
  const decodeUnknown = Schema.decodeUnknownEffect(schema)
  return (input: unknown): Effect.Effect<S["Type"], AiError.AiError> =>
    decodeUnknown(input).pipe(Effect.mapError(() => ProviderHttp.invalidResponse(module, method, `Unexpected ${what}`)))
}

/** A `LanguageModel` over a provider's HTTP API. */
export const make = <ReplySchema extends Decodable, EventSchema extends Decodable>(
  provider: Provider<ReplySchema, EventSchema>
): Effect.Effect<LanguageModel.LanguageModel> => {
  const { module, stream } = provider
  const post = (method: string, body: Record<string, unknown>) =>
    ProviderHttp.postJson({
      client: provider.client,
      module,
      method,
      url: provider.url,
      headers: provider.headers,
      body
    })
  const decodeReply = decoder(module, provider.reply.schema, "generateText", provider.reply.name)
  const decodeEvent = decoder(module, stream.schema, "streamText", stream.name)
  const finish = (ending: Ending) =>
    ({
      type: "finish",
      reason: provider.finishReason(ending.finishReason),
      usage: ending.usage,
      ...Language.finishMetadata(ending.finishReason)
    }) as const
  const streamError = (data: string) =>
    AiError.make({
      module,
      method: "streamText",
      reason: new AiError.InternalProviderError({
        description: ProviderHttp.providerMessage(data) ?? "The stream reported an error"
      })
    })

  return Language.make({
    generateText: Effect.fnUntraced(function* (options) {
      const input: BodyInput = {
        prompt: options.prompt,
        maxOutputTokens: yield* Language.MaxOutputTokens,
        stream: false,
        tools: options.tools,
        toolChoice: options.toolChoice,
        responseFormat: yield* Language.ResponseFormat
      }
      const response = yield* post("generateText", provider.body(input))
      const reply = provider.reply.read(
        yield* ProviderHttp.readJson(module, "generateText")(response).pipe(Effect.flatMap(decodeReply)),
        input
      )
      const parts: Array<Response.PartEncoded> = [reply.metadata]
      if (reply.text !== "") parts.push({ type: "text", text: reply.text })
      for (const call of reply.toolCalls) parts.push(toolCallPart(call))
      parts.push(finish(reply))
      return parts
    }),

    streamText: (options) =>
      Effect.gen(function* () {
        const input: BodyInput = {
          prompt: options.prompt,
          maxOutputTokens: yield* Language.MaxOutputTokens,
          stream: true,
          tools: options.tools,
          toolChoice: options.toolChoice,
          responseFormat: yield* Language.ResponseFormat
        }
        return { input, response: yield* post("streamText", provider.body(input)) }
      }).pipe(
        Effect.map(({ input, response }) =>
          Stream.suspend(() => {
            const reader = stream.reader(input)

            const onEvent = (data: string): Effect.Effect<Array<Response.StreamPartEncoded>, AiError.AiError> => {
              if (data === stream.marker) {
                reader.onMarker?.()
                return Effect.succeed([])
              }
              return ProviderHttp.parseJson(module, "streamText", data).pipe(
                Effect.flatMap((json) => (stream.isError(json) ? Effect.fail(streamError(data)) : decodeEvent(json))),
                Effect.map(reader.onEvent)
              )
            }

            const end = Stream.suspend((): Stream.Stream<Response.StreamPartEncoded, AiError.AiError> => {
              const ending = reader.end()
              if (ending === undefined) return Stream.fail(ProviderHttp.streamCut(module, "streamText", provider.url))
              return Stream.fromIterable<Response.StreamPartEncoded>([
                ...(ending.textStarted ? [{ type: "text-end" as const, id: "0" }] : []),
                ...(ending.toolCalls ?? []).map(toolCallPart),
                finish(ending)
              ])
            })

            return ProviderHttp.sseEvents(module, "streamText", response).pipe(
              Stream.takeUntil(stream.isLast),
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
