import * as Cause from "effect/Cause"
import * as Context from "effect/Context"
import * as Data from "effect/Data"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import * as Random from "effect/Random"
import * as Redacted from "effect/Redacted"
import * as Stream from "effect/Stream"
import type * as AiError from "effect/ai/AiError"
import * as LanguageModel from "effect/ai/LanguageModel"
import * as Prompt from "effect/ai/Prompt"
import type * as Response from "effect/ai/Response"
import * as Tool from "effect/ai/Tool"
import * as Toolkit from "effect/ai/Toolkit"
import * as HttpClient from "effect/http/HttpClient"
import { AppConfig } from "../Config.ts"
import * as OutgoingHttp from "../Http/OutgoingHttp.ts"
import { Metrics } from "../Observability/Observability.ts"
import * as Anthropic from "./Anthropic.ts"
import * as Language from "./Language.ts"
import * as Local from "./Local.ts"
import * as OpenAi from "./OpenAi.ts"
import { providerMessage, retryAfterOf } from "./ProviderHttp.ts"
import { countTokens } from "./Tokens.ts"
import * as Traced from "../Observability/Traced.ts"

/** A tool offered to the model: what it sees of it. */
export interface ToolSpec {
  /** `^[a-zA-Z0-9_-]{1,64}$`, unique among those offered. */
  readonly name: string
  readonly description: string
  /** A JSON Schema of an object: the call's arguments. */
  readonly parameters: { readonly [key: string]: unknown }
}

/** A call the model asked for. */
export interface ToolCall {
  /** The provider's id of the call (OpenAI's `call_...`, Anthropic's `toolu_...`), the local model's own. */
  readonly id: string
  readonly name: string
  /** The arguments as the model sent them: parsed JSON, or the text itself when it was not JSON. Unvalidated. */
  readonly arguments: unknown
}

export type ChatMessage =
  | { readonly role: "user"; readonly content: string }
  | {
      readonly role: "assistant"
      readonly content: string
      /** The calls this turn of the model asked for; their results follow as `tool` messages. */
      readonly toolCalls?: ReadonlyArray<ToolCall> | undefined
    }
  | {
      readonly role: "tool"
      /** The id of the call answered. */
      readonly callId: string
      /** The tool's name. */
      readonly name: string
      /** What the model is shown of the result (or of the error). */
      readonly content: string
      readonly isError: boolean
    }

/** `auto`: the model may call a tool or answer; `none`: it must answer; `required`: it must call one; or one named tool. */
export type ToolChoice = "auto" | "none" | "required" | { readonly tool: string }

export interface ModelRequest {
  /** `local`, `openai/<name>` or `anthropic/<name>`. */
  readonly model: string
  /** The agent's instructions; "" means no system prompt. */
  readonly system: string
  /** The history, oldest first, with the new user message last (or the results of the last calls). */
  readonly messages: ReadonlyArray<ChatMessage>
  /** The ceiling on the reply sent to the provider (`max_tokens`): the plan's, from the call's reservation. */
  readonly maxOutputTokens: number
  /** Tools the model may call; none: it is sent none. */
  readonly tools?: ReadonlyArray<ToolSpec> | undefined
  /** Default `auto`. */
  readonly toolChoice?: ToolChoice | undefined
  /** Ask for a JSON reply matching `schema` (OpenAI's json_schema response format, Anthropic's forced tool). */
  readonly responseFormat?: ResponseFormat | undefined
}

/** A structured reply: a JSON value matching `schema` (a JSON Schema), named `name`. */
export interface ResponseFormat {
  readonly type: "json_schema"
  readonly name: string
  readonly schema: { readonly [key: string]: unknown }
}

export interface ModelReply {
  readonly text: string
  /** Who answered: `provider/<name the provider reported>`, or `local`. */
  readonly model: string
  readonly inputTokens: number
  readonly outputTokens: number
  /** The calls the model asked for, in its order; none: the reply is its answer. */
  readonly toolCalls: ReadonlyArray<ToolCall>
}

export type ModelEvent =
  | { readonly _tag: "Delta"; readonly text: string }
  | { readonly _tag: "Done"; readonly reply: ModelReply }

