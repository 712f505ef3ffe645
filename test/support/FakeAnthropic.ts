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
 */
import { Context, Layer } from "effect"
import { type Dialect, type FakeServer, serveFake } from "./FakeOpenAi.ts"

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
    return undefined
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
    content: [{ type: "text", text: reply.text }],
    stop_reason: "end_turn",
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
      frame("content_block_start", { index: 0, content_block: { type: "text", text: "" } }),
      frame("ping", {}),
      ...reply.deltas.map((text) =>
        frame("content_block_delta", { index: 0, delta: { type: "text_delta", text } }, true)
      ),
      frame("content_block_stop", { index: 0 }),
      frame("message_delta", {
        delta: { stop_reason: "end_turn", stop_sequence: null },
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
