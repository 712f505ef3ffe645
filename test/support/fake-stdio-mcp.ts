import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js"
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js"
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js"
import { z } from "zod"

// A stdio MCP server built with the official SDK, run by `node` (which strips
// the types) as an operator's configured server would be: `echo` succeeds,
// `fail` answers isError, `crash` exits the process mid-call, `sleep` answers
// after the milliseconds it is given, `big` answers as much text as asked
// (a line past the client's bound), and `env` answers the environment the
// process sees and its pid (which tells a restarted process from the first).

const server = new McpServer({ name: "fake-stdio-mcp", version: "1.0.0" })

server.registerTool(
  "echo",
  { description: "Echoes the text it is given.", inputSchema: { text: z.string() } },
  async ({ text }): Promise<CallToolResult> => ({ content: [{ type: "text", text: `echo: ${text}` }] })
)

server.registerTool(
  "fail",
  { description: "Always fails.", inputSchema: {} },
  async (): Promise<CallToolResult> => ({ content: [{ type: "text", text: "the warehouse is closed" }], isError: true })
)

server.registerTool("crash", { description: "Exits the process without answering.", inputSchema: {} }, async () => {
  process.stderr.write("crashing on purpose\n")
  process.exit(3)
})

server.registerTool(
  "sleep",
  { description: "Answers after `ms` milliseconds.", inputSchema: { ms: z.number() } },
  async ({ ms }): Promise<CallToolResult> => {
    await new Promise((resolve) => setTimeout(resolve, ms))
    return { content: [{ type: "text", text: `slept ${ms} ms` }] }
  }
)

server.registerTool(
  "big",
  { description: "Answers `bytes` characters of text.", inputSchema: { bytes: z.number() } },
  async ({ bytes }): Promise<CallToolResult> => ({ content: [{ type: "text", text: "x".repeat(bytes) }] })
)

server.registerTool(
  "env",
  { description: "Answers the environment the process sees, and its pid.", inputSchema: {} },
  async (): Promise<CallToolResult> => ({
    content: [{ type: "text", text: JSON.stringify({ pid: process.pid, cwd: process.cwd(), env: process.env }) }]
  })
)

process.stderr.write(`fake-stdio-mcp ${process.pid} listening on stdin\n`)
await server.connect(new StdioServerTransport())
