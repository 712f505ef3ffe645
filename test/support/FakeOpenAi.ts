/**
 * A fake OpenAI Chat Completions server: a real HTTP server on 127.0.0.1 (an
 * ephemeral port) that speaks the wire format (JSON, SSE with
 * `stream_options.include_usage`, error bodies) and records what it receives.
 *
 * ```ts
 * const fake = yield* FakeOpenAi.make()          // scoped: closed with the test's scope; make({ apiKey }) checks the key
 * // or: layer(FakeOpenAi.layer)(...) then `yield* FakeOpenAi`
 * AppConfig.layerWith({ openaiBaseUrl: fake.url, openaiApiKey: Option.some(Redacted.make("sk-test")) })
 *
 * fake.script({ status: 429, headers: { "retry-after": "1" } }, { text: "Hi!", usage: { input: 12, output: 3 } })
 * fake.script({ status: 500, times: 4 })          // the next 4 requests fail
 * fake.script({ hang: true })                     // never answers
 * fake.setDefault({ hold: true }); fake.releaseHeld() // held open until released (or closed by the client)
 * fake.open, fake.maxOpen, fake.closedByClient      // connections open now, the most at once, closed before answered
 * fake.requests                                   // every request so far: { method, path, headers, body }
 * ```
 *
 * Requests take the scripted replies in order; once the script is used up,
 * every request gets the default reply (`setDefault`, initially `{}`: a short
 * text, the requested model name, word counts as usage). A script entry is
 * used for a streaming request and a plain one alike.
 *
 * The machinery here (`serveFake`) is shared with FakeAnthropic.ts, which only
 * adds the Anthropic dialect.
 */
import { Context, Effect, Layer, type Scope } from "effect"
import * as Http from "node:http"

export interface RecordedRequest {
  readonly method: string
  /** Path and query, e.g. `/v1/chat/completions`. */
  readonly path: string
  /** Lower-cased header names. */
  readonly headers: Readonly<Record<string, string>>
  /** The parsed JSON body, or `undefined` when it was not JSON. */
  readonly body: any
}

export interface ScriptedReply {
  /** Reply text; default "Hello from the fake." */
  readonly text?: string
  /** Model name the provider reports; default: the model requested. */
  readonly model?: string
  /** Token counts the provider reports; default: words of the request and of the reply. */
  readonly usage?: { readonly input: number; readonly output: number }
  /** Report the request's whole ceiling (`max_tokens`) as output tokens: a model that used all it was allowed. */
  readonly fillMaxTokens?: boolean
  /** Fail with this HTTP status and the provider's error body. */
  readonly status?: number
  /** The error body's message; default depends on the status. */
  readonly message?: string
  /** Extra response headers, e.g. `{ "retry-after": "1" }`. */
  readonly headers?: Readonly<Record<string, string>>
  /** Never answer; the connection stays open until the client gives up. */
  readonly hang?: boolean
  /** Hold the request open until `releaseHeld()` (then answer as scripted) or until the client closes it. */
  readonly hold?: boolean
  /** Wait this long before answering. */
  readonly delayMs?: number
  /** Streaming: cut the connection after this many text deltas. */
  readonly dropAfter?: number
  /** Streaming: go silent (connection open) after this many text deltas. */
  readonly stallAfter?: number
  /** Streaming: send the provider's in-stream error event (with `message`) after this many text deltas. */
  readonly errorAfter?: number
  /** Use this entry for this many requests; default 1. */
  readonly times?: number
  /**
   * Tool calls the reply makes, after its text (none by default: `text` may then be ""). `arguments`: a value
   * sent as its JSON, or a string sent as it is (so invalid JSON can be sent). `id`: default a fresh one.
   */
  readonly toolCalls?: ReadonlyArray<{ readonly id?: string; readonly name: string; readonly arguments: unknown }>
  /** Streaming: each call's arguments go out in pieces of this many characters (default 3: split mid-token). */
  readonly argumentChunkChars?: number
  /** Streaming: the calls' pieces go out in turn (one of each call, then the next of each), where the dialect can. */
  readonly interleaveToolCalls?: boolean
}

