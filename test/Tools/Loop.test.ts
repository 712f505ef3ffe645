import { assert, describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import * as FakeReceiver from "../support/FakeReceiver.ts"
import * as TestServer from "../support/TestServer.ts"
import { lookupTool } from "../support/Tools.ts"
import { type Account, TestClient } from "../support/TestServer.ts"

// The tool loop in an execution's step, on the built-in local model (its tool
// rule: docs/tools.md), calling an http tool on a loopback receiver.

const session = (account: Account) => ({ headers: TestServer.bearer(account.token) })

/** A tenant with the lookup tool, a local agent given it, and a one-step orchestration prompting `prompt`. */
const setUp = (receiverUrl: string, prompt: string, toolOverrides: Record<string, unknown> = {}) =>
  Effect.gen(function* () {
    const client = yield* TestClient
    const account = yield* TestServer.signUp()
    const { key } = yield* TestServer.createKey(account, ["execute", "read"])
    const tool = yield* client.request("POST", "/api/tools", {
      ...session(account),
      body: { ...lookupTool(receiverUrl), ...toolOverrides }
    })
    assert.strictEqual(tool.status, 201, tool.text)
    const agent = yield* TestServer.createAgent(account, { model: "local", toolIds: [tool.body.id] })
    const orchestration = yield* client.request("POST", "/api/orchestrations", {
      ...session(account),
      body: { name: "Lookup", steps: [{ id: "s", agentId: agent.id, prompt }] }
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

layer(TestServer.layer({ webhookAllowPrivate: true }), { excludeTestServices: true })("the tool loop", (it) => {
  describe("in an execution", () => {
    it.effect("two steps whose model numbers its calls alike send different idempotency keys", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const client = yield* TestClient
          const receiver = yield* FakeReceiver.make
          receiver.script({ body: "{}" }, { body: "{}" })
          const { account, key } = yield* setUp(receiver.url("/orders/{{args.id}}"), "unused")
          const agents = yield* client.request("GET", "/api/agents", session(account))
          const agentId = agents.body.data[0].id as string
          const orchestration = yield* client.request("POST", "/api/orchestrations", {
            ...session(account),
            body: {
              name: "Two lookups",
              steps: [
                { id: "first", agentId, prompt: 'call lookup_order {"id": "A-1"}' },
                { id: "second", agentId, prompt: 'call lookup_order {"id": "A-2"}', dependsOn: ["first"] }
              ]
            }
          })
          assert.strictEqual(orchestration.status, 201, orchestration.text)
          const execution = yield* execute(key, orchestration.body.id, "x")
          assert.strictEqual(execution.status, "completed", JSON.stringify(execution))
          // Each step's loop calls its first call local_call_1: the key tells them apart by the step.
          assert.deepStrictEqual(
            receiver.requests.map((request) => [request.path, request.headers["idempotency-key"]]),
            [
              ["/orders/A-1", `${execution.id}:first:local_call_1`],
              ["/orders/A-2", `${execution.id}:second:local_call_1`]
            ]
          )
        })
      )
    )

    it.effect(
      "the model calls the tool, the receiver is asked once with the run's idempotency key, the model answers from the result",
      () =>
        Effect.scoped(
          Effect.gen(function* () {
            const receiver = yield* FakeReceiver.make
            receiver.script({ body: JSON.stringify({ id: "A-1", status: "shipped" }) })
            const { key, orchestrationId } = yield* setUp(
              receiver.url("/orders/{{args.id}}"),
              'Find it: call lookup_order {"id": "{{input}}"}'
            )
            const execution = yield* execute(key, orchestrationId, "A-1")
            assert.strictEqual(execution.status, "completed", JSON.stringify(execution))
            assert.strictEqual(receiver.requests.length, 1)
            const [request] = receiver.requests
            assert.strictEqual(request!.method, "GET")
            assert.strictEqual(request!.path, "/orders/A-1")
            assert.strictEqual(request!.headers["idempotency-key"], `${execution.id}:s:local_call_1`)
            assert.include(execution.output, "lookup_order answered:")
            assert.include(execution.output, "shipped")
            // Counted by kind and outcome, with its duration.
            const metrics = (yield* TestClient.use((client) => client.request("GET", "/metrics"))).text
            assert.match(metrics, /^tool_calls_total\{kind="http",outcome="ok"\} [1-9]/m)
            assert.match(metrics, /^tool_call_duration_seconds_count\{kind="http",outcome="ok"\} [1-9]/m)
          })
        )
    )

    it.effect(
      "the calls are listed on the execution, a long result is cut for the model and kept whole, and the events stream them",
      () =>
        Effect.scoped(
          Effect.gen(function* () {
            const client = yield* TestClient
            const receiver = yield* FakeReceiver.make
            const long = `"${"é".repeat(1_500)}"`
            receiver.script({ body: long })
            const { key, orchestrationId } = yield* setUp(
              receiver.url("/orders/{{args.id}}"),
              'call lookup_order {"id": "{{input}}"}',
              { policy: { maxOutputBytes: 1_024 } }
            )
            const execution = yield* execute(key, orchestrationId, "B-7")
            assert.strictEqual(execution.status, "completed", JSON.stringify(execution))

            const listed = yield* client.request("GET", `/api/v1/executions/${execution.id}/tool-calls`, {
              headers: TestServer.bearer(key)
            })
            assert.strictEqual(listed.status, 200, listed.text)
            const [call] = listed.body.data
            assert.strictEqual(listed.body.data.length, 1)
            assert.deepInclude(call, {
              callId: "local_call_1",
              tool: "lookup_order",
              arguments: { id: "B-7" },
              status: "succeeded",
              resultCut: true,
              error: null,
              attempts: 1,
              scope: "s",
              turn: 0
            })
            // What the model saw: at most 1,024 bytes of the result, whole characters, then the marker.
            const [seen, marker] = (call.result as string).split("\n[cut: ")
            assert.isAtMost(Buffer.byteLength(seen!), 1_024)
            assert.match(marker!, /^the first \d+ of \d+ bytes\]$/)
            assert.notInclude(seen!, "\uFFFD")

            const one = yield* client.request(
              "GET",
              `/api/v1/executions/${execution.id}/steps/s/tool-calls/local_call_1`,
              { headers: TestServer.bearer(key) }
            )
            assert.strictEqual(one.status, 200, one.text)
            assert.include(one.body.fullResult, long.slice(1, -1))
            assert.isAbove(Buffer.byteLength(one.body.fullResult), 3_000)
            const missing = yield* client.request(
              "GET",
              `/api/v1/executions/${execution.id}/steps/s/tool-calls/local_call_9`,
              { headers: TestServer.bearer(key) }
            )
            assert.strictEqual(missing.status, 404)

            const stream = yield* client.request("GET", `/api/v1/executions/${execution.id}/events`, {
              headers: TestServer.bearer(key)
            })
            const events = [...stream.text.matchAll(/^event: (.+)$/gm)].map((match) => match[1])
            assert.deepStrictEqual(events, [
              "execution.running",
              "step.started",
              "tool.called",
              "tool.succeeded",
              "step.completed",
              "execution.completed"
            ])
          })
        )
    )

    it.effect("another tenant sees none of an execution's tool calls", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const client = yield* TestClient
          const receiver = yield* FakeReceiver.make
          const { key, orchestrationId } = yield* setUp(
            receiver.url("/orders/{{args.id}}"),
            'call lookup_order {"id": "x"}'
          )
          const execution = yield* execute(key, orchestrationId, "C")
          const other = yield* TestServer.signUp()
          const otherKey = yield* TestServer.createKey(other, ["execute", "read"])
          for (const path of [
            `/api/v1/executions/${execution.id}/tool-calls`,
            `/api/v1/executions/${execution.id}/steps/s/tool-calls/local_call_1`
          ]) {
            const reply = yield* client.request("GET", path, { headers: TestServer.bearer(otherKey.key) })
            assert.strictEqual(reply.status, 404, path)
            assert.notInclude(reply.text, "lookup_order")
          }
        })
      )
    )

    it.effect(
      "a step narrows its agent's tools: to none, nothing is offered; a tool the agent lacks is refused when saved",
      () =>
        Effect.scoped(
          Effect.gen(function* () {
            const client = yield* TestClient
            const receiver = yield* FakeReceiver.make
            const { account, key, orchestrationId, toolId } = yield* setUp(
              receiver.url("/orders/{{args.id}}"),
              'call lookup_order {"id": "N-1"}'
            )
            const orchestration = yield* client.request(
              "GET",
              `/api/orchestrations/${orchestrationId}`,
              session(account)
            )
            const step = orchestration.body.steps[0]
            const narrowed = yield* client.request("PUT", `/api/orchestrations/${orchestrationId}`, {
              ...session(account),
              body: { steps: [{ ...step, toolIds: [] }] }
            })
            assert.strictEqual(narrowed.status, 200, narrowed.text)
            const execution = yield* execute(key, orchestrationId, "N-1")
            assert.strictEqual(execution.status, "completed", JSON.stringify(execution))
            assert.strictEqual(receiver.requests.length, 0)
            assert.notInclude(execution.output, "lookup_order answered")

            const other = yield* client.request("POST", "/api/tools", {
              ...session(account),
              body: { ...lookupTool(receiver.url("/x/{{args.id}}")), name: "not_given" }
            })
            assert.strictEqual(other.status, 201, other.text)
            const refused = yield* client.request("PUT", `/api/orchestrations/${orchestrationId}`, {
              ...session(account),
              body: { steps: [{ ...step, toolIds: [toolId, other.body.id] }] }
            })
            assert.strictEqual(refused.status, 400, refused.text)
            assert.deepStrictEqual(
              refused.body.errors.map((error: { path: ReadonlyArray<unknown> }) => error.path),
              [["payload", "steps", 0, "toolIds", 1]]
            )
          })
        )
    )

    it.effect("invalid arguments go back to the model, never to the target", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const receiver = yield* FakeReceiver.make
          const { key, orchestrationId } = yield* setUp(
            receiver.url("/orders/{{args.id}}"),
            'call lookup_order {"order": "{{input}}"}'
          )
          const execution = yield* execute(key, orchestrationId, "A-2")
          assert.strictEqual(execution.status, "completed", JSON.stringify(execution))
          assert.strictEqual(receiver.requests.length, 0)
          assert.include(execution.output, "lookup_order failed:")
        })
      )
    )
  })
})
