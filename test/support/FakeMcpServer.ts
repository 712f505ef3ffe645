import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js"
import { SSEServerTransport } from "@modelcontextprotocol/sdk/server/sse.js"
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js"
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js"
import { Effect } from "effect"
import * as Crypto from "node:crypto"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import { z } from "zod"

// An MCP server on loopback, built with the official SDK (Streamable HTTP,
// stateful sessions): tools that succeed (`echo`), fail (`fail`, isError) and
// answer several content blocks (`mixed`: text, image, resource). `addTool`
// adds one to every session; `forgetSessions` makes it answer 404 for the
// sessions it had, as a restarted server does. With `holdToolCalls: n` the
// first n tools/call requests are held unanswered until `releaseHeld()` (or
// until the client goes away: `closedByClient`), for kills mid-call.
//
// With `slow`, a tool `slow` answers over SSE: progress notifications
// `slowIntervalMs` apart, then its result, and the stream is kept open after
// it until the client goes away (`slowCalls`), as some servers do. With
// `legacy`, the server speaks only the older HTTP+SSE transport (protocol
// 2024-11-05, the SDK's SSEServerTransport): a POST to the url is answered
// 405, `GET url` opens the event stream whose `endpoint` event names where to
// POST (rewritten by `endpoint`, to name another), and `dropStreams` ends
// them all, as a restarted server does.

/** One JSON-RPC POST the server received. */
export interface Received {
  readonly method: string
  readonly headers: Readonly<Record<string, string>>
  readonly session: string | undefined
}

/** A tiny PNG's bytes, base64: what `mixed` answers as its image. */
export const pixel = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="

type Register = (server: McpServer) => void

const baseTools: ReadonlyArray<Register> = [
  (server) =>
    server.registerTool(
      "echo",
      { description: "Echoes the text it is given.", inputSchema: { text: z.string() } },
      async ({ text }): Promise<CallToolResult> => ({ content: [{ type: "text", text: `echo: ${text}` }] })
    ),
  (server) =>
    server.registerTool(
      "fail",
      { description: "Always fails.", inputSchema: {} },
      async (): Promise<CallToolResult> => ({
        content: [{ type: "text", text: "the warehouse is closed" }],
        isError: true
      })
    ),
  (server) =>
    server.registerTool(
      "mixed",
      { description: "Answers text, an image and a resource.", inputSchema: {} },
      async (): Promise<CallToolResult> => ({
        content: [
          { type: "text", text: "three blocks" },
          { type: "image", data: pixel, mimeType: "image/png" },
          { type: "resource", resource: { uri: "file:///notes.txt", mimeType: "text/plain", text: "a note" } }
        ]
      })
    )
]

/** One call of `slow`, as the server saw it. */
interface SlowCall {
  /** The SDK sent the result and ended the stream: the end was held back, the stream kept open. */
  answered: boolean
  closedByClient: boolean
}

/** The notifications `slow` sends before its result, and the time between them. */
export const slowNotifications = 3
export const slowIntervalMs = 100

const slowTool: Register = (server) =>
  server.registerTool(
    "slow",
    { description: "Reports its progress, then answers.", inputSchema: {} },
    async (_args, extra): Promise<CallToolResult> => {
      for (let step = 1; step <= slowNotifications; step++) {
        await extra.sendNotification({
          method: "notifications/progress",
          params: { progressToken: extra._meta?.progressToken ?? "slow", progress: step, total: slowNotifications }
        })
        await new Promise((resolve) => setTimeout(resolve, slowIntervalMs))
      }
      return { content: [{ type: "text", text: "slow: done" }] }
    }
  )

/** The handler a server has for a method: the SDK keeps them privately, and paging wraps its own. */
type Handlers = {
  readonly _requestHandlers: Map<string, (request: unknown, extra: unknown) => Promise<Record<string, unknown>>>
}

