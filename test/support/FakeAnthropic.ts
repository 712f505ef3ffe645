/**
 * A fake Anthropic Messages API server: a real HTTP server on 127.0.0.1 (an
 * ephemeral port) that speaks the wire format (JSON, the SSE events
 * message_start / content_block_* / message_delta / message_stop, error
 * bodies) and records what it receives. It refuses, as the real API does, a
 * request without `anthropic-version`, `model`, `max_tokens` or `messages`.
 *
 * ```ts
 * const fake = yield* FakeAnthropic.make({ apiKey: "sk-ant-test" })   // scoped; other x-api-keys get a 401
 * // or: layer(FakeAnthropic.layer)(...) then `yield* FakeAnthropic`
 * AppConfig.layerWith({ anthropicBaseUrl: fake.url, anthropicApiKey: Option.some(Redacted.make("sk-ant-test")) })
 *
 * fake.script({ status: 529 }, { text: "Hi!", model: "claude-3-5-haiku-20241022", usage: { input: 12, output: 3 } })
 * fake.requests                                   // every request so far: { method, path, headers, body }
 * ```
 *
 * Scripting (`script`, `setDefault`, `reset`, and the `ScriptedReply`
 * fields: text, model, usage, status, message, headers, hang, delayMs,
 * dropAfter, stallAfter, errorAfter, times, fillMaxTokens) and `reported` are
 * the same as for FakeOpenAi.ts.
 * `errorAfter` sends an `overloaded_error` event, as Anthropic does when
 * overloaded mid-stream.
 *
 * `toolCalls` come as `tool_use` content blocks after the text block (left
 * out when the text is ""), with stop_reason `tool_use`; streamed, each is a
 * tool_use block whose input arrives in `input_json_delta` pieces
 * (`argumentChunkChars`; each piece counts as a delta for `dropAfter`,
 * `stallAfter` and `errorAfter`). Like the real API it refuses tool blocks
 * that do not pair up: a `tool_use` whose result is not in the next message,
 * a `tool_result` answering no `tool_use` of the message before, a
 * `tool_use` input that is not an object, and `tool_choice` without `tools`.
 */
import { Context, Layer } from "effect"
import { type Dialect, type FakeServer, type ResolvedReply, serveFake } from "./FakeOpenAi.ts"

export type { FakeServer, RecordedRequest, ScriptedReply } from "./FakeOpenAi.ts"

const errorTypes: Record<number, { readonly type: string; readonly message: string }> = {
  400: { type: "invalid_request_error", message: "Invalid request." },
  401: { type: "authentication_error", message: "invalid x-api-key" },
  403: { type: "permission_error", message: "Your API key does not have permission to use the specified resource." },
  404: { type: "not_found_error", message: "The requested resource could not be found." },
  413: { type: "request_too_large", message: "Request exceeds the maximum allowed number of bytes." },
  429: { type: "rate_limit_error", message: "Number of requests has exceeded your rate limit." },
  500: { type: "api_error", message: "Internal server error" },
  529: { type: "overloaded_error", message: "Overloaded" }
}

const errorOf = (status: number) => errorTypes[status] ?? errorTypes[status >= 500 ? 500 : 400]!

let messages = 0

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

const blocksOf = (message: any): ReadonlyArray<any> => (Array.isArray(message?.content) ? message.content : [])