export class ModelError extends Data.TaggedError("ModelError")<{
  readonly reason: "NotConfigured" | "Timeout" | "ProviderError" | "UnknownModel"
  /** Safe for clients: never a key, never a stack. */
  readonly message: string
  /** The provider's HTTP status, when there was one. */
  readonly status?: number
}> {}

// Retry waits: exponential from 250 ms, capped, with jitter so that many
// conversations hit by the same outage do not come back in step.
const backoffBase = Duration.millis(250)
const backoffCap = Duration.seconds(8)
// A provider asking for a longer pause than this is treated as down for now.
const retryAfterCap = Duration.seconds(30)
// Provider messages are for humans; past this they are noise.
const maxMessageLength = 500

type Provider = "local" | "openai" | "anthropic"

const providerLabel: Record<Provider, string> = { local: "The local model", openai: "OpenAI", anthropic: "Anthropic" }

/** A model id resolved to the effect/ai provider that serves it. */
interface Target {
  readonly provider: Provider
  readonly name: string
  readonly languageModel: LanguageModel.LanguageModel
}

/** Why an attempt failed, and whether another attempt may do better. */
interface Failure {
  readonly error: ModelError
  readonly retryable: boolean
  readonly retryAfter: Duration.Duration | undefined
}

const toMessage = (message: ChatMessage): Prompt.Message => {
  switch (message.role) {
    case "user":
      return Prompt.makeMessage("user", { content: [Prompt.makePart("text", { text: message.content })] })
    case "assistant":
      return Prompt.makeMessage("assistant", {
        content: [
          ...(message.content === "" ? [] : [Prompt.makePart("text", { text: message.content })]),
          ...(message.toolCalls ?? []).map((call) =>
            Prompt.makePart("tool-call", {
              id: call.id,
              name: call.name,
              params: call.arguments,
              providerExecuted: false
            })
          )
        ]
      })
    case "tool":
      return Prompt.makeMessage("tool", {
        content: [
          Prompt.makePart("tool-result", {
            id: message.callId,
            name: message.name,
            isFailure: message.isError,
            result: message.content,
            providerExecuted: false
          })
        ]
      })
  }
}

const toPrompt = (request: ModelRequest): Prompt.Prompt =>
  Prompt.fromMessages([
    ...(request.system === "" ? [] : [Prompt.makeMessage("system", { content: request.system })]),
    ...request.messages.map(toMessage)
  ])

// One effect/ai tool per spec object: a loop offers the same specs on each of its model calls.
const modelTools = new WeakMap<ToolSpec, Tool.Any>()
const modelToolOf = (spec: ToolSpec): Tool.Any => {
  let tool = modelTools.get(spec)
  if (tool === undefined) {
    tool = Tool.dynamic(spec.name, { description: spec.description, parameters: spec.parameters as never })
    modelTools.set(spec, tool)
  }
  return tool
}

/**
 * The options of effect's `generateText` and `streamText` for a request:
 * its tools as effect/ai dynamic tools over their JSON Schemas, whose calls
 * this service makes and validates itself.
 */
const textOptions = (request: ModelRequest, prompt: Prompt.Prompt): LanguageModel.GenerateTextOptions<any> => {
  const tools = request.tools ?? []
  if (tools.length === 0) return { prompt }
  const choice = request.toolChoice ?? "auto"
  return {
    prompt,
    toolkit: Toolkit.make(...tools.map(modelToolOf)),
    toolChoice: typeof choice === "string" ? choice : { tool: choice.tool },
    disableToolCallResolution: true,
    toolCallValidation: "deferred"
  }
}

const toolCallsOf = (parts: ReadonlyArray<{ readonly type: string }>): Array<ToolCall> =>
  parts.flatMap((part) =>
    part.type === "tool-call"
      ? [
          {
            id: (part as Response.ToolCallPart<string, unknown>).id,
            name: (part as Response.ToolCallPart<string, unknown>).name,
            arguments: (part as Response.ToolCallPart<string, unknown>).params
          }
        ]
      : []
  )

// The public OpenAI API needs a key. Any other base URL is taken for an
// OpenAI-compatible server (Ollama, vLLM, LM Studio, llama.cpp), which usually
// takes none: there a missing key just means no Authorization header.
const requiresOpenAiKey = (baseUrl: string) => {
  try {
    return new URL(baseUrl).hostname === "api.openai.com"
  } catch {
    return true
  }
}