export interface FakeServer {
  /** The base URL to configure (for OpenAI it ends in `/v1`). */
  readonly url: string
  /** Every request received so far, oldest first. */
  readonly requests: ReadonlyArray<RecordedRequest>
  /**
   * The token counts of every reply sent whole (usage included) to a client
   * still there, oldest first, with the request: what the provider billed.
   */
  readonly reported: ReadonlyArray<{
    readonly input: number
    readonly output: number
    readonly request: RecordedRequest
  }>
  /** Queues replies for the next requests, in order. */
  readonly script: (...replies: ReadonlyArray<ScriptedReply>) => void
  /** The reply once the script is used up. */
  readonly setDefault: (reply: ScriptedReply) => void
  /** Forgets recorded requests, reported counts and the remaining script. */
  readonly reset: () => void
  /** Requests whose connection is open now (received, neither answered nor closed). */
  readonly open: number
  /** The most requests open at once since the start (or the last `reset`). */
  readonly maxOpen: number
  /** When each request the client closed before its answer was closed (ms since the epoch), oldest first. */
  readonly closedByClient: ReadonlyArray<number>
  /** Answers every request held (`hold`) so far. */
  readonly releaseHeld: () => void
}

/** A reply with every default filled in, for a dialect to render. */
export interface ResolvedReply {
  readonly text: string
  readonly model: string
  readonly usage: { readonly input: number; readonly output: number }
  /** The text in streaming deltas (word by word); they concatenate to `text`. */
  readonly deltas: ReadonlyArray<string>
  /** The tool calls, each with an id and its arguments as the JSON text sent, and that text in streaming pieces. */
  readonly toolCalls: ReadonlyArray<{
    readonly id: string
    readonly name: string
    readonly argumentsText: string
    readonly argumentPieces: ReadonlyArray<string>
  }>
  readonly interleaveToolCalls: boolean
}

export interface SseFrame {
  readonly data: string
  readonly event?: string
  /** A frame carrying text (or a piece of a tool call), counted by `dropAfter` / `stallAfter`. */
  readonly delta?: boolean
}

/** What makes a fake one provider rather than another. */
export interface Dialect {
  /** Appended to the server's origin to form `url`. */
  readonly basePath: string
  /** The one path served, e.g. `/v1/chat/completions`. */
  readonly path: string
  /** A request the real API would refuse before doing anything (auth, missing fields). */
  readonly refuse: (request: RecordedRequest) => { readonly status: number; readonly message: string } | undefined
  readonly errorBody: (status: number, message: string) => unknown
  readonly defaultErrorMessage: (status: number) => string
  readonly json: (request: RecordedRequest, reply: ResolvedReply) => unknown
  readonly sse: (request: RecordedRequest, reply: ResolvedReply) => ReadonlyArray<SseFrame>
  /** The error a provider reports inside a stream that has already begun. */
  readonly streamError: (message: string) => SseFrame
}

const wordsOf = (text: string) => text.match(/\s*\S+\s*/g) ?? []

const countWords = (value: unknown): number =>
  typeof value === "string"
    ? value.split(/\s+/).filter((word) => word !== "").length
    : Array.isArray(value)
      ? value.reduce((total: number, item) => total + countWords(item), 0)
      : typeof value === "object" && value !== null
        ? countWords((value as any).content ?? (value as any).text ?? "")
        : 0

/** The reply's ceiling the request sent, under either of OpenAI's names. */
export const ceilingOf = (request: RecordedRequest): number | undefined => {
  const ceiling = request.body?.max_tokens ?? request.body?.max_completion_tokens
  return typeof ceiling === "number" ? ceiling : undefined
}

const resolve = (request: RecordedRequest, reply: ScriptedReply): ResolvedReply => {
  const text = reply.text ?? (reply.toolCalls === undefined ? "Hello from the fake." : "")
  const input = countWords(request.body?.system) + countWords(request.body?.messages)
  const output = reply.fillMaxTokens === true ? (ceilingOf(request) ?? countWords(text)) : countWords(text)
  const chunk = Math.max(1, reply.argumentChunkChars ?? 3)
  return {
    text,
    model: reply.model ?? (typeof request.body?.model === "string" ? request.body.model : "unknown"),
    usage: reply.usage ?? { input, output },
    deltas: wordsOf(text),
    toolCalls: (reply.toolCalls ?? []).map((call) => {
      const argumentsText = typeof call.arguments === "string" ? call.arguments : JSON.stringify(call.arguments)
      const argumentPieces: Array<string> = []
      for (let at = 0; at < argumentsText.length; at += chunk) argumentPieces.push(argumentsText.slice(at, at + chunk))
      return { id: call.id ?? `call_fake${++toolCallIds}`, name: call.name, argumentsText, argumentPieces }
    }),
    interleaveToolCalls: reply.interleaveToolCalls === true
  }
}

