import type * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import type * as LanguageModel from "effect/ai/LanguageModel"
import type * as Prompt from "effect/ai/Prompt"
import type * as Response from "effect/ai/Response"
import * as Tool from "effect/ai/Tool"
import type * as HttpClient from "effect/http/HttpClient"
import * as ProviderModel from "./ProviderModel.ts"

/**
 * An effect/ai `LanguageModel` over the OpenAI Chat Completions API, which
 * OpenAI-compatible servers (Ollama, vLLM, LM Studio, llama.cpp) speak too.
 * Text and function tools; no images.
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

/** Arguments as Chat Completions carries them: JSON text (a string is taken for that text already). */
const argumentsText = (params: unknown): string => (typeof params === "string" ? params : JSON.stringify(params ?? {}))

type WireMessage = Record<string, unknown>

/**
 * Chat Completions messages, the system prompt first as a `system` message;
 * an assistant turn's tool calls in its `tool_calls`, each tool result a
 * `tool` message of its own.
 */
export const toMessages = (prompt: Prompt.Prompt): Array<WireMessage> =>
  prompt.content.flatMap((message): Array<WireMessage> => {
    switch (message.role) {
      case "system":
        return [{ role: "system", content: message.content }]
      case "user":
        return [{ role: "user", content: ProviderModel.textOf(message.content) }]
      case "assistant": {
        const text = ProviderModel.textOf(message.content)
        const calls = message.content.flatMap((part) => (part.type === "tool-call" ? [part] : []))
        if (calls.length === 0) return [{ role: "assistant", content: text }]
        return [
          {
            role: "assistant",
            // OpenAI's own replies carry null, not "", beside tool calls.
            content: text === "" ? null : text,
            tool_calls: calls.map((call) => ({
              id: call.id,
              type: "function",
              function: { name: call.name, arguments: argumentsText(call.params) }
            }))
          }
        ]
      }
      case "tool":
        return message.content.flatMap((part) =>
          part.type === "tool-result"
            ? [
                {
                  role: "tool",
                  tool_call_id: part.id,
                  content: typeof part.result === "string" ? part.result : JSON.stringify(part.result ?? null)
                }
              ]
            : []
        )
    }
  })

/**
 * The `tools` and `tool_choice` fields; none when no tools are offered, so
 * a tool-less request is what it always was. effect's `{mode, oneOf}` is
 * sent as only those tools with the mode, which every compatible server
 * understands (OpenAI's own `allowed_tools` is not widely spoken).
 */
export const toolFields = (
  tools: ReadonlyArray<Tool.Any>,
  choice: LanguageModel.ToolChoice<any>
): { readonly tools?: ReadonlyArray<unknown>; readonly tool_choice?: unknown } => {
  const allowed = typeof choice === "object" && "oneOf" in choice ? new Set<string>(choice.oneOf) : undefined
  const offered = allowed === undefined ? tools : tools.filter((tool) => allowed.has(tool.name))
  if (offered.length === 0) return {}
  const description = (tool: Tool.Any) => Tool.getDescription(tool)
  return {
    tools: offered.map((tool) => ({
      type: "function",
      function: {
        name: tool.name,
        ...(description(tool) === undefined ? {} : { description: description(tool) }),
        parameters: Tool.getJsonSchema(tool)
      }
    })),
    tool_choice:
      typeof choice === "string"
        ? choice
        : "tool" in choice
          ? { type: "function", function: { name: choice.tool } }
          : (choice.mode ?? "auto")
  }
}

// What OpenAI's strict structured outputs accept, conservatively: a schema
// outside these rules is sent without `strict`, and the reply is validated
// here all the same.
const strictKeywords = new Set([
  "type",
  "properties",
  "required",
  "additionalProperties",
  "items",
  "enum",
  "const",
  "anyOf",
  "$ref",
  "$defs",
  "definitions",
  "description"
])
const strictTypes = new Set(["string", "number", "integer", "boolean", "object", "array", "null"])
const strictMaxDepth = 5
const strictMaxProperties = 100

const isRecord = (value: unknown): value is { readonly [key: string]: unknown } =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/**
 * Whether `schema` meets the rules of OpenAI's strict mode: an object at the
 * root; every object closed (`additionalProperties: false`) with every
 * property required; only the keywords it supports; each subschema typed (or
 * a union or reference); at most 5 levels of objects and 100 properties.
 */
export const qualifiesForStrict = (schema: { readonly [key: string]: unknown }): boolean => {
  let properties = 0
  const check = (node: unknown, depth: number): boolean => {
    if (!isRecord(node)) return false
    if (Object.keys(node).some((key) => !strictKeywords.has(key))) return false
    for (const defs of [node.$defs, node.definitions]) {
      if (defs === undefined) continue
      if (!isRecord(defs) || !Object.values(defs).every((def) => check(def, depth))) return false
    }
    if (node.$ref !== undefined) return typeof node.$ref === "string" && node.$ref.startsWith("#")
    if (node.anyOf !== undefined) {
      return Array.isArray(node.anyOf) && node.anyOf.length > 0 && node.anyOf.every((item) => check(item, depth))
    }
    const types = Array.isArray(node.type) ? node.type : [node.type]
    if (types.length === 0 || !types.every((type) => typeof type === "string" && strictTypes.has(type))) return false
    if (types.includes("object")) {
      const props = node.properties
      if (depth >= strictMaxDepth || node.additionalProperties !== false || !isRecord(props)) return false
      const names = Object.keys(props)
      properties += names.length
      const required = Array.isArray(node.required) ? new Set(node.required) : new Set()
      if (properties > strictMaxProperties || required.size !== names.length) return false
      if (!names.every((name) => required.has(name) && check(props[name], depth + 1))) return false
    }
    if (types.includes("array") && !check(node.items, depth)) return false
    return true
  }
  return schema.type === "object" && check(schema, 0)
}