const hostOf = (baseUrl: string) => {
  try {
    return new URL(baseUrl).host
  } catch {
    return "its configured URL"
  }
}

// The innermost error under a transport failure (`connect ECONNREFUSED
// host:port`), for the log only: the errors above it carry the request, whose
// headers hold the key, so they are never logged whole.
const rootCause = (error: unknown): string => {
  let current = error
  for (let depth = 0; depth < 8 && current instanceof Error && current.cause !== undefined; depth++)
    current = current.cause
  return current instanceof Error ? current.message : ""
}

const replyModel = (target: Target, reported: string | undefined) =>
  target.provider === "local" ? Local.modelId : `${target.provider}/${reported ?? target.name}`

const toReply = (
  target: Target,
  text: string,
  modelId: string | undefined,
  usage: Response.Usage,
  toolCalls: ReadonlyArray<ToolCall>
): ModelReply => ({
  text,
  model: replyModel(target, modelId),
  inputTokens: usage.inputTokens.total ?? 0,
  outputTokens: usage.outputTokens.total ?? 0,
  toolCalls
})

/**
 * `gen_ai.provider.name` of the built-in `local` model: it is none of the
 * conventions' well-known providers, but this service itself.
 */
const localProviderName = "agent_host"

/** Where a provider's API is, for `server.address` and `server.port`. */
interface ServerOf {
  readonly address: string
  readonly port: number
}

const serverOf = (baseUrl: string): ServerOf | undefined => {
  try {
    const url = new URL(baseUrl)
    const address = url.hostname.replace(/^\[|\]$/g, "")
    return { address, port: url.port !== "" ? Number(url.port) : url.protocol === "https:" ? 443 : 80 }
  } catch {
    return undefined
  }
}

/**
 * A model call's span, after the OpenTelemetry GenAI conventions: named
 * `chat <model>` with the model as the provider is asked for it (no
 * `openai/` prefix), the provider in `gen_ai.provider.name`, a client span
 * with the provider's address, or an internal one for the built-in model
 * (it runs in this process). Prompts and replies are never recorded.
 */
const spanOf = (
  request: ModelRequest,
  streaming: boolean,
  servers: { readonly openai: ServerOf | undefined; readonly anthropic: ServerOf | undefined }
) => {
  const local = request.model === Local.modelId
  const { name, provider } = splitModel(request.model)
  const requested = local || name === "" ? request.model : name
  const attributes: Record<string, unknown> = {
    "gen_ai.operation.name": "chat",
    "gen_ai.provider.name": local ? localProviderName : provider,
    "gen_ai.request.model": requested,
    "gen_ai.request.max_tokens": request.maxOutputTokens
  }
  if (streaming) attributes["gen_ai.request.stream"] = true
  // The conventions' output type: JSON when a response format asks for it.
  if (request.responseFormat !== undefined) attributes["gen_ai.output.type"] = "json"
  const server = provider === "openai" ? servers.openai : provider === "anthropic" ? servers.anthropic : undefined
  if (server !== undefined) {
    attributes["server.address"] = server.address
    attributes["server.port"] = server.port
  }
  return {
    name: `chat ${requested}`,
    options: { kind: local ? ("internal" as const) : ("client" as const), attributes }
  }
}

/** What the provider said of its answer, exactly as it said it, for the span. */
interface ResponseDetails {
  readonly id: string | undefined
  readonly model: string | undefined
  readonly finishReason: string | undefined
}

/** `provider/name` as its parts; a bare word is a provider with no name. */
const splitModel = (model: string) => {
  const slash = model.indexOf("/")
  return slash === -1
    ? { provider: model, name: "" }
    : { provider: model.slice(0, slash), name: model.slice(slash + 1) }
}

/**
 * The `model` label of the model metrics. Tenants choose model names freely, so
 * only the operator's bounded list (METRICS_MODELS) is named; any other model
 * counts as `<provider>/other`, and an unknown provider as `other`.
 */
export const metricLabel =
  (known: ReadonlySet<string>) =>
  (model: string): string => {
    if (known.has(model)) return model
    const { provider } = splitModel(model)
    return provider === "openai" || provider === "anthropic" ? `${provider}/other` : "other"
  }