/** What the real API says of tools, tool_choice and tool blocks that break its rules; undefined: none broken. */
const toolProblem = (body: any): string | undefined => {
  const tools: ReadonlyArray<any> | undefined = body.tools
  if (tools !== undefined) {
    if (!Array.isArray(tools)) return "tools: Input should be a valid list"
    for (const [i, tool] of tools.entries()) {
      if (typeof tool?.name !== "string" || !/^[a-zA-Z0-9_-]{1,64}$/.test(tool.name)) {
        return `tools.${i}.custom.name: String should match pattern '^[a-zA-Z0-9_-]{1,64}$'`
      }
      if (!isObject(tool.input_schema) || tool.input_schema.type !== "object") {
        return `tools.${i}.custom.input_schema.type: Input should be 'object'`
      }
    }
  }
  const choice = body.tool_choice
  if (choice !== undefined) {
    if (tools === undefined) return "tool_choice: tool_choice may only be specified while providing tools."
    if (!["auto", "any", "tool", "none"].includes(choice?.type)) return "tool_choice: Input tag does not match"
    if (choice.type === "tool" && !tools.some((tool) => tool.name === choice.name)) {
      return `tool_choice: Tool '${choice.name}' not found in provided tools`
    }
  }
  const turns: ReadonlyArray<any> = body.messages
  for (const [i, message] of turns.entries()) {
    if (message?.role !== "user" && message?.role !== "assistant") {
      return `messages.${i}.role: Input should be 'user' or 'assistant'`
    }
    for (const [j, block] of blocksOf(message).entries()) {
      if (block?.type === "tool_use") {
        if (message.role !== "assistant")
          return `messages.${i}.content.${j}: tool_use blocks are only for assistant messages`
        if (typeof block.id !== "string" || typeof block.name !== "string")
          return `messages.${i}.content.${j}.tool_use: Field required`
        if (!isObject(block.input))
          return `messages.${i}.content.${j}.tool_use.input: Input should be a valid dictionary`
      } else if (block?.type === "tool_result") {
        if (message.role !== "user") return `messages.${i}.content.${j}: tool_result blocks are only for user messages`
        if (typeof block.tool_use_id !== "string")
          return `messages.${i}.content.${j}.tool_result.tool_use_id: Field required`
        if (typeof block.content !== "string" && !Array.isArray(block.content) && block.content !== undefined) {
          return `messages.${i}.content.${j}.tool_result.content: Input should be a valid string or list`
        }
        if (block.is_error !== undefined && typeof block.is_error !== "boolean") {
          return `messages.${i}.content.${j}.tool_result.is_error: Input should be a valid boolean`
        }
      } else if (block?.type === "text") {
        if (typeof block.text !== "string" || block.text === "")
          return `messages.${i}.content.${j}: text content blocks must be non-empty`
      }
    }
    const calls = message.role === "assistant" ? blocksOf(message).filter((block) => block?.type === "tool_use") : []
    const answered = new Set(
      blocksOf(turns[i + 1]).flatMap((block) => (block?.type === "tool_result" ? [block.tool_use_id] : []))
    )
    const missing = calls.filter((call) => !answered.has(call.id)).map((call) => call.id)
    if (missing.length > 0) {
      return `messages.${i}: \`tool_use\` ids were found without \`tool_result\` blocks immediately after: ${missing.join(", ")}. Each \`tool_use\` block must have a corresponding \`tool_result\` block in the next message.`
    }
    const asked = new Set(blocksOf(turns[i - 1]).flatMap((block) => (block?.type === "tool_use" ? [block.id] : [])))
    const results = message.role === "user" ? blocksOf(message) : []
    for (const [j, block] of results.entries()) {
      if (block?.type !== "tool_result") continue
      if (!asked.has(block.tool_use_id)) {
        return `messages.${i}.content.${j}: unexpected \`tool_use_id\` found in \`tool_result\` blocks: ${block.tool_use_id}. Each \`tool_result\` block must have a corresponding \`tool_use\` block in the previous message.`
      }
      // Results come before anything else in their message.
      if (results.slice(0, j).some((before) => before?.type !== "tool_result")) {
        return `messages.${i}: tool_result blocks must come first in the message content`
      }
    }
  }
  return undefined
}

// The input as the real API sends it: always an object; a raw string scripted as invalid JSON goes out as that string.
const inputOf = (call: ResolvedReply["toolCalls"][number]): unknown => {
  try {
    return JSON.parse(call.argumentsText)
  } catch {
    return call.argumentsText
  }
}

const stopReason = (reply: ResolvedReply) => (reply.toolCalls.length > 0 ? "tool_use" : "end_turn")

// The text block is left out of a reply that only calls tools.
const hasText = (reply: ResolvedReply) => reply.text !== "" || reply.toolCalls.length === 0

