import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Result from "effect/Result"
import * as Crypto from "node:crypto"
import { StringDecoder } from "node:string_decoder"
import * as Guard from "../Webhooks/Guard.ts"
import type { HttpHop } from "./Call.ts"

// The client half of MCP's HTTP transports (docs/mcp.md#agents-use-mcp-servers),
// on the egress guard: every connection's URL is checked and made to the
// checked address. Streamable HTTP first; a server that refuses its
// `initialize` POST as an older one would is spoken to over the HTTP+SSE
// transport of protocol 2024-11-05 (a GET event stream, answers of POSTs
// coming on it). effect's McpClient is not used: its transport keeps one
// client per server for a scope, with fixed headers, and ends on a forgotten
// session, where a call here is one short exchange carrying its own
// Idempotency-Key, and a forgotten session is initialised again.

export const protocolVersion = "2025-06-18"
export const clientInfo = { name: "agent-host", version: "1.0.0" }

/** The most bytes of an answer read (of one event, on an HTTP+SSE stream). */
const maxAnswerBytes = 1_048_576
/** Sessions (and HTTP+SSE streams) remembered per node; the oldest is forgotten past it. */
const maxSessions = 1_000
/** How long a kept HTTP+SSE stream may go unused before it is closed (the next request opens another). */
const idleStreamMs = 5 * 60_000
/** Statuses of an `initialize` POST meaning the server may speak only the older HTTP+SSE transport (the spec's). */
const olderTransportStatuses = new Set([400, 404, 405])

/** An MCP server as a tool reaches it: its url, hosts, and its headers with their secrets filled. */
export interface McpServerTarget {
  readonly url: string
  readonly allowedHosts: ReadonlyArray<string>
  readonly headers: Readonly<Record<string, string>>
}

export interface McpRequestOptions {
  /** When the request must have been answered (epoch ms). */
  readonly deadline: number
  readonly timeoutMessage: string
  readonly idempotencyKey?: string | undefined
  /** Where each POST and its answer are recorded, scrubbed with `scrub`. */
  readonly hops?: Array<HttpHop> | undefined
  readonly scrub?: ((text: string) => string) | undefined
}

/** Why a request got no result. */
export interface McpFailure {
  readonly reason: "refused" | "timeout" | "error"
  readonly message: string
  /** The HTTP status when the server answered with one that is not 2xx (401: the credentials were refused). */
  readonly status?: number | undefined
}

const fail = (reason: McpFailure["reason"], message: string, status?: number) =>
  Effect.fail<McpFailure>({ reason, message, ...(status === undefined ? {} : { status }) })

const excerpt = (text: string, max = 300) => (text.length <= max ? text : `${text.slice(0, max)}…`)

/** A server-sent event: its name (`message` when it has none) and its `data` lines joined. */
interface ServerEvent {
  readonly event: string
  readonly data: string
}

/**
 * Reads server-sent events from a body's chunks as they arrive (lines ended
 * by LF or CRLF). `unfinished` is the size of the event not ended yet.
 */
const eventReader = () => {
  const decoder = new StringDecoder("utf8")
  let buffer = ""
  let name: string | undefined
  let data: Array<string> = []
  let dataSize = 0
  return {
    push: (chunk: Buffer): ReadonlyArray<ServerEvent> => {
      buffer += decoder.write(chunk)
      const events: Array<ServerEvent> = []
      let start = 0
      for (let end = buffer.indexOf("\n"); end !== -1; end = buffer.indexOf("\n", start)) {
        const line = buffer.slice(start, end).replace(/\r$/, "")
        start = end + 1
        if (line === "") {
          if (data.length > 0) events.push({ event: name ?? "message", data: data.join("\n") })
          name = undefined
          data = []
          dataSize = 0
        } else if (!line.startsWith(":")) {
          const colon = line.indexOf(":")
          const field = colon === -1 ? line : line.slice(0, colon)
          const value = colon === -1 ? "" : line.slice(colon + 1).replace(/^ /, "")
          if (field === "event") name = value
          else if (field === "data") {
            data.push(value)
            dataSize += value.length
          }
        }
      }
      buffer = buffer.slice(start)
      return events
    },
    unfinished: () => buffer.length + dataSize
  }
}