/** The response's attributes and usage on the current span, and usage in the token metric, labelled with `label`. */
const recordUsage = (label: string, reply: ModelReply, details: ResponseDetails) =>
  Effect.gen(function* () {
    const attributes: Record<string, unknown> = {
      "gen_ai.usage.input_tokens": reply.inputTokens,
      "gen_ai.usage.output_tokens": reply.outputTokens
    }
    if (details.model !== undefined) attributes["gen_ai.response.model"] = details.model
    if (details.id !== undefined) attributes["gen_ai.response.id"] = details.id
    if (details.finishReason !== undefined) attributes["gen_ai.response.finish_reasons"] = [details.finishReason]
    yield* Effect.annotateCurrentSpan(attributes)
    yield* Metric.update(Metrics.modelTokens(label, "input"), reply.inputTokens)
    yield* Metric.update(Metrics.modelTokens(label, "output"), reply.outputTokens)
  })

/**
 * `error.type` of a failed call: the provider's HTTP status when it answered
 * one, else the kind of failure. The generation it asked for ended in an error.
 */
const recordFailure = (error: ModelError) =>
  Effect.annotateCurrentSpan({
    "error.type":
      error.status !== undefined
        ? String(error.status)
        : error.reason.replace(/([a-z])([A-Z])/g, "$1_$2").toLowerCase(),
    "gen_ai.response.finish_reasons": ["error"]
  })

/** The call's span, with the response's details and usage, and the call's duration by outcome. */
const observed =
  (span: ReturnType<typeof spanOf>, label: string) =>
  <R>(call: Effect.Effect<{ readonly reply: ModelReply; readonly details: ResponseDetails }, ModelError, R>) =>
    Effect.gen(function* () {
      const startedAt = performance.now()
      const exit = yield* Effect.exit(call)
      const outcome = exit._tag === "Success" ? "ok" : "error"
      yield* Metric.update(Metrics.modelDuration(label, outcome), (performance.now() - startedAt) / 1000)
      if (exit._tag === "Success") {
        yield* recordUsage(label, exit.value.reply, exit.value.details)
        return exit.value.reply
      }
      const failure = Cause.findErrorOption(exit.cause)
      if (Option.isSome(failure)) yield* recordFailure(failure.value)
      return yield* Effect.failCause(exit.cause)
    }).pipe(Traced.withSpan(span.name, span.options))

