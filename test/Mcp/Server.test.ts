import { assert, describe, layer } from "@effect/vitest"
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { Effect } from "effect"
import { seedKnowledge } from "../support/Knowledge.ts"
import { teamOf } from "../support/Teams.ts"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"

const allTools = [
  "ask_agent",
  "get_execution",
  "get_team_run",
  "list_agents",
  "list_orchestrations",
  "list_teams",
  "run_orchestration",
  "run_team",
  "search_knowledge"
]

/** The official MCP client, connected to the server's /mcp with `key` as a bearer token; closed with the scope. */
const connect = (key: string) =>
  Effect.gen(function* () {
    const { baseUrl } = yield* TestClient
    return yield* Effect.acquireRelease(
      Effect.promise(async () => {
        const client = new Client({ name: "test", version: "1.0.0" })
        const transport = new StreamableHTTPClientTransport(new URL(`${baseUrl}/mcp`), {
          requestInit: { headers: { authorization: `Bearer ${key}` } }
        })
        await client.connect(transport)
        return client
      }),
      (client) => Effect.promise(() => client.close())
    )
  })

interface ToolResult {
  readonly isError?: boolean
  readonly structuredContent?: any
  readonly content: ReadonlyArray<{ readonly type: string; readonly text?: string }>
}

const call = (client: Client, name: string, args: Record<string, unknown> = {}) =>
  Effect.promise(() => client.callTool({ name, arguments: args }) as Promise<ToolResult>)

/** The structured result of a call that must succeed. */
const ok = (client: Client, name: string, args: Record<string, unknown> = {}) =>
  Effect.map(call(client, name, args), (result) => {
    assert.notStrictEqual(result.isError, true, `${name}: ${JSON.stringify(result.content)}`)
    return result.structuredContent
  })

/** The text of a call that must be a tool error. */
const toolError = (client: Client, name: string, args: Record<string, unknown> = {}) =>
  Effect.map(call(client, name, args), (result) => {
    assert.strictEqual(result.isError, true, `${name} should fail: ${JSON.stringify(result)}`)
    return result.content.map((part) => part.text ?? "").join("")
  })

/** A tenant with a key of every scope, an agent on `local`, a one-step orchestration over it, and a team. */
const tenant = Effect.gen(function* () {
  const setup = yield* TestServer.oneStepOrchestration("local")
  const { team, agents } = yield* teamOf(setup.account, "local", 2, { maxTurns: 2 })
  return { ...setup, teamId: team.id as string, agentIds: [setup.agentId, ...agents.map((agent) => agent.id)] }
})