/** The `response_format` field asking for JSON matching the format's schema; none for text. */
export const responseFormatField = (
  format: ProviderModel.BodyInput["responseFormat"]
): { readonly response_format?: unknown } =>
  format === undefined
    ? {}
    : {
        response_format: {
          type: "json_schema",
          json_schema: {
            name: format.name,
            schema: format.schema,
            ...(qualifiesForStrict(format.schema) ? { strict: true } : {})
          }
        }
      }

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

// Only `function` calls are read (the only tools offered); some compatible
// servers leave out the id or send the arguments as an object.
const ToolCallWire = Schema.Struct({
  id: Schema.optional(Schema.NullOr(Schema.String)),
  function: Schema.optional(
    Schema.NullOr(
      Schema.Struct({
        name: Schema.optional(Schema.NullOr(Schema.String)),
        arguments: Schema.optional(Schema.Unknown)
      })
    )
  )
})

const ToolCallDelta = Schema.Struct({
  index: Schema.optional(Schema.NullOr(Schema.Number)),
  id: Schema.optional(Schema.NullOr(Schema.String)),
  function: Schema.optional(
    Schema.NullOr(
      Schema.Struct({
        name: Schema.optional(Schema.NullOr(Schema.String)),
        arguments: Schema.optional(Schema.NullOr(Schema.String))
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
        refusal: Schema.optional(Schema.NullOr(Schema.String)),
        tool_calls: Schema.optional(Schema.NullOr(Schema.Array(ToolCallWire)))
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
                refusal: Schema.optional(Schema.NullOr(Schema.String)),
                tool_calls: Schema.optional(Schema.NullOr(Schema.Array(ToolCallDelta)))
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

// A call without an id (some compatible servers) still needs one to be answered by.
const freshCallId = () => `call_${crypto.randomUUID().replaceAll("-", "").slice(0, 24)}`

const readToolCalls = (calls: ReadonlyArray<typeof ToolCallWire.Type> | null | undefined) =>
  (calls ?? []).flatMap((call): Array<ProviderModel.ToolCall> => {
    const fn = call.function
    if (fn?.name == null) return []
    return [
      {
        id: call.id ?? freshCallId(),
        name: fn.name,
        params: typeof fn.arguments === "string" ? ProviderModel.parseArguments(fn.arguments) : (fn.arguments ?? {})
      }
    ]
  })

/** A streamed tool call being put together from its deltas. */
interface PendingCall {
  readonly key: string
  id: string | undefined
  name: string | undefined
  args: string
  /** Its tool-params-start part went out. */
  started: boolean
}

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
    body: ({ maxOutputTokens, prompt, responseFormat, stream, toolChoice, tools }) => ({
      model: options.model,
      messages: toMessages(prompt),
      [ceiling]: maxOutputTokens,
      ...toolFields(tools, toolChoice),
      ...responseFormatField(responseFormat),
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
          toolCalls: readToolCalls(choice?.message.tool_calls),
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
        // Calls by their index, given out in its order once the finish reason comes.
        const calls = new Map<number, PendingCall>()
        let released = false

        const pendingFor = (delta: typeof ToolCallDelta.Type): PendingCall => {
          // Servers that send no index send each call whole, or its id again with every piece.
          const index =
            delta.index ??
            (delta.id == null
              ? Math.max(0, calls.size - 1)
              : ([...calls.entries()].find(([, call]) => call.id === delta.id)?.[0] ?? calls.size))
          let call = calls.get(index)
          if (call === undefined) {
            call = { key: `tool-${index}`, id: undefined, name: undefined, args: "", started: false }
            calls.set(index, call)
          }
          return call
        }

        const onToolDelta = (delta: typeof ToolCallDelta.Type, parts: Array<Response.StreamPartEncoded>) => {
          const call = pendingFor(delta)
          // The id and name come once, in a call's first delta; a server repeating them changes nothing.
          if (call.id === undefined && delta.id) call.id = delta.id
          if (call.name === undefined && delta.function?.name) call.name = delta.function.name
          const piece = delta.function?.arguments ?? ""
          call.args += piece
          if (!call.started && call.name !== undefined) {
            call.started = true
            call.id ??= freshCallId()
            parts.push({ type: "tool-params-start", id: call.id, name: call.name, providerExecuted: false })
            if (call.args !== "") parts.push({ type: "tool-params-delta", id: call.id, delta: call.args })
          } else if (call.started && piece !== "") {
            parts.push({ type: "tool-params-delta", id: call.id!, delta: piece })
          }
        }

        // The finished calls, once: a call that never got a name cannot be made and is dropped.
        const release = (): Array<ProviderModel.ToolCall> => {
          if (released) return []
          released = true
          return [...calls.entries()]
            .sort(([a], [b]) => a - b)
            .flatMap(([, call]) =>
              call.started ? [{ id: call.id!, name: call.name!, params: ProviderModel.parseArguments(call.args) }] : []
            )
        }

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
              for (const toolDelta of choice.delta?.tool_calls ?? []) onToolDelta(toolDelta, parts)
              if (choice.finish_reason) {
                reason = choice.finish_reason
                for (const call of release()) {
                  parts.push({ type: "tool-params-end", id: call.id }, ProviderModel.toolCallPart(call))
                }
              }
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
              : { textStarted: started, finishReason: reason, usage: toUsage(usage), toolCalls: release() }
        }
      }
    }
  })
}