let toolCallIds = 0

const readBody = (req: Http.IncomingMessage) =>
  new Promise<string>((resolve, reject) => {
    const chunks: Array<Buffer> = []
    req.on("data", (chunk: Buffer) => chunks.push(chunk))
    req.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")))
    req.on("error", reject)
  })

const sendJson = (
  res: Http.ServerResponse,
  status: number,
  body: unknown,
  headers: Readonly<Record<string, string>> = {}
) => {
  res.writeHead(status, { "content-type": "application/json", ...headers })
  res.end(JSON.stringify(body))
}

const frameText = (frame: SseFrame) =>
  `${frame.event === undefined ? "" : `event: ${frame.event}\n`}data: ${frame.data}\n\n`

/** Sends the frames; true when all of them went out (none cut). */
const sendSse = (
  res: Http.ServerResponse,
  dialect: Dialect,
  frames: ReadonlyArray<SseFrame>,
  reply: ScriptedReply
): boolean => {
  res.writeHead(200, {
    "content-type": "text/event-stream; charset=utf-8",
    "cache-control": "no-cache",
    ...reply.headers
  })
  let out = ""
  let deltas = 0
  let cut: "drop" | "stall" | "error" | undefined
  for (const frame of frames) {
    if (frame.delta) {
      if (reply.dropAfter !== undefined && deltas >= reply.dropAfter) cut = "drop"
      else if (reply.stallAfter !== undefined && deltas >= reply.stallAfter) cut = "stall"
      else if (reply.errorAfter !== undefined && deltas >= reply.errorAfter) cut = "error"
      if (cut !== undefined) break
      deltas++
    }
    out += frameText(frame)
  }
  if (cut === "error") out += frameText(dialect.streamError(reply.message ?? "The server had an error."))
  // Flushed first, so the client sees every frame before the cut.
  res.write(out, () => {
    if (cut === "drop") res.socket?.destroy()
    else if (cut !== "stall") res.end()
  })
  return cut === undefined
}