layer(TestServer.layer(), { excludeTestServices: true })("the MCP server at /mcp", (it) => {
  describe("tools", () => {
    it.effect("initializes, lists the nine tools with their schemas, and calls each for the key's tenant", () =>
      Effect.gen(function* () {
        const { account, key, agentId, agentIds, orchestrationId, teamId } = yield* tenant
        const { knowledgeId } = yield* seedKnowledge(account, {
          name: "Animals",
          documents: [
            { filename: "zebra.txt", text: "The zebra grazes on the savanna grass at dawn." },
            { filename: "owl.txt", text: "The owl hunts mice in the forest at night." }
          ]
        })
        const client = yield* connect(key)
        assert.strictEqual(client.getServerVersion()?.name, "agent-host")

        const { tools } = yield* Effect.promise(() => client.listTools())
        assert.deepStrictEqual(tools.map((tool) => tool.name).sort(), allTools)
        const askAgent = tools.find((tool) => tool.name === "ask_agent")!
        // The REST payload's fields, beside the agent's id.
        assert.includeMembers(Object.keys(askAgent.inputSchema.properties ?? {}), [
          "agentId",
          "message",
          "conversationId"
        ])
        assert.includeMembers(Object.keys(askAgent.outputSchema?.properties ?? {}), ["reply", "conversationId"])

        const agents = yield* ok(client, "list_agents")
        assert.sameMembers(
          agents.data.map((agent: any) => agent.id),
          agentIds
        )
        // The key's view of an agent: no instructions.
        assert.notProperty(agents.data[0], "instructions")

        const first = yield* ok(client, "ask_agent", { agentId, message: "Hello there" })
        assert.isString(first.reply)
        assert.isNotEmpty(first.reply)
        const second = yield* ok(client, "ask_agent", {
          agentId,
          message: "And again",
          conversationId: first.conversationId
        })
        assert.strictEqual(second.conversationId, first.conversationId)

        const orchestrations = yield* ok(client, "list_orchestrations")
        assert.deepStrictEqual(
          orchestrations.data.map((orchestration: any) => orchestration.id),
          [orchestrationId]
        )
        const started = yield* ok(client, "run_orchestration", { orchestrationId, input: "hi" })
        assert.isString(started.executionId)
        assert.strictEqual(started.orchestrationId, orchestrationId)
        const execution = yield* TestServer.waitFor(
          "a completed execution",
          Effect.map(ok(client, "get_execution", { executionId: started.executionId }), (found) =>
            found.status === "completed" ? found : undefined
          ),
          30_000
        )
        assert.isString(execution.output)

        const teams = yield* ok(client, "list_teams")
        assert.deepStrictEqual(
          teams.data.map((team: any) => team.id),
          [teamId]
        )
        const run = yield* ok(client, "run_team", { teamId, mission: "Plan a picnic" })
        assert.isString(run.runId)
        const finished = yield* TestServer.waitFor(
          "a finished team run",
          Effect.map(ok(client, "get_team_run", { teamId, runId: run.runId }), (found) =>
            ["completed", "failed"].includes(found.status) ? found : undefined
          ),
          30_000
        )
        assert.strictEqual(finished.runId, run.runId)
        assert.isAtLeast(finished.transcript.data.length, 1)

        const found = yield* ok(client, "search_knowledge", { base: knowledgeId, query: "zebra", topK: 3 })
        assert.strictEqual(found.data.length, 1)
        assert.include(found.data[0].content, "zebra")
      })
    )

    it.effect("a problem is a tool error with its detail, and the session goes on", () =>
      Effect.gen(function* () {
        const { key } = yield* tenant
        const client = yield* connect(key)
        assert.include(yield* toolError(client, "get_execution", { executionId: "nope" }), "No execution nope")
        assert.include(
          yield* toolError(client, "search_knowledge", { base: "nope", query: "zebra" }),
          "No knowledge base nope"
        )
        // Arguments the REST schema refuses: a tool error naming the field, and the session still answers.
        assert.include(
          yield* toolError(client, "ask_agent", { agentId: "x", message: "" }),
          "Expected a non-empty message"
        )
        assert.include(yield* toolError(client, "list_agents", { limit: 0 }), "limit")
        yield* ok(client, "list_agents")
      })
    )
  })

  describe("auth", () => {
    it.effect("a key without a tool's scope gets a tool error naming the scope; its other tools answer", () =>
      Effect.gen(function* () {
        const { account, orchestrationId } = yield* tenant
        const { key } = yield* TestServer.createKey(account, ["read"])
        const client = yield* connect(key)
        const refused = yield* toolError(client, "run_orchestration", { orchestrationId, input: "hi" })
        assert.include(refused, `lacks the "execute" scope`)
        assert.include(yield* toolError(client, "list_teams"), `lacks the "teams" scope`)
        const orchestrations = yield* ok(client, "list_orchestrations")
        assert.strictEqual(orchestrations.data.length, 1)
        // Nothing was started.
        const executions = yield* (yield* TestServer.apiClient(key)).v1Executions.list({ query: {} }).pipe(Effect.orDie)
        assert.strictEqual(executions.total, 0)
      })
    )

    it.effect("every request of a session is checked: a key revoked mid-session is refused at once", () =>
      Effect.gen(function* () {
        const account = yield* TestServer.signUp()
        const { id, key } = yield* TestServer.createKey(account)
        const client = yield* connect(key)
        yield* ok(client, "list_agents")
        const revoked = yield* (yield* TestClient).request("DELETE", `/api/keys/${id}`, {
          headers: TestServer.bearer(account.token)
        })
        assert.isBelow(revoked.status, 300, revoked.text)
        const after = yield* Effect.promise(() =>
          client.callTool({ name: "list_agents", arguments: {} }).then(
            () => "answered",
            (error: unknown) => String(error)
          )
        )
        assert.include(after, "401")
      })
    )

    it.effect("a missing or invalid key is refused with 401 before any MCP message", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const initialize = {
          jsonrpc: "2.0",
          id: 1,
          method: "initialize",
          params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "t", version: "1" } }
        }
        const headers = { "content-type": "application/json", accept: "application/json, text/event-stream" }
        const missing = yield* client.request("POST", "/mcp", { headers, body: initialize })
        assert.strictEqual(missing.status, 401, missing.text)
        assert.strictEqual(missing.body.detail, "Missing API key")
        assert.strictEqual(missing.headers.get("content-type"), "application/problem+json")
        assert.include(missing.headers.get("www-authenticate") ?? "", "Bearer")
        const invalid = yield* client.request("POST", "/mcp", {
          headers: { ...headers, authorization: "Bearer ak_not-a-real-key" },
          body: initialize
        })
        assert.strictEqual(invalid.status, 401, invalid.text)
        assert.strictEqual(invalid.body.detail, "Invalid or revoked API key")
        // The official client sees the refusal too.
        const failed = yield* Effect.exit(Effect.scoped(connect("ak_invalid")))
        assert.strictEqual(failed._tag, "Failure")
      })
    )
  })

  describe("tenants", () => {
    it.effect("another tenant's agents, orchestrations, executions, teams and bases never appear nor answer", () =>
      Effect.gen(function* () {
        const a = yield* tenant
        const { knowledgeId } = yield* seedKnowledge(a.account, {
          name: "Private",
          documents: [{ filename: "secret.txt", text: "The zebra is a secret." }]
        })
        const aClient = yield* connect(a.key)
        const started = yield* ok(aClient, "run_orchestration", { orchestrationId: a.orchestrationId, input: "hi" })
        const run = yield* ok(aClient, "run_team", { teamId: a.teamId, mission: "Plan" })

        const b = yield* TestServer.signUp()
        const { key } = yield* TestServer.createKey(b)
        const client = yield* connect(key)
        assert.deepStrictEqual((yield* ok(client, "list_agents")).data, [])
        assert.deepStrictEqual((yield* ok(client, "list_orchestrations")).data, [])
        assert.deepStrictEqual((yield* ok(client, "list_teams")).data, [])
        assert.include(yield* toolError(client, "ask_agent", { agentId: a.agentId, message: "hi" }), a.agentId)
        assert.include(
          yield* toolError(client, "run_orchestration", { orchestrationId: a.orchestrationId, input: "hi" }),
          a.orchestrationId
        )
        assert.include(yield* toolError(client, "get_execution", { executionId: started.executionId }), "No execution")
        yield* toolError(client, "run_team", { teamId: a.teamId, mission: "Plan" })
        yield* toolError(client, "get_team_run", { teamId: a.teamId, runId: run.runId })
        assert.include(
          yield* toolError(client, "search_knowledge", { base: knowledgeId, query: "zebra" }),
          "No knowledge base"
        )
      })
    )
  })
})

layer(TestServer.layer({ freeDailyLimit: 3 }), { excludeTestServices: true })(
  "the MCP server under the plan's daily limit",
  (it) => {
    it.effect("each tool call counts as a key request (refusals and the protocol's own messages do not)", () =>
      Effect.gen(function* () {
        const account = yield* TestServer.signUp()
        const { key } = yield* TestServer.createKey(account, ["read"])
        const client = yield* connect(key)
        yield* Effect.promise(() => client.listTools())
        // Refused for its scope: not counted.
        yield* toolError(client, "run_orchestration", { orchestrationId: "x", input: "hi" })
        yield* ok(client, "list_agents")
        yield* ok(client, "list_orchestrations")
        // The REST key routes share the count: this is the third request of three.
        const rest = yield* (yield* TestClient).request("GET", "/api/v1/agents", { headers: TestServer.bearer(key) })
        assert.strictEqual(rest.status, 200, rest.text)
        const refused = yield* toolError(client, "list_agents")
        assert.include(refused, "3")
        const past = yield* (yield* TestClient).request("GET", "/api/v1/agents", { headers: TestServer.bearer(key) })
        assert.strictEqual(past.status, 429, past.text)
      })
    )
  }
)