export const make = Effect.gen(function* () {
  const config = yield* AppConfig
  const client = yield* HttpClient.HttpClient
  const labelOf = metricLabel(new Set(config.metricsModels))
  const servers = { openai: serverOf(config.openaiBaseUrl), anthropic: serverOf(config.anthropicBaseUrl) }

  const secrets = [config.openaiApiKey, config.anthropicApiKey].flatMap((key) =>
    Option.isSome(key) && Redacted.value(key.value).length >= 8 ? [Redacted.value(key.value)] : []
  )

  /** A provider's message made safe for clients: keys masked, one line, bounded. */
  const safe = (text: string): string => {
    let out = text
    for (const secret of secrets) out = out.split(secret).join("[redacted]")
    out = out
      .replace(/\bsk-[A-Za-z0-9_*.-]{6,}/g, "[redacted]")
      .replace(/\s+/g, " ")
      .trim()
    return out.length <= maxMessageLength ? out : `${out.slice(0, maxMessageLength - 1)}…`
  }

  const connect = Effect.fnUntraced(function* (model: string) {
    if (model === Local.modelId) {
      return { provider: "local", name: Local.modelId, languageModel: yield* Local.make } satisfies Target
    }
    const { name, provider } = splitModel(model)
    if (provider !== "openai" && provider !== "anthropic") {
      return yield* new ModelError({
        reason: "UnknownModel",
        message: `Unknown model "${model}": use "local", "openai/<name>" or "anthropic/<name>"`
      })
    }
    if (name.trim() === "") {
      return yield* new ModelError({
        reason: "UnknownModel",
        message: `Model "${model}" names no model after "${provider}/"`
      })
    }
    const [keyName, apiKey] =
      provider === "openai" ? ["OPENAI_API_KEY", config.openaiApiKey] : ["ANTHROPIC_API_KEY", config.anthropicApiKey]
    if (Option.isNone(apiKey) && (provider === "anthropic" || requiresOpenAiKey(config.openaiBaseUrl))) {
      return yield* new ModelError({
        reason: "NotConfigured",
        message: `Model "${model}" needs ${keyName}, which is not set`
      })
    }
    const languageModel = yield* provider === "openai"
      ? OpenAi.make({ client, baseUrl: config.openaiBaseUrl, apiKey, model: name })
      : Anthropic.make({ client, baseUrl: config.anthropicBaseUrl, apiKey: Option.getOrThrow(apiKey), model: name })
    return { provider, name, languageModel } satisfies Target
  })

  // Each model's client, made on its first call and kept: making one (its
  // response decoders, its settings) on every call cost more than the call.
  // Bounded, though the models are few: agents name them, from a short list.
  const targets = new Map<string, Target>()
  const resolve = (model: string): Effect.Effect<Target, ModelError> =>
    Effect.suspend(() => {
      const known = targets.get(model)
      if (known !== undefined) return Effect.succeed(known)
      return Effect.map(connect(model), (target) => {
        if (targets.size >= 256) targets.clear()
        targets.set(model, target)
        return target
      })
    })

  const classify = (target: Target, error: AiError.AiError, nowMillis: number): Failure => {
    const label = providerLabel[target.provider]
    const reason = error.reason
    const http = "http" in reason ? reason.http : undefined
    const status = http?.response?.status
    if (status !== undefined) {
      const detail = providerMessage(http?.body) ?? ("description" in reason ? reason.description : undefined)
      return {
        error: new ModelError({
          reason: "ProviderError",
          status,
          message: safe(`${label} answered ${status}${detail ? `: ${detail}` : ""}`)
        }),
        retryable: status === 429 || status >= 500,
        retryAfter: retryAfterOf(http?.response?.headers, nowMillis)
      }
    }
    switch (reason._tag) {
      case "NetworkError":
        return {
          error: new ModelError({
            reason: "ProviderError",
            // Where the provider lives is the operator's business: the log line
            // in toFailure has it, the tenant's message does not.
            message: `The connection to ${label} failed`
          }),
          retryable: reason.reason === "TransportError",
          retryAfter: undefined
        }
      case "InternalProviderError":
        // An error event in the middle of a stream, such as Anthropic's overloaded_error.
        return {
          error: new ModelError({ reason: "ProviderError", message: safe(`${label} failed: ${reason.description}`) }),
          retryable: true,
          retryAfter: undefined
        }
      default:
        return {
          error: new ModelError({
            reason: "ProviderError",
            message: `${label} sent a response that could not be read`
          }),
          retryable: false,
          retryAfter: undefined
        }
    }
  }

  const timedOut = (target: Target): Failure => ({
    error: new ModelError({
      reason: "Timeout",
      message: `${providerLabel[target.provider]} did not answer within ${Duration.format(config.modelTimeout)}`
    }),
    // A hung provider is not retried: the caller would wait a multiple of the timeout.
    retryable: false,
    retryAfter: undefined
  })

  const toFailure = (target: Target) => (error: AiError.AiError) =>
    Effect.map(
      Effect.clockWith((clock) => clock.currentTimeMillis),
      (now) => classify(target, error, now)
    ).pipe(
      Effect.tap(() =>
        error.reason._tag === "NetworkError"
          ? Effect.logWarning("Model provider connection failed").pipe(
              Effect.annotateLogs({
                provider: target.provider,
                model: target.name,
                host: hostOf(target.provider === "anthropic" ? config.anthropicBaseUrl : config.openaiBaseUrl),
                reason: error.reason.reason,
                detail: safe(error.reason.description ?? rootCause(error.reason.cause))
              })
            )
          : Effect.void
      )
    )

  const retryDelay = (retry: number, failure: Failure) =>
    failure.retryAfter !== undefined
      ? Effect.succeed(Duration.min(failure.retryAfter, retryAfterCap))
      : Effect.map(Random.next, (random) => {
          const ceiling = Math.min(Duration.toMillis(backoffCap), Duration.toMillis(backoffBase) * 2 ** retry)
          return Duration.millis(Math.round(ceiling / 2 + (random * ceiling) / 2))
        })

  /** `true` when `failure` is worth another attempt, after waiting for it. */
  const waitBeforeRetry = (target: Target, retry: number, failure: Failure): Effect.Effect<boolean> => {
    if (!failure.retryable || retry >= config.modelMaxRetries) return Effect.succeed(false)
    return retryDelay(retry, failure).pipe(
      Effect.tap((delay) =>
        Effect.logWarning("Model call failed; retrying").pipe(
          Effect.annotateLogs({
            provider: target.provider,
            model: target.name,
            status: failure.error.status ?? "none",
            retry: retry + 1,
            delay: Duration.format(delay)
          })
        )
      ),
      Effect.flatMap(Effect.sleep),
      Effect.as(true)
    )
  }

  const generateWithRetries = (
    target: Target,
    options: LanguageModel.GenerateTextOptions<any>,
    maxOutputTokens: number,
    responseFormat: ResponseFormat | undefined
  ) => {
    const attempt = (
      LanguageModel.generateText(options as never) as Effect.Effect<
        LanguageModel.GenerateTextResponse<any>,
        AiError.AiError,
        LanguageModel.LanguageModel
      >
    ).pipe(
      Effect.provideService(LanguageModel.LanguageModel, target.languageModel),
      Effect.provideService(Language.MaxOutputTokens, maxOutputTokens),
      Effect.provideService(Language.ResponseFormat, responseFormat),
      Effect.catch((error) => Effect.flatMap(toFailure(target)(error), Effect.fail)),
      Effect.timeoutOrElse({ duration: config.modelTimeout, orElse: () => Effect.fail(timedOut(target)) })
    )
    const loop = (retry: number): Effect.Effect<LanguageModel.GenerateTextResponse<any>, ModelError> =>
      Effect.catch(attempt, (failure) =>
        Effect.flatMap(waitBeforeRetry(target, retry, failure), (again) =>
          again ? loop(retry + 1) : Effect.fail(failure.error)
        )
      )
    return loop(0)
  }

  // Once text or a tool call has reached the caller a retry would repeat it,
  // so only an attempt that failed before its first delta is retried. The timeout bounds
  // each wait for the next part, so a long answer that keeps flowing is fine.
  const streamWithRetries = (
    target: Target,
    options: LanguageModel.GenerateTextOptions<any>,
    maxOutputTokens: number,
    responseFormat: ResponseFormat | undefined
  ) => {
    const attempt = (
      LanguageModel.streamText(options as never) as Stream.Stream<
        Response.StreamPart<any>,
        AiError.AiError,
        LanguageModel.LanguageModel
      >
    ).pipe(
      Stream.provideService(LanguageModel.LanguageModel, target.languageModel),
      Stream.provideService(Language.MaxOutputTokens, maxOutputTokens),
      Stream.provideService(Language.ResponseFormat, responseFormat),
      Stream.catch((error) => Stream.fromEffect(Effect.flatMap(toFailure(target)(error), Effect.fail))),
      Stream.timeoutOrElse({ duration: config.modelTimeout, orElse: () => Stream.fail(timedOut(target)) })
    )
    const loop = (retry: number): Stream.Stream<Response.StreamPart<any>, ModelError> =>
      Stream.suspend(() => {
        let delivered = false
        return attempt.pipe(
          Stream.tap((part) =>
            Effect.sync(() => {
              if (part.type === "text-delta" || part.type === "tool-call") delivered = true
            })
          ),
          Stream.catch((failure) =>
            delivered
              ? Stream.fail(failure.error)
              : Stream.unwrap(
                  Effect.map(waitBeforeRetry(target, retry, failure), (again) =>
                    again ? loop(retry + 1) : Stream.fail(failure.error)
                  )
                )
          )
        )
      })
    return loop(0)
  }

  const generate = (request: ModelRequest) =>
    Effect.gen(function* () {
      const target = yield* resolve(request.model)
      const response = yield* generateWithRetries(
        target,
        textOptions(request, toPrompt(request)),
        request.maxOutputTokens,
        request.responseFormat
      )
      const metadata = response.content.find((part) => part.type === "response-metadata")
      const finish = response.content.find((part) => part.type === "finish")
      return {
        reply: toReply(target, response.text, metadata?.modelId, response.usage, toolCallsOf(response.content)),
        details: {
          id: metadata?.id,
          model: metadata?.modelId,
          finishReason: finish === undefined ? undefined : Language.providerFinishReason(finish)
        }
      }
    }).pipe(observed(spanOf(request, false, servers), labelOf(request.model)))

  const stream = (request: ModelRequest): Stream.Stream<ModelEvent, ModelError> => {
    const span = spanOf(request, true, servers)
    return Stream.unwrap(
      Effect.map(resolve(request.model), (target) =>
        Stream.suspend(() => {
          let text = ""
          let modelId: string | undefined
          let responseId: string | undefined
          let finishReason: string | undefined
          let usage: Response.Usage | undefined
          const toolCalls: Array<ToolCall> = []
          const toEvents = (part: Response.StreamPart<any>): Array<ModelEvent> => {
            switch (part.type) {
              case "tool-call":
                toolCalls.push(...toolCallsOf([part]))
                return []
              case "text-delta":
                text += part.delta
                return part.delta === "" ? [] : [{ _tag: "Delta", text: part.delta }]
              case "response-metadata":
                modelId = part.modelId ?? modelId
                responseId = part.id ?? responseId
                return []
              case "finish":
                usage = part.usage
                finishReason = Language.providerFinishReason(part)
                return []
              default:
                return []
            }
          }
          const done = Stream.fromEffect(
            Effect.suspend(() => {
              const reply: ModelReply = {
                text,
                model: replyModel(target, modelId),
                inputTokens: usage?.inputTokens.total ?? 0,
                outputTokens: usage?.outputTokens.total ?? 0,
                toolCalls
              }
              const details = { id: responseId, model: modelId, finishReason }
              return Effect.as(recordUsage(labelOf(request.model), reply, details), {
                _tag: "Done",
                reply
              } as ModelEvent)
            })
          )
          return streamWithRetries(
            target,
            textOptions(request, toPrompt(request)),
            request.maxOutputTokens,
            request.responseFormat
          ).pipe(Stream.map(toEvents), Stream.flattenIterable, Stream.concat(done))
        })
      )
    ).pipe(Stream.tapError(recordFailure), Stream.withSpan(span.name, span.options))
  }

  const contextBudget = (_model: string) => config.modelContextTokens

  return { generate, stream, countTokens, contextBudget, promptEstimate } as const
})

