import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Result from "effect/Result"
import * as Crypto from "node:crypto"
import * as Guard from "../Webhooks/Guard.ts"
import type { HttpHop } from "./Call.ts"

// The client half of MCP's Streamable HTTP transport (docs/mcp.md#agents-use-mcp-servers),
// on the egress guard: every POST's URL is checked and sent to the checked
// address. effect's McpClient is not used: its transport keeps one client per
// server for a scope, with fixed headers, and ends on a forgotten session,
// where a call here is one short exchange carrying its own Idempotency-Key,
// and a forgotten session is initialised again.

export const protocolVersion = "2025-06-18"
export const clientInfo = { name: "agent-host", version: "1.0.0" }

/** The most bytes of an answer read. */
const maxAnswerBytes = 1_048_576
/** Sessions remembered per node; the oldest is forgotten past it (the server's is then initialised again). */
const maxSessions = 1_000

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
}

const fail = (reason: McpFailure["reason"], message: string) => Effect.fail<McpFailure>({ reason, message })

const excerpt = (text: string, max = 300) => (text.length <= max ? text : `${text.slice(0, max)}…`)

/** The JSON-RPC messages of an answer: a JSON body (one message or a batch), or the `data` of each SSE event. */
export const messagesOf = (contentType: string, body: string): ReadonlyArray<unknown> => {
  const parse = (text: string): ReadonlyArray<unknown> => {
    try {
      const value: unknown = JSON.parse(text)
      return Array.isArray(value) ? value : [value]
    } catch {
      return []
    }
  }
  if (!contentType.toLowerCase().includes("text/event-stream")) return parse(body)
  const messages: Array<unknown> = []
  for (const event of body.split(/\r?\n\r?\n/)) {
    const data = event
      .split(/\r?\n/)
      .filter((line) => line.startsWith("data:"))
      .map((line) => line.slice(5).replace(/^ /, ""))
    if (data.length > 0) messages.push(...parse(data.join("\n")))
  }
  return messages
}

interface Session {
  readonly id: string | undefined
  readonly protocolVersion: string
}

export class McpClient extends Context.Service<McpClient>()("agent-host/McpClient", {
  make: Effect.gen(function* () {
    const guard = yield* Guard.EgressGuard
    // By server and the headers sent to it (a session is its credentials'), on this node only.
    const sessions = new Map<string, Session>()
    const keyOf = (server: McpServerTarget) =>
      Crypto.createHash("sha256")
        .update(JSON.stringify([server.url, Object.entries(server.headers).sort()]))
        .digest("hex")
    let nextId = 1

    /** One POST of `message` to the server, through the guard. */
    const post = (
      server: McpServerTarget,
      message: Record<string, unknown>,
      session: Session | undefined,
      options: McpRequestOptions
    ) =>
      Effect.gen(function* () {
        const scrub = options.scrub ?? ((text: string) => text)
        const parsed = Guard.parseUrl(server.url)
        if (Result.isFailure(parsed)) return yield* fail("refused", `Refused: ${parsed.failure}`)
        const url = parsed.success
        const host = url.hostname.toLowerCase().replace(/\.$/, "")
        if (!server.allowedHosts.includes(host)) {
          return yield* fail("refused", `Refused: the url's host ${host} is not one of the tool's allowedHosts`)
        }
        const target = yield* Effect.mapError(
          guard.check(url),
          (why): McpFailure => ({
            reason: "refused",
            message: `Refused: ${why}`
          })
        )
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
          headers: Object.fromEntries(Object.entries(sent).map(([name, value]) => [name, scrub(value)])),
          body: scrub(body)
        })
        const at = options.hops?.push({ request: shown(headers), response: null })
        const now = yield* Clock.currentTimeMillis
        const answer = yield* Effect.mapError(
          Guard.request({
            method: "POST",
            url,
            address: target.addresses[0]!,
            headers,
            body,
            timeout: Duration.millis(Math.max(1, options.deadline - now)),
            timeoutMessage: options.timeoutMessage,
            maxBody: maxAnswerBytes,
            shownUrl: scrub(Guard.spanUrl(url))
          }),
          (failure): McpFailure => ({
            reason: failure.reason === "timeout" ? "timeout" : "error",
            message: failure.message
          })
        )
        if (options.hops !== undefined && at !== undefined) {
          options.hops[at - 1] = {
            request: shown(answer.sentHeaders),
            response: {
              status: answer.status,
              headers: Object.fromEntries(Object.entries(answer.headers).map(([name, value]) => [name, scrub(value)])),
              body: scrub(answer.body),
              truncated: answer.truncated
            }
          }
        }
        if (answer.truncated) return yield* fail("error", `The MCP server's answer is over ${maxAnswerBytes} bytes`)
        return answer
      })

    /** The result of the JSON-RPC request `message` in `answer`, or why there is none. */
    const resultOf = (answer: Guard.Response, id: number) => {
      if (answer.status < 200 || answer.status > 299) {
        return fail("error", `The MCP server answered ${answer.status}: ${excerpt(answer.body)}`)
      }
      const reply = messagesOf(answer.headers["content-type"] ?? "", answer.body).find(
        (message): message is Record<string, unknown> =>
          typeof message === "object" && message !== null && (message as { id?: unknown }).id === id
      )
      if (reply === undefined) {
        return fail(
          "error",
          `The MCP server's answer holds no JSON-RPC response (is it an MCP server?): ${excerpt(answer.body)}`
        )
      }
      if (typeof reply.error === "object" && reply.error !== null) {
        const error = reply.error as { readonly code?: unknown; readonly message?: unknown }
        return fail("error", `The MCP server answered an error (${String(error.code)}): ${String(error.message)}`)
      }
      return Effect.succeed(reply.result)
    }

    const initialize = (server: McpServerTarget, options: McpRequestOptions) =>
      Effect.gen(function* () {
        const id = nextId++
        const answer = yield* post(
          server,
          {
            jsonrpc: "2.0",
            id,
            method: "initialize",
            params: { protocolVersion, capabilities: {}, clientInfo }
          },
          undefined,
          { ...options, idempotencyKey: undefined }
        )
        const result = yield* resultOf(answer, id)
        const agreed = (result as { readonly protocolVersion?: unknown } | null)?.protocolVersion
        const session: Session = {
          id: answer.headers["mcp-session-id"],
          protocolVersion: typeof agreed === "string" ? agreed : protocolVersion
        }
        const notified = yield* post(server, { jsonrpc: "2.0", method: "notifications/initialized" }, session, {
          ...options,
          idempotencyKey: undefined
        })
        if (notified.status < 200 || notified.status > 299) {
          return yield* fail("error", `The MCP server answered ${notified.status} to notifications/initialized`)
        }
        const key = keyOf(server)
        sessions.delete(key)
        sessions.set(key, session)
        if (sessions.size > maxSessions) sessions.delete(sessions.keys().next().value!)
        return session
      })

    /**
     * The result of one JSON-RPC request to the server: in the session kept
     * for it, initialised first when there is none, and once again when the
     * server answers 404 for a session it forgot.
     */
    const request = (
      server: McpServerTarget,
      method: string,
      params: Record<string, unknown>,
      options: McpRequestOptions
    ): Effect.Effect<unknown, McpFailure> =>
      Effect.gen(function* () {
        const key = keyOf(server)
        for (let attempt = 0; ; attempt++) {
          const session = sessions.get(key) ?? (yield* initialize(server, options))
          const id = nextId++
          const answer = yield* post(server, { jsonrpc: "2.0", id, method, params }, session, options)
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