/** The fake; with `pageSize`, tools/list answers that many tools a page, with a `nextCursor` (the SDK does not page). */
export const makeWith = (
  options: {
    readonly pageSize?: number
    readonly holdToolCalls?: number
    readonly slow?: boolean
    readonly legacy?: boolean
    /** What the `endpoint` event names instead of the path the SDK gives (`/messages?sessionId=...`). */
    readonly endpoint?: (path: string) => string
  } = {}
) =>
  Effect.gen(function* () {
    const received: Array<Received> = []
    let holdsLeft = options.holdToolCalls ?? 0
    const held: Array<() => void> = []
    const closedByClient: Array<number> = []
    const slowCalls: Array<SlowCall> = []
    const registered: Array<Register> = [...baseTools, ...(options.slow === true ? [slowTool] : [])]
    const streams = new Map<string, { readonly transport: SSEServerTransport; readonly server: McpServer }>()
    const sessions = new Map<
      string,
      { readonly transport: StreamableHTTPServerTransport; readonly server: McpServer }
    >()

    const newServer = () => {
      const server = new McpServer({ name: "fake-mcp", version: "1.0.0" })
      for (const register of registered) register(server)
      return server
    }

    const newSession = async () => {
      const server = newServer()
      const pageSize = options.pageSize
      if (pageSize !== undefined) {
        const handlers = (server.server as unknown as Handlers)._requestHandlers
        const all = handlers.get("tools/list")!
        handlers.set("tools/list", async (request, extra) => {
          const listed = await all(request, extra)
          const tools = listed.tools as Array<unknown>
          const cursor = (request as { params?: { cursor?: string } }).params?.cursor
          const start = cursor === undefined ? 0 : Number(cursor)
          const end = start + pageSize
          return { tools: tools.slice(start, end), ...(end < tools.length ? { nextCursor: String(end) } : {}) }
        })
      }
      const transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => Crypto.randomUUID(),
        onsessioninitialized: (id) => {
          sessions.set(id, { transport, server })
        }
      })
      await server.connect(transport)
      return transport
    }

    const handle = async (request: Http.IncomingMessage, response: Http.ServerResponse) => {
      const chunks: Array<Buffer> = []
      for await (const chunk of request) chunks.push(chunk as Buffer)
      const text = Buffer.concat(chunks).toString("utf8")
      let body: unknown
      try {
        body = text === "" ? undefined : JSON.parse(text)
      } catch {
        body = undefined
      }
      const headers: Record<string, string> = {}
      for (const [name, value] of Object.entries(request.headers)) if (typeof value === "string") headers[name] = value
      const path = new URL(request.url ?? "/", "http://fake").pathname
      const legacySession =
        options.legacy === true && path === "/messages"
          ? (new URL(request.url ?? "/", "http://fake").searchParams.get("sessionId") ?? "")
          : undefined
      const session = legacySession ?? headers["mcp-session-id"]
      const method = (body as { method?: unknown } | undefined)?.method
      received.push({ method: typeof method === "string" ? method : (request.method ?? ""), headers, session })
      if (options.legacy === true) return handleLegacy(request, response, body, legacySession)
      if (method === "tools/call" && (body as { params?: { name?: unknown } }).params?.name === "slow") {
        keepOpen(response)
      }
      if (method === "tools/call" && holdsLeft > 0) {
        holdsLeft -= 1
        const gone = await new Promise<boolean>((resolve) => {
          held.push(() => resolve(false))
          response.on("close", () => resolve(!response.writableEnded))
        })
        if (gone) {
          // The client died with the call held: nothing is answered, the tool never ran.
          closedByClient.push(Date.now())
          return
        }
      }
      if (session !== undefined) {
        const found = sessions.get(session)
        if (found === undefined) {
          response.writeHead(404, { "content-type": "application/json" })
          response.end(
            JSON.stringify({ jsonrpc: "2.0", error: { code: -32001, message: "Session not found" }, id: null })
          )
          return
        }
        await found.transport.handleRequest(request, response, body)
        return
      }
      if (method !== "initialize") {
        response.writeHead(400, { "content-type": "application/json" })
        response.end(JSON.stringify({ jsonrpc: "2.0", error: { code: -32000, message: "No session" }, id: null }))
        return
      }
      const transport = await newSession()
      await transport.handleRequest(request, response, body)
    }

    /** Swallows the end of `response`'s SSE stream: it stays open until the client goes away. */
    const keepOpen = (response: Http.ServerResponse) => {
      const call: SlowCall = { answered: false, closedByClient: false }
      slowCalls.push(call)
      response.end = (() => {
        call.answered = true
        return response
      }) as unknown as typeof response.end
      response.on("close", () => {
        call.closedByClient = true
      })
    }

    const handleLegacy = async (
      request: Http.IncomingMessage,
      response: Http.ServerResponse,
      body: unknown,
      session: string | undefined
    ) => {
      const path = new URL(request.url ?? "/", "http://fake").pathname
      if (request.method === "GET" && path === "/mcp") {
        if (options.endpoint !== undefined) {
          const rewrite = options.endpoint
          const write = response.write.bind(response) as (chunk: string) => boolean
          let first = true
          response.write = ((chunk: string) => {
            if (!first) return write(chunk)
            first = false
            return write(chunk.replace(/^data: (.*)$/m, (_line, announced: string) => `data: ${rewrite(announced)}`))
          }) as typeof response.write
        }
        const server = newServer()
        const transport = new SSEServerTransport("/messages", response)
        streams.set(transport.sessionId, { transport, server })
        response.on("close", () => streams.delete(transport.sessionId))
        await server.connect(transport)
        return
      }
      if (request.method === "POST" && path === "/messages") {
        const found = streams.get(session ?? "")
        if (found === undefined) {
          response.writeHead(404, { "content-type": "text/plain" })
          response.end("Session not found")
          return
        }
        await found.transport.handlePostMessage(request, response, body)
        return
      }
      // What a server of the older transport answers a POST to its stream's url.
      response.writeHead(405, { allow: "GET", "content-type": "text/plain" })
      response.end("Method Not Allowed")
    }

    const http = Http.createServer((request, response) => {
      handle(request, response).catch(() => {
        if (!response.headersSent) response.writeHead(500)
        response.end()
      })
    })
    yield* Effect.callback<void>((resume) => {
      http.listen(0, "127.0.0.1", () => resume(Effect.void))
    })
    yield* Effect.addFinalizer(() =>
      Effect.promise(async () => {
        for (const { transport } of sessions.values()) await transport.close().catch(() => undefined)
        for (const { transport } of streams.values()) await transport.close().catch(() => undefined)
        http.closeAllConnections()
        await new Promise<void>((resolve) => http.close(() => resolve()))
      })
    )
    const port = (http.address() as AddressInfo).port

    return {
      url: `http://127.0.0.1:${port}/mcp`,
      received,
      /** The JSON-RPC methods received, in order. */
      methods: () => received.map((one) => one.method),
      /** Adds a tool answering `answer`, to every session now and to come. */
      addTool: (name: string, answer: string) => {
        const register: Register = (server) =>
          server.registerTool(
            name,
            { description: `Answers ${answer}.`, inputSchema: {} },
            async (): Promise<CallToolResult> => ({ content: [{ type: "text", text: answer }] })
          )
        registered.push(register)
        for (const { server } of sessions.values()) register(server)
      },
      /** Lets every held tools/call through to its tool. */
      releaseHeld: () => {
        for (const release of held.splice(0)) release()
      },
      /** When each held tools/call was closed by its client before being answered. */
      closedByClient: () => [...closedByClient],
      /** Each call of `slow`: whether it was answered (its stream still kept open) and whether the client went away. */
      slowCalls: () => slowCalls.map((call) => ({ ...call })),
      /** How many HTTP+SSE streams are open (`legacy`). */
      openStreams: () => streams.size,
      /** Ends every HTTP+SSE stream and forgets it: POSTs to their endpoints are answered 404. */
      dropStreams: () => {
        for (const { transport } of streams.values()) transport.close().catch(() => undefined)
        streams.clear()
      },
      /** Forgets every session: their next requests are answered 404. */
      forgetSessions: () => {
        for (const { transport } of sessions.values()) transport.close().catch(() => undefined)
        sessions.clear()
      }
    }
  })

export const make = makeWith()