const parseMessages = (text: string): ReadonlyArray<unknown> => {
  try {
    const value: unknown = JSON.parse(text)
    return Array.isArray(value) ? value : [value]
  } catch {
    return []
  }
}

const isEventStream = (contentType: string | undefined) =>
  (contentType ?? "").toLowerCase().includes("text/event-stream")

type Message = Record<string, unknown>

/** Whether `message` is the JSON-RPC response (a result or an error) to the request `id`, not a request of the server's. */
const isResponseTo = (message: unknown, id: number): message is Message =>
  typeof message === "object" &&
  message !== null &&
  (message as Message).id === id &&
  !("method" in message) &&
  ("result" in message || "error" in message)

/** The JSON-RPC messages of an answer: a JSON body (one message or a batch), or the `data` of each SSE event. */
export const messagesOf = (contentType: string, body: string): ReadonlyArray<unknown> => {
  if (!isEventStream(contentType)) return parseMessages(body)
  // Read as the stream it was, with a blank line after: the answer may have ended inside an event.
  return eventReader()
    .push(Buffer.from(`${body}\n\n`, "utf8"))
    .flatMap((event) => parseMessages(event.data))
}

/** The request's result, or its JSON-RPC error as a failure. */
const resultOfReply = (reply: Message) => {
  if (typeof reply.error === "object" && reply.error !== null) {
    const error = reply.error as { readonly code?: unknown; readonly message?: unknown }
    return fail("error", `The MCP server answered an error (${String(error.code)}): ${String(error.message)}`)
  }
  return Effect.succeed(reply.result)
}

/** A session of the Streamable HTTP transport. */
interface Session {
  readonly id: string | undefined
  readonly protocolVersion: string
}

/** Where the response to a request, coming on an HTTP+SSE stream, is handed over. */
interface Slot {
  reply?: Message | undefined
  failure?: string
  wake?: (() => void) | undefined
}

/** The GET event stream of the HTTP+SSE transport, and the requests awaiting their responses on it. */
interface EventStream {
  /** Where messages are POSTed: what its `endpoint` event names, on the url's origin. */
  endpoint: URL
  readonly pending: Map<number, Slot>
  /** Drops the connection; the requests awaiting a response fail. */
  readonly close: (why: string) => void
  readonly isClosed: () => boolean
  /** Replaced by another as the server's stream: closed once it awaits no response. */
  retired: boolean
  idle: ReturnType<typeof setTimeout> | undefined
}

type Transport = "streamable" | "sse"

const scrubHeaders = (headers: Readonly<Record<string, string>>, scrub: (text: string) => string) =>
  Object.fromEntries(Object.entries(headers).map(([name, value]) => [name, scrub(value)]))

const isOk = (status: number) => status >= 200 && status <= 299

