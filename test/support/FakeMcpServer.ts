import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js"
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

/** The handler a server has for a method: the SDK keeps them privately, and paging wraps its own. */
type Handlers = {
  readonly _requestHandlers: Map<string, (request: unknown, extra: unknown) => Promise<Record<string, unknown>>>
}

/** The fake; with `pageSize`, tools/list answers that many tools a page, with a `nextCursor` (the SDK does not page). */
export const makeWith = (options: { readonly pageSize?: number; readonly holdToolCalls?: number } = {}) =>
  Effect.gen(function* () {
    const received: Array<Received> = []
    let holdsLeft = options.holdToolCalls ?? 0
    const held: Array<() => void> = []
    const closedByClient: Array<number> = []
    const registered: Array<Register> = [...baseTools]
    const sessions = new Map<
      string,
      { readonly transport: StreamableHTTPServerTransport; readonly server: McpServer }
    >()

    const newSession = async () => {
      const server = new McpServer({ name: "fake-mcp", version: "1.0.0" })
      for (const register of registered) register(server)
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
      const session = headers["mcp-session-id"]
      const method = (body as { method?: unknown } | undefined)?.method
      received.push({ method: typeof method === "string" ? method : (request.method ?? ""), headers, session })
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
      /** Forgets every session: their next requests are answered 404. */
      forgetSessions: () => {
        for (const { transport } of sessions.values()) transport.close().catch(() => undefined)
        sessions.clear()
      }
    }
  })

export const make = makeWith()
