import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import * as AiError from "effect/ai/AiError"
import { defaultIdGenerator, IdGenerator } from "effect/ai/IdGenerator"
import * as LanguageModel from "effect/ai/LanguageModel"
import * as Prompt from "effect/ai/Prompt"
import * as Response from "effect/ai/Response"
import * as Toolkit from "effect/ai/Toolkit"

type Params = Parameters<typeof LanguageModel.make>[0]

/**
 * The ceiling on a reply's tokens that a provider is sent (`max_tokens`), set
 * for each call by Models from the tenant's plan: effect's provider options
 * have no field for it. The default only serves callers outside Models.
 */
export const MaxOutputTokens = Context.Reference<number>("agent-host/MaxOutputTokens", { defaultValue: () => 4096 })

// The metadata key of a finish part under which an adapter keeps the
// provider's own finish reason (`stop`, `end_turn`): effect's `reason` is a
// normalised one, and the model call's span reports the provider's.
const providerFinishKey = "providerFinishReason"

/** A finish part's metadata carrying the provider's finish reason, when it sent one. */
export const finishMetadata = (reason: string | null | undefined): { readonly metadata?: Response.ProviderMetadata } =>
  typeof reason === "string" && reason !== "" ? { metadata: { [providerFinishKey]: reason } } : {}

/** The finish reason the provider sent (see `finishMetadata`), else effect's normalised one. */
export const providerFinishReason = (part: {
  readonly reason: string
  readonly metadata?: Response.ProviderMetadata | undefined
}): string => {
  const raw = part.metadata?.[providerFinishKey]
  return typeof raw === "string" ? raw : part.reason
}

// A reply's parts when no toolkit is given, as effect's `generateText`
// decodes them; made once.
const decodeContent = Schema.decodeEffect(Schema.mutable(Schema.Array(Response.Part(Toolkit.empty))))
// And the parts of a streamed reply.
const decodeStreamParts = Schema.decodeEffect(Schema.NonEmptyArray(Response.StreamPart(Toolkit.empty)))

const invalidOutput = (method: string) => (error: Schema.SchemaError) =>
  AiError.make({ module: "LanguageModel", method, reason: AiError.InvalidOutputError.fromSchemaError(error) })

const providerOptions = (
  options: { readonly prompt: Prompt.RawInput },
  span: LanguageModel.ProviderOptions["span"]
) => ({
  prompt: Prompt.make(options.prompt),
  tools: [],
  toolChoice: "none" as const,
  responseFormat: { type: "text" as const },
  span,
  previousResponseId: undefined,
  incrementalPrompt: undefined
})

// Only a prompt: any other option (a toolkit, a tool choice, deferred tool
// call validation) goes to effect's own.
const promptOnly = (options: object) => Object.keys(options).length === 1 && "prompt" in options

/**
 * effect's `LanguageModel.make`, except that `generateText` and `streamText`
 * given only a prompt (every call this service makes) decode the provider's
 * reply with a schema made once. effect's own builds the reply's union
 * schema on every call; decoding through a new schema rebuilds its parsers and candidate
 * indexes, which it caches in WeakMaps keyed by the new schema, so they
 * outlive the young generation: at 200 chats per second that was about a
 * third of what the old generation took in, and its collections paused the
 * node for 15 to 30 ms every few seconds.
 *
 * Otherwise it does what effect's does when there is no toolkit and no
 * response-id tracker (neither is used here): the prompt normalized, no tools,
 * text format, a `LanguageModel.generateText` span, a reply that does not
 * match its schema failed as `InvalidOutputError`; a stream's parts decoded
 * as they come, under a `LanguageModel.streamText` span. Calls with any other
 * option go to effect's own.
 */
export const make = (params: Params): Effect.Effect<LanguageModel.LanguageModel> =>
  Effect.map(LanguageModel.make(params), (model) => {
    const lean = (options: LanguageModel.GenerateTextOptions<{}>) =>
      Effect.useSpan("LanguageModel.generateText", { kind: "client" }, (span) =>
        params.generateText(providerOptions(options, span)).pipe(
          Effect.flatMap(decodeContent),
          Effect.mapError((error) => (Schema.isSchemaError(error) ? invalidOutput("generateText")(error) : error)),
          Effect.map((content) => new LanguageModel.GenerateTextResponse<{}>(content)),
          Effect.withParentSpan(span, { captureStackTrace: false }),
          Effect.provideService(IdGenerator, defaultIdGenerator)
        )
      )
    const leanStream = (options: LanguageModel.GenerateTextOptions<{}>) =>
      Stream.unwrap(
        Effect.map(Effect.makeSpanScoped("LanguageModel.streamText", { kind: "client" }), (span) =>
          params
            .streamText(providerOptions(options, span))
            .pipe(Stream.mapArrayEffect((parts) => decodeStreamParts(parts)))
        )
      ).pipe(
        Stream.mapError((error) => (Schema.isSchemaError(error) ? invalidOutput("streamText")(error) : error)),
        Stream.provideService(IdGenerator, defaultIdGenerator)
      )
    const generateText = (options: LanguageModel.GenerateTextOptions<any>) =>
      promptOnly(options) ? lean(options) : model.generateText(options as never)
    const streamText = (options: LanguageModel.GenerateTextOptions<any>) =>
      promptOnly(options) ? leanStream(options) : model.streamText(options as never)
    return {
      ...model,
      generateText: generateText as unknown as LanguageModel.LanguageModel["generateText"],
      streamText: streamText as unknown as LanguageModel.LanguageModel["streamText"]
    }
  })
