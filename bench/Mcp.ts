// Chat with one call of an MCP server's tool (docs/mcp.md#agents-use-mcp-servers):
// an agent on the instant provider with an `mcp` tool on bench/mcp-server.ts,
// against a client making the same turn itself (the provider asked, a
// tools/call over a session it keeps, the provider asked again), and the
// tools/call round trip alone, so the server's own cost is seen.
import * as Http from "node:http"
import type pg from "pg"
import { openLoop, type OpenLoopResult, pacedLoop, send } from "./OpenLoop.ts"
import { cpuMicros, json } from "./Support.ts"

/** The protocol version the service's client asks for (src/Tools/McpClient.ts). */
const protocolVersion = "2025-06-18"

/** The headers of an MCP session opened on `url`: initialize, then notifications/initialized. */
export const openMcpSession = async (url: URL) => {
  const agent = new Http.Agent({ keepAlive: true })
  try {
    const accept = { accept: "application/json, text/event-stream" }
    const initialized = await new Promise<Http.IncomingMessage>((resolve, reject) => {
      const body = JSON.stringify({
        jsonrpc: "2.0",
        id: 0,
        method: "initialize",
        params: { protocolVersion, capabilities: {}, clientInfo: { name: "bench", version: "1.0.0" } }
      })
      Http.request(url, {
        agent,
        method: "POST",
        headers: { ...accept, "content-type": "application/json", "content-length": Buffer.byteLength(body) }
      })
        .on("response", (response) => response.resume().on("end", () => resolve(response)))
        .on("error", reject)
        .end(body)
    })
    const id = initialized.headers["mcp-session-id"]
    if (initialized.statusCode !== 200 || typeof id !== "string") {
      throw new Error(`the MCP server did not open a session: ${initialized.statusCode}`)
    }
    const headers = { ...accept, "mcp-session-id": id, "mcp-protocol-version": protocolVersion }
    const notified = await send(agent, url, {
      method: "POST",
      headers,
      body: JSON.stringify({ jsonrpc: "2.0", method: "notifications/initialized" })
    })
    if (notified === undefined || notified.status >= 300) throw new Error("notifications/initialized was refused")
    return headers
  } finally {
    agent.destroy()
  }
}

let nextId = 1

/** The text of one tools/call in the session `headers`; undefined when it failed. */
export const callMcpTool = async (
  agent: Http.Agent,
  url: URL,
  headers: Record<string, string>,
  name: string,
  args: unknown
) => {
  const id = nextId++
  const answer = await send(agent, url, {
    method: "POST",
    headers,
    body: JSON.stringify({ jsonrpc: "2.0", id, method: "tools/call", params: { name, arguments: args } })
  })
  if (answer === undefined || answer.status >= 300) return undefined
  const reply = JSON.parse(answer.body) as {
    readonly id?: unknown
    readonly result?: { readonly isError?: boolean; readonly content?: ReadonlyArray<{ readonly text?: string }> }
  }
  if (reply.id !== id || reply.result === undefined || reply.result.isError === true) return undefined
  return (reply.result.content ?? []).map((block) => block.text ?? "").join("\n\n")
}

export interface McpFigures {
  /** tools/call on the server directly, in a kept session. */
  readonly raw: OpenLoopResult
  /** A client's own turn: provider, tools/call, provider. */
  readonly direct: OpenLoopResult
  /** Chat through the service, its first `seconds`. */
  readonly viaFirst: OpenLoopResult
  /** The same after `settleSeconds` more of it. */
  readonly via: OpenLoopResult
  /** The service's CPU per answered chat in `via`, in µs. */
  readonly viaCpu: number
  /** The chat tool calls of the mcp tool by status, e.g. "succeeded 1234". */
  readonly toolCalls: string
}

