import { assert, describe, layer } from "@effect/vitest"
import { Duration, Effect, Option, Redacted } from "effect"
import * as Crypto from "node:crypto"
import { Webhook } from "standardwebhooks"
import { TenantId } from "../../src/Domain/Ids.ts"
import { Webhooks } from "../../src/Webhooks/Webhooks.ts"
import { eventually } from "../support/Eventually.ts"
import { FakeOpenAi, openaiKey } from "../support/FakeOpenAi.ts"
import * as FakeReceiver from "../support/FakeReceiver.ts"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"
import { lookupTool } from "../support/Tools.ts"

// A call whose arguments the tool would refuse is not put to a person
// (docs/approvals.md#where-it-applies): it fails at once as
// `invalid_arguments`, and the run goes on. The model is the fake OpenAI,
// the tool's target and the orchestration's webhook receivers, all on
// loopback.

const withFake = TestServer.layerWithFakeOpenAi(openaiKey, {
  webhookAllowPrivate: true,
  webhookRetrySchedule: [Duration.millis(100), Duration.millis(200)],
  webhookTimeout: Duration.millis(1_000),
  webhookSecretKey: Option.some(Redacted.make(Crypto.randomBytes(32).toString("base64")))
})

/** A tenant with `lookup_order` at `target` needing approval always, in a one-step orchestration hooked to `hook`. */
const setUp = (target: FakeReceiver.FakeReceiver, hook: FakeReceiver.FakeReceiver) =>
  Effect.gen(function* () {
    const client = yield* TestClient
    const webhooks = yield* Webhooks
    const account = yield* TestServer.signUp()
    const session = TestServer.bearer(account.token)
    const { key } = yield* TestServer.createKey(account, ["execute", "read", "approvals"])
    const tool = yield* client.request("POST", "/api/tools", {
      headers: session,
      body: { ...lookupTool(target.url("/orders/{{args.id}}")), policy: { approval: "always" } }
    })
    assert.strictEqual(tool.status, 201, tool.text)
    const looker = yield* TestServer.createAgent(account, { model: "openai/gpt-4o-mini", toolIds: [tool.body.id] })
    const created = yield* client.request("POST", "/api/orchestrations", {
      headers: session,
      body: { name: "Look", steps: [{ id: "look", agentId: looker.id, prompt: "Look up {{input}}" }] }
    })
    assert.strictEqual(created.status, 201, created.text)
    const orchestrationId = created.body.id as string
    const configured = yield* webhooks.configure(
      TenantId.make(account.tenantId),
      { kind: "orchestration", id: orchestrationId },
      { url: hook.url() },
      ["payload", "outputWebhookUrl"]
    )
    const auth = { headers: TestServer.bearer(key) }
    const execute = (input: string) =>
      Effect.map(
        client.request("POST", `/api/v1/orchestrations/${orchestrationId}/execute`, { ...auth, body: { input } }),
        (response) => {
          assert.strictEqual(response.status, 202, response.text)
          return response.body.executionId as string
        }
      )
    // Every status seen while polling, so that a `waiting` on the way is caught.
    const seen = new Set<string>()
    const untilStatus = (id: string, statuses: ReadonlyArray<string>) =>
      eventually(
        Effect.map(client.request("GET", `/api/v1/executions/${id}`, auth), (response) => {
          seen.add(response.body.status)
          assert.include(statuses, response.body.status, response.text)
          return response.body
        }),
        { timeoutMs: 20_000 }
      )
    const approvals = (runId: string) =>
      Effect.map(client.request("GET", `/api/v1/approvals?runId=${runId}`, auth), (response) => {
        assert.strictEqual(response.status, 200, response.text)
        return response.body.data as Array<{ id: string; callId: string; status: string }>
      })
    const toolCalls = (id: string) =>
      Effect.map(client.request("GET", `/api/v1/executions/${id}/tool-calls`, auth), (response) => {
        assert.strictEqual(response.status, 200, response.text)
        return response.body.data as Array<{ callId: string; status: string; errorKind: string | null }>
      })
    const decide = (id: string, body: Record<string, unknown>) =>
      client.request("POST", `/api/v1/approvals/${id}/decision`, { ...auth, body })
    const hookTypes = () => {
      const verifier = new Webhook(configured.signingSecret!)
      return hook.requests.map((request) => (verifier.verify(request.body, request.headers) as { type: string }).type)
    }
    return { execute, untilStatus, seen, approvals, toolCalls, decide, hookTypes }
  })

const toolMessages = (body: any) =>
  (body.messages as Array<{ role: string; tool_call_id?: string; content: string }>).filter(
    (message) => message.role === "tool"
  )