/**
 * What the provider of `model` may count for a prompt of `tokens` tokens (our
 * o200k count of the system prompt and the messages) in `messages` messages
 * (the system prompt one of them), erring high: a call reserves this plus its
 * max_tokens of the tenant's budget. The local model counts as we do; OpenAI
 * adds a few tokens per message and for the reply's start; Anthropic's
 * tokenizer makes more tokens of the same text than o200k, so a quarter more.
 */
export const promptEstimate = (model: string, tokens: number, messages: number): number => {
  if (model === Local.modelId) return tokens
  const overhead = 4 * messages + 3
  return splitModel(model).provider === "anthropic" ? Math.ceil(tokens * 1.25) + overhead : tokens + overhead
}

/** The language models an agent can use: `local`, `openai/<name>` and `anthropic/<name>`, behind effect/ai. */
export class Models extends Context.Service<
  Models,
  {
    readonly generate: (request: ModelRequest) => Effect.Effect<ModelReply, ModelError>
    /** Deltas, then exactly one Done. */
    readonly stream: (request: ModelRequest) => Stream.Stream<ModelEvent, ModelError>
    /** Tokens of `text` (o200k_base), for trimming history to a budget. */
    readonly countTokens: (text: string) => number
    /** Tokens available for system prompt, history and the new message. */
    readonly contextBudget: (model: string) => number
    /** What the provider may count for a prompt (`promptEstimate`), for the call's reservation. */
    readonly promptEstimate: (model: string, tokens: number, messages: number) => number
  }
>()("agent-host/Models") {
  static readonly layer: Layer.Layer<Models, never, AppConfig> = Layer.effect(Models, make).pipe(
    Layer.provide(OutgoingHttp.layer)
  )
}
