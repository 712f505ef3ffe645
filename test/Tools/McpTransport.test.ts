import { assert, describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import * as FakeMcpServer from "../support/FakeMcpServer.ts"
import * as TestServer from "../support/TestServer.ts"
import { type Account, TestClient } from "../support/TestServer.ts"

// The transports of `mcp` tools (docs/mcp.md#transports): an event-stream
// answer read only until it holds the response, and the older HTTP+SSE
// transport for servers that speak only it. Through the real service, on the
// built-in local model, against the official SDK's servers on loopback.

const session = (account: Account) => ({ headers: TestServer.bearer(account.token) })

const mcpTool = (url: string, extra: Record<string, unknown> = {}) => ({
  name: "shop",
  description: "The shop's MCP server.",
  parameters: { type: "object" },
  settings: { kind: "mcp", url, allowedHosts: ["127.0.0.1"] },
  ...extra
})

const createTool = (account: Account, body: unknown) =>
  Effect.flatMap(TestClient, (client) => client.request("POST", "/api/tools", { ...session(account), body }))

const exposed = (tool: { readonly settings: { readonly serverTools: ReadonlyArray<Record<string, unknown>> } }) =>
  tool.settings.serverTools.map((one) => [one.name, one.exposedAs])

/** A tenant with the mcp tool `shop` on `url`, a local agent given it, and a one-step orchestration prompting `prompt`. */
const setUp = (url: string, prompt: string, extra: Record<string, unknown> = {}) =>
  Effect.gen(function* () {
    const client = yield* TestClient
    const account = yield* TestServer.signUp()
    const { key } = yield* TestServer.createKey(account, ["execute", "read", "chat"])
    const tool = yield* createTool(account, mcpTool(url, extra))
    assert.strictEqual(tool.status, 201, tool.text)
    const agent = yield* TestServer.createAgent(account, { model: "local", toolIds: [tool.body.id] })
    const orchestration = yield* client.request("POST", "/api/orchestrations", {
      ...session(account),
      body: { name: "MCP", steps: [{ id: "s", agentId: agent.id, prompt }] }
    })
    assert.strictEqual(orchestration.status, 201, orchestration.text)
    return {
      account,
      key,
      tool: tool.body,
      agentId: agent.id as string,
      orchestrationId: orchestration.body.id as string
    }
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

/** The requests of the older transport's handshake probe: `initialize` POSTed to the url itself (no session). */
const probes = (fake: { readonly received: ReadonlyArray<FakeMcpServer.Received> }) =>
  fake.received.filter((one) => one.method === "initialize" && one.session === undefined).length
const streamsOpened = (fake: { readonly received: ReadonlyArray<FakeMcpServer.Received> }) =>
  fake.received.filter((one) => one.method === "GET").length

layer(TestServer.layer({ webhookAllowPrivate: true }), { excludeTestServices: true })("mcp transports", (it) => {
  describe("the older HTTP+SSE transport", () => {
    it.effect(
      "a server speaking only it: its tools are listed on save, and called in an execution, a chat and the test route",
      () =>
        Effect.scoped(
          Effect.gen(function* () {
            const fake = yield* FakeMcpServer.makeWith({ legacy: true })
            const client = yield* TestClient
            const { account, agentId, key, orchestrationId, tool } = yield* setUp(
              fake.url,
              'call shop__echo {"text": "{{input}}"}'
            )
            assert.deepStrictEqual(exposed(tool), [
              ["echo", "shop__echo"],
              ["fail", "shop__fail"],
              ["mixed", "shop__mixed"]
            ])
            // The POST the server refused (405), its event stream, the handshake and the listing on it.
            assert.deepStrictEqual(fake.methods().slice(0, 5), [
              "initialize",
              "GET",
              "initialize",
              "notifications/initialized",
              "tools/list"
            ])

            const execution = yield* execute(key, orchestrationId, "hello")
            assert.strictEqual(execution.status, "completed", JSON.stringify(execution))
            assert.include(execution.output, 'shop__echo answered: "echo: hello"')
            const [call] = yield* toolCalls(key, execution.id)
            assert.deepInclude(call, { tool: "shop__echo", status: "succeeded", result: "echo: hello" })
            const sent = fake.received.filter((one) => one.method === "tools/call")
            assert.strictEqual(sent.length, 1)
            assert.strictEqual(sent[0]!.headers["idempotency-key"], `${execution.id}:s:local_call_1`)

            // The node remembers the server's transport and keeps its stream: no probe, no new stream.
            const probed = probes(fake)
            const opened = streamsOpened(fake)
            const chat = yield* client.request("POST", `/api/v1/agents/${agentId}/chat`, {
              headers: TestServer.bearer(key),
              body: { message: 'call shop__echo {"text": "from chat"}' }
            })
            assert.strictEqual(chat.status, 200, chat.text)
            assert.include(chat.body.reply, "echo: from chat")
            assert.deepInclude(chat.body.toolCalls[0], { tool: "shop__echo", status: "succeeded" })
            assert.strictEqual(probes(fake), probed)
            assert.strictEqual(streamsOpened(fake), opened)

            // The exchange shows each POST (accepted with 202) with the response that came on the stream.
            const tested = yield* client.request("POST", `/api/tools/${tool.id}/test`, {
              ...session(account),
              body: { arguments: { tool: "echo", arguments: { text: "via test" } } }
            })
            assert.strictEqual(tested.status, 200, tested.text)
            assert.deepInclude(tested.body, { ok: true, output: "echo: via test" })
            const requests = tested.body.exchange.requests as Array<{
              request: { method: string; url: string; body: string }
              response: { status: number; body: string } | null
            }>
            const posted = requests.find((one) => one.request.body.includes('"tools/call"'))!
            assert.match(posted.request.url, /\/messages\?sessionId=/)
            assert.strictEqual(posted.response!.status, 202)
            assert.include(JSON.parse(posted.response!.body).result.content[0].text, "echo: via test")
          })
        )
    )

    it.effect("a stream the server dropped between calls is opened again, and the next call goes through", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const fake = yield* FakeMcpServer.makeWith({ legacy: true })
          const { key, orchestrationId } = yield* setUp(fake.url, 'call shop__echo {"text": "{{input}}"}')
          const first = yield* execute(key, orchestrationId, "one")
          assert.strictEqual(first.status, "completed", JSON.stringify(first))
          assert.isAtLeast(fake.openStreams(), 1)
          const opened = streamsOpened(fake)
          fake.dropStreams()
          assert.strictEqual(fake.openStreams(), 0)

          const second = yield* execute(key, orchestrationId, "two")
          assert.strictEqual(second.status, "completed", JSON.stringify(second))
          assert.include(second.output, 'shop__echo answered: "echo: two"')
          const [call] = yield* toolCalls(key, second.id)
          assert.deepInclude(call, { status: "succeeded", result: "echo: two" })
          // One new stream, on which the handshake was made again.
          assert.strictEqual(streamsOpened(fake), opened + 1)
          assert.strictEqual(fake.openStreams(), 1)
          assert.strictEqual(fake.received.at(-1)!.method, "tools/call")
        })
      )
    )

    it.effect("an endpoint event naming another origin is refused, and nothing is posted to it", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const fake = yield* FakeMcpServer.makeWith({
            legacy: true,
            endpoint: (path) => `http://127.0.0.1:1${path}`
          })
          const account = yield* TestServer.signUp()
          const refused = yield* createTool(account, mcpTool(fake.url))
          assert.strictEqual(refused.status, 400, refused.text)
          assert.deepStrictEqual(refused.body.errors[0].path, ["payload", "settings", "url"])
          assert.match(
            refused.body.errors[0].message,
            /endpoint event names http:\/\/127\.0\.0\.1:1, another origin than the url's \(http:\/\/127\.0\.0\.1:\d+\)/
          )
          assert.deepStrictEqual(fake.methods(), ["initialize", "GET"])
          // The refused stream was closed.
          yield* TestServer.waitFor(
            "the refused stream to close",
            Effect.sync(() => (fake.openStreams() === 0 ? true : undefined)),
            5_000
          )
        })
      )
    )
  })

  describe("event-stream answers", () => {
    it.effect(
      "a call answered over SSE returns once its response came, long before its timeout, while the server keeps the stream open",
      () =>
        Effect.scoped(
          Effect.gen(function* () {
            const fake = yield* FakeMcpServer.makeWith({ slow: true })
            const timeoutMs = 10_000
            const { account, key, orchestrationId, tool } = yield* setUp(fake.url, "call shop__slow {}", {
              policy: { timeoutMs }
            })
            const execution = yield* execute(key, orchestrationId, "x")
            assert.strictEqual(execution.status, "completed", JSON.stringify(execution))
            const [call] = yield* toolCalls(key, execution.id)
            assert.deepInclude(call, { tool: "shop__slow", status: "succeeded", result: "slow: done" })
            const duration = call!.durationMs as number
            assert.isAtLeast(duration, FakeMcpServer.slowNotifications * FakeMcpServer.slowIntervalMs * 0.9)
            assert.isBelow(duration, timeoutMs / 4)
            // The server answered and kept the stream open: the client went away once it had the response.
            yield* TestServer.waitFor(
              "the client to drop the slow stream",
              Effect.sync(() => (fake.slowCalls()[0]?.closedByClient === true ? true : undefined)),
              5_000
            )
            assert.deepStrictEqual(fake.slowCalls(), [{ answered: true, closedByClient: true }])

            // The exchange holds the progress read before the response; the next request, on another connection, goes through.
            const client = yield* TestClient
            const tested = yield* client.request("POST", `/api/tools/${tool.id}/test`, {
              ...session(account),
              body: { arguments: { tool: "slow", arguments: {} } }
            })
            assert.strictEqual(tested.status, 200, tested.text)
            assert.deepInclude(tested.body, { ok: true, output: "slow: done" })
            const requests = tested.body.exchange.requests as Array<{
              request: { body: string }
              response: { status: number; body: string; headers: Record<string, string> } | null
            }>
            const posted = requests.find((one) => one.request.body.includes('"tools/call"'))!
            assert.include(posted.response!.headers["content-type"], "text/event-stream")
            assert.strictEqual(
              posted.response!.body.match(/notifications\/progress/g)?.length,
              FakeMcpServer.slowNotifications
            )
            assert.include(posted.response!.body, "slow: done")
            const echoed = yield* client.request("POST", `/api/tools/${tool.id}/test`, {
              ...session(account),
              body: { arguments: { tool: "echo", arguments: { text: "after" } } }
            })
            assert.deepInclude(echoed.body, { ok: true, output: "echo: after" })
          })
        )
    )
  })
})
