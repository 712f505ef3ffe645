import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import * as AiError from "effect/ai/AiError"
import type * as LanguageModel from "effect/ai/LanguageModel"
import type * as Prompt from "effect/ai/Prompt"
import type * as Response from "effect/ai/Response"
import type * as HttpClient from "effect/http/HttpClient"
import * as Language from "./Language.ts"
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

/** What an adapter reads of a whole reply. */
export interface Reply extends Ending {
  readonly metadata: Response.ResponseMetadataPartEncoded
  readonly text: string
}

/** One streamed reply's reading, fed its decoded events in order. */
export interface StreamReader<Event> {
  readonly onEvent: (event: Event) => Array<Response.StreamPartEncoded>
  /** The stream's `marker` came. */
  readonly onMarker?: () => void
  /** How the stream ended, and whether it opened a text part; undefined: it was cut before its end. */
  readonly end: () => (Ending & { readonly textStarted: boolean }) | undefined
}

export interface Provider<ReplySchema extends Decodable, EventSchema extends Decodable> {
  /** The `module` of its AiErrors. */
  readonly module: string
  readonly client: HttpClient.HttpClient
  readonly url: string
  readonly headers: Record<string, string>
  /** The request's body; `stream` asks for a streamed reply. */
  readonly body: (prompt: Prompt.Prompt, maxOutputTokens: number, stream: boolean) => Record<string, unknown>
  /** effect's finish reason for the provider's. */
  readonly finishReason: (reason: string | null | undefined) => Response.FinishReason
  readonly reply: {
    readonly schema: ReplySchema
    /** What the reply is called in the error when it does not decode. */
    readonly name: string
    readonly read: (reply: ReplySchema["Type"]) => Reply
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
    readonly reader: () => StreamReader<EventSchema["Type"]>
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
      const response = yield* post(
        "generateText",
        provider.body(options.prompt, yield* Language.MaxOutputTokens, false)
      )
      const reply = provider.reply.read(
        yield* ProviderHttp.readJson(module, "generateText")(response).pipe(Effect.flatMap(decodeReply))
      )
      const parts: Array<Response.PartEncoded> = [reply.metadata]
      if (reply.text !== "") parts.push({ type: "text", text: reply.text })
      parts.push(finish(reply))
      return parts
    }),

    streamText: (options) =>
      Language.MaxOutputTokens.use((maxOutputTokens) =>
        post("streamText", provider.body(options.prompt, maxOutputTokens, true))
      ).pipe(
        Effect.map((response) =>
          Stream.suspend(() => {
            const reader = stream.reader()

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