/** Starts a fake provider speaking `dialect`; it closes with the scope. */
export const serveFake = (dialect: Dialect): Effect.Effect<FakeServer, never, Scope.Scope> =>
  Effect.gen(function* () {
    const requests: Array<RecordedRequest> = []
    const reported: Array<{ readonly input: number; readonly output: number; readonly request: RecordedRequest }> = []
    let queue: Array<ScriptedReply> = []
    let fallback: ScriptedReply = {}
    let open = 0
    let maxOpen = 0
    const closedByClient: Array<number> = []
    let held: Array<() => void> = []

    const next = (): ScriptedReply => {
      const head = queue[0]
      if (head === undefined) return fallback
      if ((head.times ?? 1) <= 1) queue.shift()
      else queue[0] = { ...head, times: (head.times ?? 1) - 1 }
      return head
    }

    const handle = async (req: Http.IncomingMessage, res: Http.ServerResponse) => {
      const raw = await readBody(req)
      let body: any
      try {
        body = raw === "" ? undefined : JSON.parse(raw)
      } catch {
        body = undefined
      }
      const headers: Record<string, string> = {}
      for (const [name, value] of Object.entries(req.headers)) {
        if (value !== undefined) headers[name] = Array.isArray(value) ? value.join(", ") : value
      }
      const request: RecordedRequest = { method: req.method ?? "GET", path: req.url ?? "/", headers, body }
      requests.push(request)
      open++
      maxOpen = Math.max(maxOpen, open)
      let closed = false
      res.once("close", () => {
        closed = true
        open--
        if (!res.writableEnded) closedByClient.push(Date.now())
      })

      if (request.method !== "POST" || request.path.split("?")[0] !== dialect.path) {
        return sendJson(res, 404, dialect.errorBody(404, `Unknown request URL: ${request.method} ${request.path}`))
      }
      const reply = next()
      if (reply.hang) return
      if (reply.hold) {
        await new Promise<void>((resolve) => {
          held.push(resolve)
          res.once("close", () => resolve())
        })
        if (closed) return
      }
      if (reply.delayMs !== undefined) await new Promise((resolve) => setTimeout(resolve, reply.delayMs))
      const refused = dialect.refuse(request)
      if (refused !== undefined) {
        return sendJson(res, refused.status, dialect.errorBody(refused.status, refused.message))
      }
      if (reply.status !== undefined && (reply.status < 200 || reply.status >= 300)) {
        const message = reply.message ?? dialect.defaultErrorMessage(reply.status)
        return sendJson(res, reply.status, dialect.errorBody(reply.status, message), reply.headers)
      }
      const resolved = resolve(request, reply)
      // A client gone before the answer is not billed, as a provider stops generating.
      const gone = res.destroyed
      if (body?.stream === true) {
        if (sendSse(res, dialect, dialect.sse(request, resolved), reply) && !gone)
          reported.push({ ...resolved.usage, request })
        return
      }
      sendJson(res, 200, dialect.json(request, resolved), reply.headers)
      if (!gone) reported.push({ ...resolved.usage, request })
    }

    const server = Http.createServer((req, res) => {
      handle(req, res).catch(() => res.destroy())
    })
    const port = yield* Effect.acquireRelease(
      Effect.callback<number>((resume) => {
        server.listen(0, "127.0.0.1", () => {
          const address = server.address()
          resume(Effect.succeed(typeof address === "object" && address !== null ? address.port : 0))
        })
      }),
      () =>
        Effect.callback<void>((resume) => {
          // Hung and streaming requests would otherwise keep close() waiting.
          server.closeAllConnections()
          server.close(() => resume(Effect.void))
        })
    )

    return {
      url: `http://127.0.0.1:${port}${dialect.basePath}`,
      get requests() {
        return [...requests]
      },
      get reported() {
        return [...reported]
      },
      script: (...replies) => {
        queue.push(...replies)
      },
      setDefault: (reply) => {
        fallback = reply
      },
      get open() {
        return open
      },
      get maxOpen() {
        return maxOpen
      },
      get closedByClient() {
        return [...closedByClient]
      },
      releaseHeld: () => {
        const release = held
        held = []
        for (const resolve of release) resolve()
      },
      reset: () => {
        maxOpen = open
        closedByClient.length = 0
        requests.length = 0
        reported.length = 0
        queue = []
      }
    } satisfies FakeServer
  })

// --- The OpenAI dialect -------------------------------------------------------

const errorTypes: Record<number, { readonly type: string; readonly code: string | null; readonly message: string }> = {
  400: { type: "invalid_request_error", code: null, message: "Invalid request." },
  401: {
    type: "invalid_request_error",
    code: "invalid_api_key",
    message: "Incorrect API key provided. You can find your API key at https://platform.openai.com/account/api-keys."
  },
  404: { type: "invalid_request_error", code: "model_not_found", message: "The model does not exist." },
  429: {
    type: "requests",
    code: "rate_limit_exceeded",
    message: "Rate limit reached for requests. Please try again in 1s."
  },
  500: { type: "server_error", code: null, message: "The server had an error while processing your request." },
  503: { type: "server_error", code: null, message: "The engine is currently overloaded, please try again later." }
}

const errorOf = (status: number) => errorTypes[status] ?? errorTypes[status >= 500 ? 500 : 400]!

const created = 1_700_000_000
let completions = 0