export class McpClient extends Context.Service<McpClient>()("agent-host/McpClient", {
  make: Effect.gen(function* () {
    const guard = yield* Guard.EgressGuard
    // By server and the headers sent to it (a session is its credentials'), on this node only.
    const sessions = new Map<string, Session>()
    const streams = new Map<string, EventStream>()
    // The transport each server answered on, so later requests skip the probing.
    const transports = new Map<string, Transport>()
    const keyOf = (server: McpServerTarget) =>
      Crypto.createHash("sha256")
        .update(JSON.stringify([server.url, Object.entries(server.headers).sort()]))
        .digest("hex")
    /** Sets `key` as the newest entry of `map`, forgetting the oldest past `maxSessions`. */
    const remember = <A>(map: Map<string, A>, key: string, value: A, forgotten?: (value: A) => void) => {
      const before = map.get(key)
      map.delete(key)
      map.set(key, value)
      if (before !== undefined && before !== value) forgotten?.(before)
      if (map.size > maxSessions) {
        const [oldestKey, oldest] = map.entries().next().value!
        map.delete(oldestKey)
        forgotten?.(oldest)
      }
    }
    const retire = (stream: EventStream) => {
      stream.retired = true
      if (stream.pending.size === 0) stream.close("replaced")
    }
    // Streams hold connections open: they end with the service.
    yield* Effect.addFinalizer(() =>
      Effect.sync(() => {
        for (const stream of [...streams.values()]) stream.close("the service is stopping")
      })
    )
    let nextId = 1

    const serverUrl = (server: McpServerTarget) => {
      const parsed = Guard.parseUrl(server.url)
      return Result.isFailure(parsed) ? fail("refused", `Refused: ${parsed.failure}`) : Effect.succeed(parsed.success)
    }

    /** The address to connect to for `url`: its host one of the server's allowedHosts, every address checked. */
    const addressOf = (server: McpServerTarget, url: URL) =>
      Effect.gen(function* () {
        const host = url.hostname.toLowerCase().replace(/\.$/, "")
        if (!server.allowedHosts.includes(host)) {
          return yield* fail("refused", `Refused: the url's host ${host} is not one of the tool's allowedHosts`)
        }
        const target = yield* Effect.mapError(
          guard.check(url),
          (why): McpFailure => ({ reason: "refused", message: `Refused: ${why}` })
        )
        return target.addresses[0]!
      })

    const timeLeft = (options: McpRequestOptions) =>
      Effect.map(Clock.currentTimeMillis, (now) => Duration.millis(Math.max(1, options.deadline - now)))

    const noAnswer = (failure: Guard.RequestFailure): McpFailure => ({
      reason: failure.reason === "timeout" ? "timeout" : "error",
      message: failure.message
    })

    /**
     * One POST of `message` through the guard: to the url, in a Streamable
     * HTTP session, or to an HTTP+SSE stream's endpoint. An event-stream
     * answer is read until it holds the response to `message`, not to its end
     * (a server may keep it open after). Returns the answer and the index of
     * its recorded hop.
     */
    const post = (
      server: McpServerTarget,
      message: Message,
      via: { readonly session: Session | undefined } | { readonly stream: EventStream },
      options: McpRequestOptions
    ) =>
      Effect.gen(function* () {
        const scrub = options.scrub ?? ((text: string) => text)
        const url = "stream" in via ? via.stream.endpoint : yield* serverUrl(server)
        const address = yield* addressOf(server, url)
        const session = "session" in via ? via.session : undefined
        const body = JSON.stringify(message)
        const headers: Record<string, string> = {
          ...server.headers,
          "content-type": "application/json",
          accept: "application/json, text/event-stream",
          "user-agent": server.headers["user-agent"] ?? "agent-host-tools/1.0",
          ...(session === undefined ? {} : { "mcp-protocol-version": session.protocolVersion }),
          ...(session?.id === undefined ? {} : { "mcp-session-id": session.id }),
          ...(options.idempotencyKey === undefined ? {} : { "idempotency-key": options.idempotencyKey })
        }
        const shown = (sent: Readonly<Record<string, string>>) => ({
          method: "POST",
          url: scrub(url.href),
          headers: scrubHeaders(sent, scrub),
          body: scrub(body)
        })
        const at = options.hops?.push({ request: shown(headers), response: null })
        const id = typeof message.id === "number" ? message.id : undefined
        const answer = yield* Effect.mapError(
          Guard.request({
            method: "POST",
            url,
            address,
            headers,
            body,
            timeout: yield* timeLeft(options),
            timeoutMessage: options.timeoutMessage,
            maxBody: maxAnswerBytes,
            shownUrl: scrub(Guard.spanUrl(url)),
            completeWhen: (_status, answered) => {
              if (id === undefined || !isEventStream(answered["content-type"])) return undefined
              const reader = eventReader()
              return (chunk) =>
                reader.push(chunk).some((event) => parseMessages(event.data).some((one) => isResponseTo(one, id)))
            }
          }),
          noAnswer
        )
        const hop = at === undefined ? undefined : at - 1
        if (options.hops !== undefined && hop !== undefined) {
          options.hops[hop] = {
            request: shown(answer.sentHeaders),
            response: {
              status: answer.status,
              headers: scrubHeaders(answer.headers, scrub),
              body: scrub(answer.body),
              truncated: answer.truncated
            }
          }
        }
        if (answer.truncated) return yield* fail("error", `The MCP server's answer is over ${maxAnswerBytes} bytes`)
        return { answer, hop }
      })

    const statusFailure = (answer: Guard.Response, what = "") =>
      fail("error", `The MCP server answered ${answer.status}${what}: ${excerpt(answer.body)}`, answer.status)

    /** The result of the JSON-RPC request `id` in `answer`, or why there is none. */
    const resultOf = (answer: Guard.Response, id: number) => {
      if (!isOk(answer.status)) return statusFailure(answer)
      const reply = messagesOf(answer.headers["content-type"] ?? "", answer.body).find((message) =>
        isResponseTo(message, id)
      )
      if (reply === undefined) {
        return fail(
          "error",
          `The MCP server's answer holds no JSON-RPC response (is it an MCP server?): ${excerpt(answer.body)}`
        )
      }
      return resultOfReply(reply)
    }

    const initializeRequest = (id: number) => ({
      jsonrpc: "2.0",
      id,
      method: "initialize",
      params: { protocolVersion, capabilities: {}, clientInfo }
    })
    const initialized = { jsonrpc: "2.0", method: "notifications/initialized" }

    /**
     * A new Streamable HTTP session; or, when the server's transport is not
     * known yet and it refuses the `initialize` POST as a server of the older
     * transport does (400, 404, 405), that answer.
     */
    const initialize = (server: McpServerTarget, options: McpRequestOptions) =>
      Effect.gen(function* () {
        const key = keyOf(server)
        const id = nextId++
        const { answer } = yield* post(
          server,
          initializeRequest(id),
          { session: undefined },
          {
            ...options,
            idempotencyKey: undefined
          }
        )
        if (transports.get(key) === undefined && olderTransportStatuses.has(answer.status)) {
          return { refused: answer } as const
        }
        const result = yield* resultOf(answer, id)
        const agreed = (result as { readonly protocolVersion?: unknown } | null)?.protocolVersion
        const session: Session = {
          id: answer.headers["mcp-session-id"],
          protocolVersion: typeof agreed === "string" ? agreed : protocolVersion
        }
        const notified = yield* post(server, initialized, { session }, { ...options, idempotencyKey: undefined })
        if (!isOk(notified.answer.status)) {
          return yield* statusFailure(notified.answer, " to notifications/initialized")
        }
        remember(sessions, key, session)
        remember(transports, key, "streamable")
        return { session } as const
      })

    /**
     * The HTTP+SSE transport's stream: `GET url` through the guard, whose
     * first event, `endpoint`, names where to POST (on the url's origin, else
     * refused), within the request's deadline. Each response coming on it is
     * handed to the request awaiting it; when it ends, they fail.
     */
    const openStream = (server: McpServerTarget, options: McpRequestOptions) =>
      Effect.gen(function* () {
        const scrub = options.scrub ?? ((text: string) => text)
        const url = yield* serverUrl(server)
        const address = yield* addressOf(server, url)
        const headers: Record<string, string> = {
          ...server.headers,
          accept: "text/event-stream",
          "cache-control": "no-cache",
          "user-agent": server.headers["user-agent"] ?? "agent-host-tools/1.0"
        }
        const shown = (sent: Readonly<Record<string, string>>) => ({
          method: "GET",
          url: scrub(url.href),
          headers: scrubHeaders(sent, scrub),
          body: ""
        })
        const at = options.hops?.push({ request: shown(headers), response: null })
        const record = (answer: Guard.OpenAnswer, body: string) => {
          if (options.hops === undefined || at === undefined) return
          options.hops[at - 1] = {
            request: shown(answer.sentHeaders),
            response: { status: answer.status, headers: scrubHeaders(answer.headers, scrub), body, truncated: false }
          }
        }
        const answer = yield* Effect.mapError(
          Guard.open({
            method: "GET",
            url,
            address,
            headers,
            timeout: yield* timeLeft(options),
            timeoutMessage: options.timeoutMessage,
            shownUrl: scrub(Guard.spanUrl(url))
          }),
          noAnswer
        )
        if (!isOk(answer.status) || !isEventStream(answer.headers["content-type"])) {
          answer.close()
          record(answer, "")
          return yield* fail(
            "error",
            `The MCP server answered ${answer.status} (${answer.headers["content-type"] ?? "no content type"}) ` +
              "to GET for an event stream",
            isOk(answer.status) ? undefined : answer.status
          )
        }

        // The first event, once it came: the endpoint's URL, or why there is none.
        let first: Result.Result<string, string> | undefined
        let onFirst: (() => void) | undefined
        let closed: string | undefined
        const pending = new Map<number, Slot>()
        const wake = (slot: Slot) => {
          const waiting = slot.wake
          slot.wake = undefined
          waiting?.()
        }
        const stream: EventStream = {
          endpoint: url,
          pending,
          retired: false,
          idle: undefined,
          isClosed: () => closed !== undefined,
          close: (why) => {
            if (closed !== undefined) return
            closed = why
            clearTimeout(stream.idle)
            answer.close()
            for (const slot of pending.values()) {
              slot.failure = `The MCP server's event stream closed before the response came (${why})`
              wake(slot)
            }
            if (first === undefined) {
              first = Result.fail(`the stream closed (${why})`)
              onFirst?.()
            }
            for (const [key, kept] of streams) if (kept === stream) streams.delete(key)
          }
        }
        const reader = eventReader()
        answer.read(
          (chunk) => {
            if (closed !== undefined) return
            for (const event of reader.push(chunk)) {
              if (first === undefined) {
                first =
                  event.event === "endpoint"
                    ? Result.succeed(event.data.trim())
                    : Result.fail(`its first event is "${event.event}", not "endpoint"`)
                onFirst?.()
                continue
              }
              for (const message of parseMessages(event.data)) {
                const id = (message as { readonly id?: unknown } | null)?.id
                const slot = typeof id === "number" ? pending.get(id) : undefined
                if (slot !== undefined && slot.reply === undefined && isResponseTo(message, id as number)) {
                  slot.reply = message
                  wake(slot)
                }
              }
            }
            if (reader.unfinished() > maxAnswerBytes) stream.close(`an event is over ${maxAnswerBytes} bytes`)
          },
          (why) => stream.close(why)
        )

        const endpoint = yield* Effect.callback<string, McpFailure>((resume) => {
          const settle = () =>
            resume(
              first === undefined || Result.isFailure(first)
                ? fail(
                    "error",
                    `The MCP server's event stream is not one of the HTTP+SSE transport: ${first === undefined ? "no event" : first.failure}`
                  )
                : Effect.succeed(first.success)
            )
          if (first !== undefined) settle()
          else onFirst = settle
        }).pipe(
          Effect.timeoutOrElse({
            duration: yield* timeLeft(options),
            orElse: () => fail("timeout", options.timeoutMessage)
          }),
          Effect.onExit((exit) =>
            Effect.sync(() => {
              onFirst = undefined
              const named = first !== undefined && Result.isSuccess(first) ? first.success : undefined
              record(answer, named === undefined ? "" : scrub(`event: endpoint\ndata: ${named}\n\n`))
              if (exit._tag === "Failure") stream.close("no endpoint")
            })
          )
        )
        let posted: URL
        try {
          posted = new URL(endpoint, url)
        } catch {
          stream.close("its endpoint is not a URL")
          return yield* fail("error", `The MCP server's endpoint event is not a URL: ${excerpt(endpoint)}`)
        }
        if (posted.origin !== url.origin) {
          stream.close("its endpoint is on another origin")
          return yield* fail(
            "refused",
            `Refused: the MCP server's endpoint event names ${posted.origin}, another origin than the url's (${url.origin})`
          )
        }
        stream.endpoint = posted
        return stream
      })

    /** Closes `stream` when it has gone `idleStreamMs` without a request. */
    const idleWatch = (stream: EventStream) => {
      clearTimeout(stream.idle)
      if (stream.pending.size > 0) return
      if (stream.retired) return stream.close("replaced")
      stream.idle = setTimeout(() => stream.close("unused"), idleStreamMs)
      stream.idle.unref()
    }

    /**
     * One message POSTed to the stream's endpoint, and the response to it, as
     * it comes on the stream, within the deadline (none for a notification).
     * Fails with the status when the POST is not accepted.
     */
    const send = (server: McpServerTarget, stream: EventStream, message: Message, options: McpRequestOptions) =>
      Effect.gen(function* () {
        const id = typeof message.id === "number" ? message.id : undefined
        const slot: Slot = {}
        if (id !== undefined) stream.pending.set(id, slot)
        clearTimeout(stream.idle)
        const { answer, hop } = yield* post(server, message, { stream }, options)
        if (!isOk(answer.status)) return yield* statusFailure(answer)
        if (id === undefined) return undefined
        // A server may answer in the POST itself.
        slot.reply ??= messagesOf(answer.headers["content-type"] ?? "", answer.body).find((one) =>
          isResponseTo(one, id)
        )
        const reply = yield* Effect.callback<Message, McpFailure>((resume) => {
          const settle = () =>
            resume(
              slot.reply !== undefined
                ? Effect.succeed(slot.reply)
                : fail("error", slot.failure ?? "The MCP server's event stream closed")
            )
          if (slot.reply !== undefined || slot.failure !== undefined) settle()
          else slot.wake = settle
        }).pipe(
          Effect.timeoutOrElse({
            duration: yield* timeLeft(options),
            orElse: () => fail("timeout", options.timeoutMessage)
          })
        )
        const recorded = hop === undefined ? undefined : options.hops?.[hop]
        if (recorded?.response != null && options.hops !== undefined && hop !== undefined) {
          // The POST's own answer only says it was accepted: the response it got came on the stream.
          const scrub = options.scrub ?? ((text: string) => text)
          options.hops[hop] = { ...recorded, response: { ...recorded.response, body: scrub(JSON.stringify(reply)) } }
        }
        return reply
      }).pipe(
        Effect.ensuring(
          Effect.sync(() => {
            if (typeof message.id === "number") stream.pending.delete(message.id)
            idleWatch(stream)
          })
        )
      )

    /** The server's HTTP+SSE stream: the kept one, or a new one, initialised, then kept. */
    const streamOf = (server: McpServerTarget, options: McpRequestOptions) =>
      Effect.gen(function* () {
        const key = keyOf(server)
        const kept = streams.get(key)
        if (kept !== undefined && !kept.isClosed()) return { stream: kept, fresh: false }
        const stream = yield* openStream(server, options)
        const handshake = Effect.gen(function* () {
          const id = nextId++
          const reply = yield* send(server, stream, initializeRequest(id), { ...options, idempotencyKey: undefined })
          yield* resultOfReply(reply!)
          yield* send(server, stream, initialized, { ...options, idempotencyKey: undefined })
        })
        yield* handshake.pipe(
          Effect.onExit((exit) =>
            exit._tag === "Failure" ? Effect.sync(() => stream.close("its handshake failed")) : Effect.void
          )
        )
        if (stream.isClosed()) return yield* fail("error", "The MCP server's event stream closed after the handshake")
        remember(streams, key, stream, retire)
        remember(transports, key, "sse")
        idleWatch(stream)
        return { stream, fresh: true }
      })

    /**
     * A request over the HTTP+SSE transport. A kept stream whose endpoint the
     * server no longer knows (its POST answered 404: the server restarted, the
     * request not handled) is replaced by a new one and the request sent again.
     */
    const requestOverStream = (
      server: McpServerTarget,
      method: string,
      params: Record<string, unknown>,
      options: McpRequestOptions
    ): Effect.Effect<unknown, McpFailure> =>
      Effect.gen(function* () {
        for (let attempt = 0; ; attempt++) {
          const { fresh, stream } = yield* streamOf(server, options)
          const sent = yield* Effect.result(
            send(server, stream, { jsonrpc: "2.0", id: nextId++, method, params }, options)
          )
          if (Result.isSuccess(sent)) return yield* resultOfReply(sent.success!)
          if (sent.failure.status === 404 && !fresh && attempt === 0) {
            stream.close("its endpoint is gone")
            continue
          }
          return yield* Effect.fail(sent.failure)
        }
      })

    /**
     * The result of one JSON-RPC request to the server, over the transport it
     * answered on before. Streamable HTTP: in the session kept for it,
     * initialised first when there is none, and once again when the server
     * answers 404 for a session it forgot. A server not yet known that
     * refuses the `initialize` POST as an older one does is tried over
     * HTTP+SSE; a server known for HTTP+SSE whose stream cannot be opened is
     * probed again at its next request.
     */
    const request = (
      server: McpServerTarget,
      method: string,
      params: Record<string, unknown>,
      options: McpRequestOptions
    ): Effect.Effect<unknown, McpFailure> =>
      Effect.gen(function* () {
        const key = keyOf(server)
        if (transports.get(key) === "sse") {
          return yield* requestOverStream(server, method, params, options).pipe(
            Effect.tapError(() =>
              Effect.sync(() => {
                if (!streams.has(key)) transports.delete(key)
              })
            )
          )
        }
        for (let attempt = 0; ; attempt++) {
          let session = sessions.get(key)
          if (session === undefined) {
            const made = yield* initialize(server, options)
            if ("refused" in made) {
              const refused = made.refused
              return yield* requestOverStream(server, method, params, options).pipe(
                Effect.mapError(
                  (failure): McpFailure => ({
                    ...failure,
                    message:
                      `The MCP server answered ${refused.status} to initialize (${excerpt(refused.body, 120)}), ` +
                      `and as a server of the older HTTP+SSE transport: ${failure.message}`,
                    status: failure.status ?? refused.status
                  })
                )
              )
            }
            session = made.session
          }
          const id = nextId++
          const { answer } = yield* post(server, { jsonrpc: "2.0", id, method, params }, { session }, options)
          if (answer.status === 404 && session.id !== undefined && attempt === 0) {
            if (sessions.get(key) === session) sessions.delete(key)
            continue
          }
          return yield* resultOf(answer, id)
        }
      })

    /** Every tool the server lists, following `nextCursor` (at most `maxPages` pages). */
    const listTools = (server: McpServerTarget, options: McpRequestOptions) =>
      Effect.gen(function* () {
        const maxPages = 20
        const tools: Array<unknown> = []
        let cursor: string | undefined
        for (let page = 0; page < maxPages; page++) {
          const result = yield* request(server, "tools/list", cursor === undefined ? {} : { cursor }, options)
          const listed = (result as { readonly tools?: unknown } | null)?.tools
          if (!Array.isArray(listed)) {
            return yield* fail("error", "The MCP server's tools/list result has no `tools` array")
          }
          tools.push(...listed)
          const next = (result as { readonly nextCursor?: unknown }).nextCursor
          if (typeof next !== "string" || next === "") break
          cursor = next
        }
        return tools
      })

    const callTool = (server: McpServerTarget, name: string, args: unknown, options: McpRequestOptions) =>
      request(server, "tools/call", { name, arguments: args }, options)

    return { listTools, callTool } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make).pipe(Layer.provide(Guard.EgressGuard.layer))
}