layer(withFake, { excludeTestServices: true })("approvals and invalid arguments", (it) => {
  describe("a call that needs approval", () => {
    it.effect("with arguments that do not match or do not parse: no approval, it fails at once, the run goes on", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const fake = yield* FakeOpenAi
          fake.reset()
          fake.script(
            {
              toolCalls: [
                // `id` is required and `order` not allowed; then arguments that are not JSON.
                { id: "call_missing", name: "lookup_order", arguments: { order: 1 } },
                { id: "call_broken", name: "lookup_order", arguments: '{"id": ' }
              ]
            },
            { text: "I could not look it up." }
          )
          const target = yield* FakeReceiver.make
          const hook = yield* FakeReceiver.make
          const run = yield* setUp(target, hook)
          const executionId = yield* run.execute("A-1")
          const done = yield* run.untilStatus(executionId, ["completed", "failed"])
          assert.strictEqual(done.status, "completed", JSON.stringify(done))
          assert.strictEqual(done.output, "I could not look it up.")
          assert.isFalse(run.seen.has("waiting"), [...run.seen].join(","))
          assert.deepStrictEqual(yield* run.approvals(executionId), [])
          assert.strictEqual(target.requests.length, 0)

          const calls = yield* run.toolCalls(executionId)
          assert.deepStrictEqual(
            calls.map((call) => [call.callId, call.status, call.errorKind]),
            [
              ["call_missing", "failed", "invalid_arguments"],
              ["call_broken", "failed", "invalid_arguments"]
            ]
          )
          // The model's next request carries each call's error, as the invoker words it.
          assert.strictEqual(fake.requests.length, 2)
          const told = toolMessages(fake.requests[1]!.body)
          assert.deepStrictEqual(
            told.map((message) => message.tool_call_id),
            ["call_missing", "call_broken"]
          )
          assert.include(told[0]!.content, "Invalid arguments for lookup_order")
          assert.include(told[0]!.content, "required property 'id'")
          assert.include(told[1]!.content, "The arguments are not valid JSON")

          // The webhook hears of the end, and never of an approval.
          yield* eventually(
            Effect.sync(() => assert.deepStrictEqual(run.hookTypes(), ["execution.completed"])),
            { timeoutMs: 15_000 }
          )
        })
      )
    )

    it.effect("in a turn with a valid call: only the valid one waits for a person, then both are made", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const fake = yield* FakeOpenAi
          fake.reset()
          fake.script(
            {
              toolCalls: [
                { id: "call_valid", name: "lookup_order", arguments: { id: "B-2" } },
                { id: "call_wrong", name: "lookup_order", arguments: { id: 7 } }
              ]
            },
            { text: "B-2 is shipped." }
          )
          const target = yield* FakeReceiver.make
          target.script({ body: JSON.stringify({ id: "B-2", status: "shipped" }) })
          const hook = yield* FakeReceiver.make
          const run = yield* setUp(target, hook)
          const executionId = yield* run.execute("B-2")
          yield* run.untilStatus(executionId, ["waiting"])
          const pending = yield* run.approvals(executionId)
          assert.deepStrictEqual(
            pending.map((approval) => [approval.callId, approval.status]),
            [["call_valid", "pending"]]
          )
          assert.strictEqual(target.requests.length, 0, "nothing is made before the decision")
          assert.strictEqual(fake.requests.length, 1)

          const decided = yield* run.decide(pending[0]!.id, { decision: "approve" })
          assert.strictEqual(decided.status, 200, decided.text)
          const done = yield* run.untilStatus(executionId, ["completed", "failed"])
          assert.strictEqual(done.status, "completed", JSON.stringify(done))
          assert.strictEqual(done.output, "B-2 is shipped.")
          assert.deepStrictEqual(
            target.requests.map((request) => request.path),
            ["/orders/B-2"]
          )
          const calls = yield* run.toolCalls(executionId)
          assert.deepStrictEqual(
            calls.map((call) => [call.callId, call.status, call.errorKind]),
            [
              ["call_valid", "succeeded", null],
              ["call_wrong", "failed", "invalid_arguments"]
            ]
          )
          const told = toolMessages(fake.requests.at(-1)!.body)
          assert.include(told.find((message) => message.tool_call_id === "call_wrong")!.content, "arguments.id")
          yield* eventually(
            Effect.sync(() =>
              assert.deepStrictEqual(run.hookTypes(), ["approval.requested", "approval.decided", "execution.completed"])
            ),
            { timeoutMs: 15_000 }
          )
        })
      )
    )
  })
})