/** The Anthropic Messages dialect. `apiKey`: when set, other `x-api-key`s get a 401. */
export const anthropicDialect = (options: { readonly apiKey?: string } = {}): Dialect => ({
  basePath: "",
  path: "/v1/messages",
  refuse: (request) => {
    if (options.apiKey !== undefined && request.headers["x-api-key"] !== options.apiKey) {
      return { status: 401, message: errorOf(401).message }
    }
    if (request.headers["anthropic-version"] === undefined) {
      return { status: 400, message: "anthropic-version: header is required" }
    }
    const body = request.body
    if (typeof body?.model !== "string") return { status: 400, message: "model: Field required" }
    if (typeof body?.max_tokens !== "number") return { status: 400, message: "max_tokens: Field required" }
    if (!Array.isArray(body?.messages)) return { status: 400, message: "messages: Field required" }
    const problem = toolProblem(body)
    return problem === undefined ? undefined : { status: 400, message: problem }
  },
  errorBody: (status, message) => ({
    type: "error",
    error: { type: errorOf(status).type, message },
    request_id: `req_fake${status}`
  }),
  defaultErrorMessage: (status) => errorOf(status).message,
  json: (_request, reply) => ({
    id: `msg_fake${++messages}`,
    type: "message",
    role: "assistant",
    model: reply.model,
    content: [
      ...(hasText(reply) ? [{ type: "text", text: reply.text }] : []),
      ...reply.toolCalls.map((call) => ({ type: "tool_use", id: call.id, name: call.name, input: inputOf(call) }))
    ],
    stop_reason: stopReason(reply),
    stop_sequence: null,
    usage: {
      input_tokens: reply.usage.input,
      cache_creation_input_tokens: 0,
      cache_read_input_tokens: 0,
      output_tokens: reply.usage.output
    }
  }),
  sse: (_request, reply) => {
    const frame = (event: string, data: Record<string, unknown>, delta = false) => ({
      event,
      data: JSON.stringify({ type: event, ...data }),
      delta
    })
    return [
      frame("message_start", {
        message: {
          id: `msg_fake${++messages}`,
          type: "message",
          role: "assistant",
          model: reply.model,
          content: [],
          stop_reason: null,
          stop_sequence: null,
          usage: {
            input_tokens: reply.usage.input,
            cache_creation_input_tokens: 0,
            cache_read_input_tokens: 0,
            output_tokens: 1
          }
        }
      }),
      ...(hasText(reply)
        ? [
            frame("content_block_start", { index: 0, content_block: { type: "text", text: "" } }),
            frame("ping", {}),
            ...reply.deltas.map((text) =>
              frame("content_block_delta", { index: 0, delta: { type: "text_delta", text } }, true)
            ),
            frame("content_block_stop", { index: 0 })
          ]
        : [frame("ping", {})]),
      ...reply.toolCalls.flatMap((call, i) => {
        const index = (hasText(reply) ? 1 : 0) + i
        return [
          frame("content_block_start", {
            index,
            content_block: { type: "tool_use", id: call.id, name: call.name, input: {} }
          }),
          ...call.argumentPieces.map((partial_json) =>
            frame("content_block_delta", { index, delta: { type: "input_json_delta", partial_json } }, true)
          ),
          frame("content_block_stop", { index })
        ]
      }),
      frame("message_delta", {
        delta: { stop_reason: stopReason(reply), stop_sequence: null },
        usage: { output_tokens: reply.usage.output }
      }),
      frame("message_stop", {})
    ]
  },
  streamError: (message) => ({
    event: "error",
    data: JSON.stringify({ type: "error", error: { type: "overloaded_error", message } })
  })
})

/** The API key tests give the service and its fake Anthropic (`make({ apiKey: anthropicKey })`). */
export const anthropicKey = "sk-ant-test"

/** A fake Anthropic server; see the top of this file. */
export class FakeAnthropic extends Context.Service<FakeAnthropic, FakeServer>()("test/FakeAnthropic") {
  static readonly make = (options: { readonly apiKey?: string } = {}) => serveFake(anthropicDialect(options))
  static readonly layer = Layer.effect(FakeAnthropic, FakeAnthropic.make())
}
