import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import * as AiError from "effect/ai/AiError"
import { defaultIdGenerator, IdGenerator } from "effect/ai/IdGenerator"
import * as LanguageModel from "effect/ai/LanguageModel"
import * as Prompt from "effect/ai/Prompt"
import * as Response from "effect/ai/Response"
import * as Toolkit from "effect/ai/Toolkit"

type Params = Parameters<typeof LanguageModel.make>[0]

// A reply's parts when no toolkit is given, as effect's `generateText`
// decodes them; made once.
const decodeContent = Schema.decodeEffect(Schema.mutable(Schema.Array(Response.Part(Toolkit.empty))))

/**
 * effect's `LanguageModel.make`, except that `generateText` given only a
 * prompt (every call this service makes) decodes the provider's reply with
 * a schema made once. effect's own builds the reply's union schema on every
 * call; decoding through a new schema rebuilds its parsers and candidate
 * indexes, which it caches in WeakMaps keyed by the new schema, so they
 * outlive the young generation: at 200 chats per second that was about a
 * third of what the old generation took in, and its collections paused the
 * node for 15 to 30 ms every few seconds.
 *
 * Otherwise it does what effect's does when there is no toolkit and no
 * response-id tracker (neither is used here): the prompt normalized, no tools,
 * text format, a `LanguageModel.generateText` span, a reply that does not
 * match its schema failed as `InvalidOutputError`. Calls with any other
 * option go to effect's own.
 */
export const make = (params: Params): Effect.Effect<LanguageModel.LanguageModel> =>
  Effect.map(LanguageModel.make(params), (model) => {
    const lean = (options: LanguageModel.GenerateTextOptions<{}>) =>
      Effect.useSpan("LanguageModel.generateText", { kind: "client" }, (span) =>
        params.generateText({
          prompt: Prompt.make(options.prompt),
          tools: [],
          toolChoice: "none",
          responseFormat: { type: "text" },
          span,
          previousResponseId: undefined,
          incrementalPrompt: undefined
        }).pipe(
          Effect.flatMap(decodeContent),
          Effect.catchTag("SchemaError", (error) =>
            Effect.fail(AiError.make({
              module: "LanguageModel",
              method: "generateText",
              reason: AiError.InvalidOutputError.fromSchemaError(error)
            }))),
          Effect.map((content) => new LanguageModel.GenerateTextResponse<{}>(content)),
          Effect.withParentSpan(span, { captureStackTrace: false }),
          Effect.provideService(IdGenerator, defaultIdGenerator)
        ))
    // Only a prompt: any other option (a toolkit, a tool choice, deferred
    // tool call validation) goes to effect's own.
    const generateText = (options: LanguageModel.GenerateTextOptions<any>) =>
      Object.keys(options).length === 1 && "prompt" in options ? lean(options) : model.generateText(options as never)
    return { ...model, generateText: generateText as unknown as LanguageModel.LanguageModel["generateText"] }
  })