/** The OpenAI Chat Completions dialect. `apiKey`: when set, other bearer tokens get a 401. */
export const openAiDialect = (options: { readonly apiKey?: string } = {}): Dialect => ({
  basePath: "/v1",
  path: "/v1/chat/completions",
  refuse: (request) => {
    if (options.apiKey !== undefined && request.headers.authorization !== `Bearer ${options.apiKey}`) {
      return { status: 401, message: errorOf(401).message }
    }
    if (typeof request.body?.model !== "string" || !Array.isArray(request.body?.messages)) {
      return { status: 400, message: "you must provide a model parameter and messages" }
    }
    return undefined
  },
  errorBody: (status, message) => ({
    error: { message, type: errorOf(status).type, param: null, code: errorOf(status).code }
  }),
  defaultErrorMessage: (status) => errorOf(status).message,
  json: (_request, reply) => ({
    id: `chatcmpl-fake${++completions}`,
    object: "chat.completion",
    created,
    model: reply.model,
    choices: [
      {
        index: 0,
        message: {
          role: "assistant",
          // The real API sends null, not "", beside tool calls.
          content: reply.text === "" && reply.toolCalls.length > 0 ? null : reply.text,
          refusal: null,
          annotations: [],
          ...(reply.toolCalls.length === 0
            ? {}
            : {
                tool_calls: reply.toolCalls.map((call) => ({
                  id: call.id,
                  type: "function",
                  function: { name: call.name, arguments: call.argumentsText }
                }))
              })
        },
        logprobs: null,
        finish_reason: reply.toolCalls.length === 0 ? "stop" : "tool_calls"
      }
    ],
    usage: {
      prompt_tokens: reply.usage.input,
      completion_tokens: reply.usage.output,
      total_tokens: reply.usage.input + reply.usage.output,
      prompt_tokens_details: { cached_tokens: 0, audio_tokens: 0 },
      completion_tokens_details: { reasoning_tokens: 0, audio_tokens: 0 }
    },
    service_tier: "default",
    system_fingerprint: "fp_fake"
  }),
  sse: (request, reply) => {
    const includeUsage = request.body?.stream_options?.include_usage === true
    const base = {
      id: `chatcmpl-fake${++completions}`,
      object: "chat.completion.chunk",
      created,
      model: reply.model,
      service_tier: "default",
      system_fingerprint: "fp_fake"
    }
    const chunk = (choices: Array<unknown>, extra: Record<string, unknown> = {}): SseFrame => ({
      data: JSON.stringify({ ...base, choices, ...(includeUsage ? { usage: null } : {}), ...extra })
    })
    const choice = (delta: Record<string, unknown>, finish: string | null = null) => ({
      index: 0,
      delta,
      logprobs: null,
      finish_reason: finish
    })
    const toolOnly = reply.text === "" && reply.toolCalls.length > 0
    // Each call opens with its id, name and empty arguments, then its arguments in pieces.
    const callFrames = reply.toolCalls.map((call, index) => [
      chunk([
        choice({
          tool_calls: [{ index, id: call.id, type: "function", function: { name: call.name, arguments: "" } }]
        })
      ]),
      ...call.argumentPieces.map((piece) => ({
        ...chunk([choice({ tool_calls: [{ index, function: { arguments: piece } }] })]),
        delta: true
      }))
    ])
    const toolFrames = reply.interleaveToolCalls
      ? Array.from({ length: Math.max(0, ...callFrames.map((frames) => frames.length)) }, (_, at) =>
          callFrames.flatMap((frames) => (at < frames.length ? [frames[at]!] : []))
        ).flat()
      : callFrames.flat()
    return [
      chunk([choice({ role: "assistant", content: toolOnly ? null : "", refusal: null })]),
      ...reply.deltas.map((content) => ({ ...chunk([choice({ content })]), delta: true })),
      ...toolFrames,
      chunk([choice({}, reply.toolCalls.length === 0 ? "stop" : "tool_calls")]),
      ...(includeUsage
        ? [
            chunk([], {
              usage: {
                prompt_tokens: reply.usage.input,
                completion_tokens: reply.usage.output,
                total_tokens: reply.usage.input + reply.usage.output
              }
            })
          ]
        : []),
      { data: "[DONE]" }
    ]
  },
  streamError: (message) => ({
    data: JSON.stringify({ error: { message, type: "server_error", param: null, code: null } })
  })
})

/** The API key tests give the service and its fake OpenAI (`make({ apiKey: openaiKey })`). */
export const openaiKey = "sk-test-openai"

/** A fake OpenAI (or OpenAI-compatible) server; see the top of this file. */
export class FakeOpenAi extends Context.Service<FakeOpenAi, FakeServer>()("test/FakeOpenAi") {
  static readonly make = (options: { readonly apiKey?: string } = {}) => serveFake(openAiDialect(options))
  static readonly layer = Layer.effect(FakeOpenAi, FakeOpenAi.make())
}
