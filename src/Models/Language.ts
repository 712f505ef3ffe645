import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import * as AiError from "effect/ai/AiError"
import { defaultIdGenerator, IdGenerator } from "effect/ai/IdGenerator"
import * as LanguageModel from "effect/ai/LanguageModel"
import * as Prompt from "effect/ai/Prompt"
import * as Response from "effect/ai/Response"
import type * as Tool from "effect/ai/Tool"
import type { ResponseFormat as ResponseFormatOf } from "./Models.ts"
import * as Toolkit from "effect/ai/Toolkit"

type Params = Parameters<typeof LanguageModel.make>[0]

/**
 * The ceiling on a reply's tokens that a provider is sent (`max_tokens`), set
 * for each call by Models from the tenant's plan: effect's provider options
 * have no field for it. The default only serves callers outside Models.
 */
export const MaxOutputTokens = Context.Reference<number>("agent-host/MaxOutputTokens", { defaultValue: () => 4096 })

/**
 * The JSON reply asked for, if any, set for each call by Models and read by
 * the adapters' bodies (OpenAI's `response_format`, Anthropic's forced tool)
 * and by the local model: effect's own `responseFormat` option needs an
 * effect Schema, and these are JSON Schemas of tenants.
 */
export const ResponseFormat = Context.Reference<ResponseFormatOf | undefined>("agent-host/ResponseFormat", {
  defaultValue: () => undefined
})

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

// A tool call of any name with parameters as the model sent them: the
// caller validates them against the tool's JSON Schema (effect's own
// `toolCallValidation: "deferred"`).
const UndeclaredToolCall = Response.ToolCallPart("", Schema.Unknown).mapFields((fields) => ({
  ...fields,
  name: Schema.String
}))
// A reply's parts, as effect's `generateText` decodes them without a toolkit
// or with deferred validation; made once.
const decodeContent = Schema.decodeEffect(
  Schema.mutable(Schema.Array(Schema.Union([Response.Part(Toolkit.empty), UndeclaredToolCall])))
)
// And the parts of a streamed reply.
const decodeStreamParts = Schema.decodeEffect(
  Schema.NonEmptyArray(Schema.Union([Response.StreamPart(Toolkit.empty), UndeclaredToolCall]))
)

const invalidOutput = (method: string) => (error: Schema.SchemaError) =>
  AiError.make({ module: "LanguageModel", method, reason: AiError.InvalidOutputError.fromSchemaError(error) })

const providerOptions = (
  options: LanguageModel.GenerateTextOptions<any>,
  span: LanguageModel.ProviderOptions["span"]
): LanguageModel.ProviderOptions => {
  const tools = toolsOf(options)
  return {
    prompt: Prompt.make(options.prompt),
    tools,
    toolChoice: tools.length === 0 ? "none" : (options.toolChoice ?? "auto"),
    responseFormat: { type: "text" },
    span,
    previousResponseId: undefined,
    incrementalPrompt: undefined,
    ...(tools.length === 0 ? {} : { toolCallValidation: "deferred" as const })
  }
}

const toolsOf = (options: LanguageModel.GenerateTextOptions<any>): ReadonlyArray<Tool.Any> => {
  const toolkit = options.toolkit as Toolkit.Any | undefined
  return toolkit === undefined ? [] : Object.values(toolkit.tools)
}

/**
 * The calls this service makes: a prompt alone, or a prompt with a toolkit
 * (a value, not an effect) whose calls the caller resolves itself and
 * validates itself (`disableToolCallResolution`, `toolCallValidation:
 * "deferred"`), with a tool choice. Anything else goes to effect's own.
 */
const isLean = (options: LanguageModel.GenerateTextOptions<any>) => {
  for (const key of Object.keys(options)) {
    if (key === "prompt" || key === "toolChoice") continue
    if (key === "toolkit" && !Effect.isEffect(options.toolkit)) continue
    if (key === "disableToolCallResolution" && options.disableToolCallResolution === true) continue
    if (key === "toolCallValidation" && options.toolCallValidation === "deferred") continue
    return false
  }
  return options.toolkit === undefined || options.disableToolCallResolution === true
}

/**
 * effect's `LanguageModel.make`, except that `generateText` and `streamText`
 * given only a prompt, or a toolkit whose calls the caller resolves (every
 * call this service makes, `isLean`), decode the provider's reply with a
 * schema made once. effect's own builds the reply's union
 * schema on every call; decoding through a new schema rebuilds its parsers and candidate
 * indexes, which it caches in WeakMaps keyed by the new schema, so they
 * outlive the young generation: at 200 chats per second that was about a
 * third of what the old generation took in, and its collections paused the
 * node for 15 to 30 ms every few seconds.
 *
 * Otherwise it does what effect's does with no response-id tracker (none is
 * used here) and no toolkit, or one left unresolved: the prompt normalized,
 * the toolkit's tools and the tool choice passed on, tool calls returned with
 * their parameters unvalidated, text format, a `LanguageModel.generateText` span, a reply that does not
 * match its schema failed as `InvalidOutputError`; a stream's parts decoded
 * as they come, under a `LanguageModel.streamText` span. Calls with any other
 * option go to effect's own.
 */
export const make = (params: Params): Effect.Effect<LanguageModel.LanguageModel> =>
  Effect.map(LanguageModel.make(params), (model) => {
    const lean = (options: LanguageModel.GenerateTextOptions<any>) =>
      Effect.useSpan("LanguageModel.generateText", { kind: "client" }, (span) =>
        params.generateText(providerOptions(options, span)).pipe(
          Effect.flatMap(decodeContent),
          Effect.mapError((error) => (Schema.isSchemaError(error) ? invalidOutput("generateText")(error) : error)),
          Effect.map((content) => new LanguageModel.GenerateTextResponse<{}>(content as never)),
          Effect.withParentSpan(span, { captureStackTrace: false }),
          Effect.provideService(IdGenerator, defaultIdGenerator)
        )
      )
    const leanStream = (options: LanguageModel.GenerateTextOptions<any>) =>
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
      isLean(options) ? lean(options) : model.generateText(options as never)
    const streamText = (options: LanguageModel.GenerateTextOptions<any>) =>
      isLean(options) ? leanStream(options) : model.streamText(options as never)
    return {
      ...model,
      generateText: generateText as unknown as LanguageModel.LanguageModel["generateText"],
      streamText: streamText as unknown as LanguageModel.LanguageModel["streamText"]
    }
  })
