import { assert, describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import * as FakeMcpServer from "../support/FakeMcpServer.ts"
import * as FakeReceiver from "../support/FakeReceiver.ts"
import * as TestServer from "../support/TestServer.ts"
import { type Account, TestClient } from "../support/TestServer.ts"

// `mcp` tools (docs/mcp-client.md): an MCP server's tools, listed when the
// tool is saved, each one tool of the model; calls made on the built-in
// local model (its tool rule: docs/tools.md) against a fake MCP server built
// with the official SDK on loopback.

const session = (account: Account) => ({ headers: TestServer.bearer(account.token) })

const mcpTool = (url: string, settings: Record<string, unknown> = {}) => ({
  name: "shop",
  description: "The shop's MCP server.",
  parameters: { type: "object" },
  settings: { kind: "mcp", url, allowedHosts: ["127.0.0.1"], ...settings }
})

const createTool = (account: Account, body: unknown) =>
  Effect.flatMap(TestClient, (client) => client.request("POST", "/api/tools", { ...session(account), body }))

interface ServerTool {
  readonly name: string
  readonly description: string
  readonly inputSchema: Record<string, unknown>
  readonly exposedAs: string | null
}

const exposed = (tool: { readonly settings: { readonly serverTools: ReadonlyArray<ServerTool> } }) =>
  tool.settings.serverTools.map((one) => [one.name, one.exposedAs])

/** A tenant with the mcp tool `shop`, a local agent given it, and a one-step orchestration prompting `prompt`. */
const setUp = (url: string, prompt: string) =>
  Effect.gen(function* () {
    const client = yield* TestClient
    const account = yield* TestServer.signUp()
    const { key } = yield* TestServer.createKey(account, ["execute", "read"])
    const tool = yield* createTool(account, mcpTool(url))
    assert.strictEqual(tool.status, 201, tool.text)
    const agent = yield* TestServer.createAgent(account, { model: "local", toolIds: [tool.body.id] })
    const orchestration = yield* client.request("POST", "/api/orchestrations", {
      ...session(account),
      body: { name: "MCP", steps: [{ id: "s", agentId: agent.id, prompt }] }
    })
    assert.strictEqual(orchestration.status, 201, orchestration.text)
    return { account, key, toolId: tool.body.id as string, orchestrationId: orchestration.body.id as string }
  })

const execute = (key: string, orchestrationId: string, input: string) =>
  Effect.gen(function* () {
    const client = yield* TestClient
    const started = yield* client.request("POST", `/api/v1/orchestrations/${orchestrationId}/execute`, {
      headers: TestServer.bearer(key),
      body: { input }
    })
    assert.strictEqual(started.status, 202, started.text)
    const id = started.body.executionId as string
    return yield* TestServer.waitFor(
      "the execution to finish",
      Effect.map(client.request("GET", `/api/v1/executions/${id}`, { headers: TestServer.bearer(key) }), (reply) =>
        reply.body.status === "completed" || reply.body.status === "failed" ? { id, ...reply.body } : undefined
      )
    )
  })

const toolCalls = (key: string, executionId: string) =>
  Effect.gen(function* () {
    const client = yield* TestClient
    const listed = yield* client.request("GET", `/api/v1/executions/${executionId}/tool-calls`, {
      headers: TestServer.bearer(key)
    })
    assert.strictEqual(listed.status, 200, listed.text)
    return listed.body.data as Array<Record<string, unknown>>
  })

/** A loopback port nothing listens on: one bound, then closed. */
const closedPort = Effect.promise(
  () =>
    new Promise<number>((resolve) => {
      const server = Http.createServer()
      server.listen(0, "127.0.0.1", () => {
        const { port } = server.address() as AddressInfo
        server.close(() => resolve(port))
      })
    })
)

layer(TestServer.layer({ webhookAllowPrivate: true }), { excludeTestServices: true })("mcp tools", (it) => {
  describe("saving", () => {
    it.effect("an mcp tool lists its server's tools when created, each exposed under a prefixed name", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const fake = yield* FakeMcpServer.make
          const account = yield* TestServer.signUp()
          const created = yield* createTool(account, mcpTool(fake.url, { tools: ["echo", "mixed"] }))
          assert.strictEqual(created.status, 201, created.text)
          assert.strictEqual(created.body.kind, "mcp")
          assert.deepStrictEqual(exposed(created.body), [
            ["echo", "shop__echo"],
            ["fail", null],
            ["mixed", "shop__mixed"]
          ])
          const echo = (created.body.settings.serverTools as Array<ServerTool>).find((one) => one.name === "echo")!
          assert.strictEqual(echo.description, "Echoes the text it is given.")
          assert.deepInclude(echo.inputSchema, { type: "object" })
          assert.deepStrictEqual(Object.keys(echo.inputSchema.properties as object), ["text"])
          // The session's handshake, then the listing.
          assert.deepStrictEqual(fake.methods().slice(0, 3), ["initialize", "notifications/initialized", "tools/list"])
          const read = yield* TestClient.use((client) =>
            client.request("GET", `/api/tools/${created.body.id}`, session(account))
          )
          assert.deepStrictEqual(read.body.settings, created.body.settings)
        })
      )
    )

    it.effect("a server that lists its tools a page at a time: every page is read", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const fake = yield* FakeMcpServer.makeWith({ pageSize: 2 })
          const account = yield* TestServer.signUp()
          const created = yield* createTool(account, mcpTool(fake.url))
          assert.strictEqual(created.status, 201, created.text)
          assert.deepStrictEqual(exposed(created.body), [
            ["echo", "shop__echo"],
            ["fail", "shop__fail"],
            ["mixed", "shop__mixed"]
          ])
          assert.strictEqual(fake.methods().filter((method) => method === "tools/list").length, 2)
        })
      )
    )

    it.effect("a name of `tools` the server lacks is a 400 naming it", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const fake = yield* FakeMcpServer.make
          const account = yield* TestServer.signUp()
          const refused = yield* createTool(account, mcpTool(fake.url, { tools: ["echo", "nope"] }))
          assert.strictEqual(refused.status, 400, refused.text)
          assert.deepStrictEqual(refused.body.errors[0].path, ["payload", "settings", "tools", 1])
          assert.match(refused.body.errors[0].message, /nope/)
        })
      )
    )

    it.effect("refresh lists the server's tools again: a tool added since appears", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const fake = yield* FakeMcpServer.make
          const account = yield* TestServer.signUp()
          const created = yield* createTool(account, mcpTool(fake.url))
          assert.strictEqual(created.status, 201, created.text)
          assert.notInclude(
            exposed(created.body).map(([name]) => name),
            "later"
          )
          fake.addTool("later", "added later")
          const refreshed = yield* TestClient.use((client) =>
            client.request("POST", `/api/tools/${created.body.id}/refresh`, session(account))
          )
          assert.strictEqual(refreshed.status, 200, refreshed.text)
          assert.deepStrictEqual(exposed(refreshed.body), [
            ["echo", "shop__echo"],
            ["fail", "shop__fail"],
            ["mixed", "shop__mixed"],
            ["later", "shop__later"]
          ])
          const read = yield* TestClient.use((client) =>
            client.request("GET", `/api/tools/${created.body.id}`, session(account))
          )
          assert.deepStrictEqual(read.body.settings.serverTools, refreshed.body.settings.serverTools)
        })
      )
    )

    it.effect("refreshing a tool of another kind is a 400", () =>
      Effect.gen(function* () {
        const account = yield* TestServer.signUp()
        const agent = yield* TestServer.createAgent(account, {})
        const created = yield* createTool(account, {
          name: "ask",
          description: "Asks another agent.",
          parameters: { type: "object", properties: { message: { type: "string" } }, required: ["message"] },
          settings: { kind: "agent", agentId: agent.id }
        })
        assert.strictEqual(created.status, 201, created.text)
        const refused = yield* TestClient.use((client) =>
          client.request("POST", `/api/tools/${created.body.id}/refresh`, session(account))
        )
        assert.strictEqual(refused.status, 400, refused.text)
      })
    )

    it.effect("a url the egress guard refuses is a 400 naming settings.url, and nothing is sent", () =>
      Effect.gen(function* () {
        const account = yield* TestServer.signUp()
        const refused = yield* createTool(account, {
          ...mcpTool("http://169.254.169.254/mcp"),
          settings: { kind: "mcp", url: "http://169.254.169.254/mcp", allowedHosts: ["169.254.169.254"] }
        })
        assert.strictEqual(refused.status, 400, refused.text)
        assert.deepStrictEqual(refused.body.errors[0].path, ["payload", "settings", "url"])
        assert.match(refused.body.errors[0].message, /metadata|169\.254/)
        const ownHeader = yield* createTool(
          account,
          mcpTool("http://127.0.0.1:1/mcp", { headers: { "Mcp-Session-Id": "x" } })
        )
        assert.strictEqual(ownHeader.status, 400, ownHeader.text)
        assert.deepStrictEqual(ownHeader.body.errors[0].path, ["payload", "settings", "headers", "Mcp-Session-Id"])
        const otherHost = yield* createTool(
          account,
          mcpTool("http://127.0.0.1:1/mcp", { allowedHosts: ["example.com"] })
        )
        assert.strictEqual(otherHost.status, 400, otherHost.text)
        assert.deepStrictEqual(otherHost.body.errors[0].path, ["payload", "settings", "url"])
      })
    )

    it.effect("a server that cannot be reached, or is not an MCP server, is a 400 naming its failure", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const account = yield* TestServer.signUp()
          const port = yield* closedPort
          const unreachable = yield* createTool(account, mcpTool(`http://127.0.0.1:${port}/mcp`))
          assert.strictEqual(unreachable.status, 400, unreachable.text)
          assert.deepStrictEqual(unreachable.body.errors[0].path, ["payload", "settings", "url"])
          assert.match(unreachable.body.errors[0].message, /could not be listed: Connection .* failed/)

          const receiver = yield* FakeReceiver.make
          receiver.script({ body: "<html>hello</html>" })
          const notMcp = yield* createTool(account, mcpTool(receiver.url("/mcp")))
          assert.strictEqual(notMcp.status, 400, notMcp.text)
          assert.match(notMcp.body.errors[0].message, /no JSON-RPC response/)
        })
      )
    )

    it.effect("another tenant's mcp tool is a 404 and cannot be given to an agent", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const fake = yield* FakeMcpServer.make
          const owner = yield* TestServer.signUp()
          const created = yield* createTool(owner, mcpTool(fake.url))
          assert.strictEqual(created.status, 201, created.text)
          const other = yield* TestServer.signUp()
          const client = yield* TestClient
          const read = yield* client.request("GET", `/api/tools/${created.body.id}`, session(other))
          assert.strictEqual(read.status, 404, read.text)
          const refreshed = yield* client.request("POST", `/api/tools/${created.body.id}/refresh`, session(other))
          assert.strictEqual(refreshed.status, 404, refreshed.text)
          const agent = yield* client.request("POST", "/api/agents", {
            ...session(other),
            body: { name: "Thief", instructions: "x", model: "local", toolIds: [created.body.id] }
          })
          assert.strictEqual(agent.status, 400, agent.text)
        })
      )
    )
  })

  describe("calls", () => {
    it.effect(
      "the model calls a server tool: the call is recorded with the run's idempotency key, the model answers from it",
      () =>
        Effect.scoped(
          Effect.gen(function* () {
            const fake = yield* FakeMcpServer.make
            const { key, orchestrationId } = yield* setUp(fake.url, 'call shop__echo {"text": "{{input}}"}')
            const execution = yield* execute(key, orchestrationId, "hello")
            assert.strictEqual(execution.status, "completed", JSON.stringify(execution))
            assert.include(execution.output, 'shop__echo answered: "echo: hello"')
            const [call] = yield* toolCalls(key, execution.id)
            assert.deepInclude(call, { tool: "shop__echo", status: "succeeded", result: "echo: hello" })
            const sent = fake.received.filter((one) => one.method === "tools/call")
            assert.strictEqual(sent.length, 1)
            assert.strictEqual(sent[0]!.headers["idempotency-key"], `${execution.id}:s:local_call_1`)
            const metrics = (yield* TestClient.use((client) => client.request("GET", "/metrics"))).text
            assert.match(metrics, /^tool_calls_total\{kind="mcp",outcome="ok"\} [1-9]/m)
          })
        )
    )

    it.effect(
      "the test route calls a server tool by name, with the headers' secrets sent and masked in the exchange",
      () =>
        Effect.scoped(
          Effect.gen(function* () {
            const fake = yield* FakeMcpServer.make
            const client = yield* TestClient
            const account = yield* TestServer.signUp()
            const secret = yield* client.request("POST", "/api/secrets", {
              ...session(account),
              body: { name: "MCP_TOKEN", value: "mcp-secret-value-123" }
            })
            assert.strictEqual(secret.status, 201, secret.text)
            const created = yield* createTool(
              account,
              mcpTool(fake.url, { headers: { Authorization: "Bearer {{secrets.MCP_TOKEN}}" } })
            )
            assert.strictEqual(created.status, 201, created.text)
            assert.strictEqual(fake.received[0]!.headers.authorization, "Bearer mcp-secret-value-123")
            const tested = yield* client.request("POST", `/api/tools/${created.body.id}/test`, {
              ...session(account),
              body: { arguments: { tool: "echo", arguments: { text: "via test" } } }
            })
            assert.strictEqual(tested.status, 200, tested.text)
            assert.deepInclude(tested.body, { ok: true, output: "echo: via test" })
            const requests = tested.body.exchange.requests as Array<{
              request: { headers: Record<string, string>; body: string }
            }>
            const call = requests.find((one) => one.request.body.includes('"tools/call"'))!
            assert.strictEqual(call.request.headers.authorization, "Bearer [secret MCP_TOKEN]")
            assert.match(call.request.headers["idempotency-key"]!, /^test-[0-9a-f-]+:test$/)
            assert.notInclude(tested.text, "mcp-secret-value-123")
            const unnamed = yield* client.request("POST", `/api/tools/${created.body.id}/test`, {
              ...session(account),
              body: { arguments: {} }
            })
            assert.deepInclude(unnamed.body, { ok: false, errorKind: "invalid_arguments" })
            assert.include(unnamed.body.output, "shop__echo")
          })
        )
    )

    it.effect("isError is a failed call the model reads, not a failed run", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const fake = yield* FakeMcpServer.make
          const { key, orchestrationId } = yield* setUp(fake.url, "call shop__fail {}")
          const execution = yield* execute(key, orchestrationId, "x")
          assert.strictEqual(execution.status, "completed", JSON.stringify(execution))
          assert.include(execution.output, 'shop__fail failed: "the warehouse is closed"')
          const [call] = yield* toolCalls(key, execution.id)
          assert.deepInclude(call, { tool: "shop__fail", status: "failed", error: "the warehouse is closed" })
        })
      )
    )

    it.effect(
      "several content blocks become text: the text, a reference to the image, the resource's uri and text",
      () =>
        Effect.scoped(
          Effect.gen(function* () {
            const fake = yield* FakeMcpServer.make
            const { key, orchestrationId } = yield* setUp(fake.url, "call shop__mixed {}")
            const execution = yield* execute(key, orchestrationId, "x")
            assert.strictEqual(execution.status, "completed", JSON.stringify(execution))
            const [call] = yield* toolCalls(key, execution.id)
            const bytes = Buffer.from(FakeMcpServer.pixel, "base64").length
            assert.strictEqual(
              call!.result,
              `three blocks\n\n[image: image/png, ${bytes} bytes]\n\n[resource: file:///notes.txt]\na note`
            )
          })
        )
    )

    it.effect("a session the server forgot is initialised again and the call goes through", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const fake = yield* FakeMcpServer.make
          const { key, orchestrationId } = yield* setUp(fake.url, 'call shop__echo {"text": "{{input}}"}')
          const first = yield* execute(key, orchestrationId, "one")
          assert.strictEqual(first.status, "completed", JSON.stringify(first))
          const initialised = fake.methods().filter((method) => method === "initialize").length
          fake.forgetSessions()
          const before = fake.received.length
          const second = yield* execute(key, orchestrationId, "two")
          assert.strictEqual(second.status, "completed", JSON.stringify(second))
          assert.include(second.output, 'shop__echo answered: "echo: two"')
          // The old session's call (answered 404), the handshake again, the call again.
          assert.deepStrictEqual(
            fake.received.slice(before).map((one) => one.method),
            ["tools/call", "initialize", "notifications/initialized", "tools/call"]
          )
          assert.strictEqual(fake.methods().filter((method) => method === "initialize").length, initialised + 1)
        })
      )
    )
  })
})
