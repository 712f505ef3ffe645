import { Context, Effect, Layer, Option, Redacted, Result, Stream } from "effect"
import { AppConfig, type AppSettings } from "../../src/Config.ts"
import { type ModelError, type ModelEvent, Models } from "../../src/Models/Models.ts"

export const openaiKey = "sk-test-0123456789abcdef"
export const anthropicKey = "sk-ant-test-0123456789abcdef"

/**
 * The Models service over explicit settings, built in the test's scope. Keys
 * default to none so a key in the developer's environment changes nothing.
 */
export const buildModels = (settings: Partial<AppSettings> = {}) =>
  Effect.map(
    Layer.build(
      Models.layer.pipe(
        Layer.provide(
          AppConfig.layerWith({
            openaiApiKey: Option.none(),
            anthropicApiKey: Option.none(),
            ...settings
          })
        )
      )
    ),
    Context.get(Models)
  )

export const someKey = (key: string) => Option.some(Redacted.make(key))

/** Every event a stream emitted, and the error it ended with, if any. */
export const collect = (stream: Stream.Stream<ModelEvent, ModelError>) =>
  Effect.gen(function* () {
    const events: Array<ModelEvent> = []
    const result = yield* Stream.runForEach(stream, (event) => Effect.sync(() => events.push(event))).pipe(
      Effect.result
    )
    return { events, error: Result.isFailure(result) ? result.failure : undefined }
  })

/** The text of the Delta events. */
export const deltaText = (events: ReadonlyArray<ModelEvent>) =>
  events.flatMap((event) => (event._tag === "Delta" ? [event.text] : [])).join("")

/** The result of `effect` and how long it took, in milliseconds. */
export const timed = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function* () {
    const start = Date.now()
    const result = yield* effect
    return { result, ms: Date.now() - start }
  })