export const measureMcpToolCall = async (options: {
  readonly serviceUrl: string
  readonly pid: number
  /** The session's bearer header (to define the tool and the agent) and the API key's (to chat). */
  readonly auth: Record<string, string>
  readonly keyHeader: Record<string, string>
  readonly providerUrl: string
  readonly providerHeaders: Record<string, string>
  readonly providerModel: string
  readonly mcpUrl: string
  readonly db: pg.Client
  readonly rate: number
  readonly seconds: number
  readonly settleSeconds: number
}): Promise<McpFigures> => {
  const { serviceUrl, keyHeader, rate, seconds } = options
  const mcpUrl = new URL(options.mcpUrl)
  // Listed when saved: the service reaches the server on loopback since it runs with private targets allowed.
  const tool = await json(`${serviceUrl}/api/tools`, {
    method: "POST",
    headers: options.auth,
    body: JSON.stringify({
      name: "catalog",
      description: "The catalog's MCP server.",
      parameters: { type: "object" },
      settings: { kind: "mcp", url: mcpUrl.href, allowedHosts: ["127.0.0.1"] }
    })
  })
  const served = tool.settings.serverTools?.[0]
  if (served?.exposedAs !== "catalog__lookup") {
    throw new Error(`the mcp tool did not list lookup: ${JSON.stringify(tool.settings)}`)
  }
  const agent = await json(`${serviceUrl}/api/agents`, {
    method: "POST",
    headers: options.auth,
    body: JSON.stringify({
      name: "Instant provider with an MCP tool",
      model: `openai/${options.providerModel}`,
      memoryEnabled: false,
      toolIds: [tool.id]
    })
  })

  // The instant provider calls the first tool offered with {"id": "A-1"} and answers the result with text.
  const viaUrl = `${serviceUrl}/api/v1/agents/${agent.id}/chat`
  const viaBody = () => JSON.stringify({ message: "Where is A-1?" })
  const checked = await json(viaUrl, { method: "POST", headers: keyHeader, body: viaBody() })
  if (
    checked.toolCalls?.length !== 1 ||
    checked.toolCalls[0].status !== "succeeded" ||
    checked.reply !== "A-1 is ready."
  )
    throw new Error(`chat with an MCP tool did not make its one call: ${JSON.stringify(checked)}`)

  const session = await openMcpSession(mcpUrl)
  const raw = (agent: Http.Agent) =>
    callMcpTool(agent, mcpUrl, session, "lookup", { id: "A-1" }).then((text) => text !== undefined)
  await pacedLoop({ rate, seconds: 2, one: raw })

  // The same turn as the service's: the server tool offered under its exposed name, with its own schema.
  const providerUrl = new URL(options.providerUrl)
  const toolSpec = {
    type: "function",
    function: { name: served.exposedAs, description: served.description, parameters: served.inputSchema }
  }
  const directTurn = async (agent: Http.Agent) => {
    const messages: Array<unknown> = [
      { role: "system", content: "You are a helpful assistant." },
      { role: "user", content: "Where is A-1?" }
    ]
    const ask = () =>
      send(agent, providerUrl, {
        method: "POST",
        headers: options.providerHeaders,
        body: JSON.stringify({ model: options.providerModel, messages, tools: [toolSpec], tool_choice: "auto" })
      })
    const first = await ask()
    if (first === undefined || first.status >= 300) return false
    const call = JSON.parse(first.body).choices[0].message.tool_calls[0]
    const text = await callMcpTool(agent, mcpUrl, session, "lookup", JSON.parse(call.function.arguments))
    if (text === undefined) return false
    messages.push(
      { role: "assistant", content: null, tool_calls: [call] },
      { role: "tool", tool_call_id: call.id, content: text }
    )
    const second = await ask()
    return second !== undefined && second.status < 300 && JSON.parse(second.body).choices[0].message.content !== null
  }
  await pacedLoop({ rate, seconds: 2, one: directTurn })
  const direct = await pacedLoop({ rate, seconds, one: directTurn })
  // After the direct turns, so that the server has warmed up as long as it has for the turns through the service.
  const rawResult = await pacedLoop({ rate, seconds, one: raw })

  const paced = (forSeconds: number) =>
    openLoop({ url: viaUrl, headers: keyHeader, body: viaBody, rate, seconds: forSeconds })
  await paced(2)
  const viaFirst = await paced(seconds)
  await paced(options.settleSeconds)
  const cpuBefore = await cpuMicros(options.pid)
  const via = await paced(seconds)
  const viaCpu = ((await cpuMicros(options.pid)) - cpuBefore) / Math.max(1, via.ok)

  const toolCalls = (
    await options.db.query(
      "SELECT status, count(*) AS n FROM tool_calls WHERE run_kind = 'chat' AND tool_id = $1 GROUP BY status ORDER BY status",
      [tool.id]
    )
  ).rows
    .map((row) => `${row.status} ${row.n}`)
    .join(", ")
  return { raw: rawResult, direct, viaFirst, via, viaCpu, toolCalls }
}
