import { PgClient } from "@effect/sql-pg"
import { assert, describe, layer } from "@effect/vitest"
import { Duration, Effect, Option, Redacted } from "effect"
import * as Crypto from "node:crypto"
import { Webhook } from "standardwebhooks"
import { TenantId } from "../../src/Domain/Ids.ts"
import { Webhooks } from "../../src/Webhooks/Webhooks.ts"
import { eventually } from "../support/Eventually.ts"
import * as FakeReceiver from "../support/FakeReceiver.ts"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"
import { lookupTool } from "../support/Tools.ts"

// Executions whose tool calls wait for a person (docs/approvals.md), through
// the real service: the local model asks for the call, the run waits
// (`waiting`), the decision comes through the API, and the run goes on. The
// tool's target and the orchestration's webhook are receivers on loopback.

const settings = {
  webhookAllowPrivate: true,
  webhookRetrySchedule: [Duration.millis(100), Duration.millis(200)],
  webhookTimeout: Duration.millis(1_000),
  webhookSecretKey: Option.some(Redacted.make(Crypto.randomBytes(32).toString("base64")))
}

interface Scenario {
  readonly policy: Record<string, unknown>
  readonly steps?: "one" | "two"
}

/** A tenant with a key, a tool at `target` under `policy`, an orchestration over it with a webhook at `hook`. */
const setUp = (target: FakeReceiver.FakeReceiver, hook: FakeReceiver.FakeReceiver, scenario: Scenario) =>
  Effect.gen(function* () {
    const client = yield* TestClient
    const webhooks = yield* Webhooks
    const account = yield* TestServer.signUp()
    const session = TestServer.bearer(account.token)
    const { key } = yield* TestServer.createKey(account, ["execute", "read", "approvals"])
    const tool = yield* client.request("POST", "/api/tools", {
      headers: session,
      body: { ...lookupTool(target.url("/orders/{{args.id}}")), policy: scenario.policy }
    })
    assert.strictEqual(tool.status, 201, tool.text)
    const looker = yield* TestServer.createAgent(account, { model: "local", toolIds: [tool.body.id] })
    const steps =
      scenario.steps === "two"
        ? [
            { id: "look", agentId: looker.id, prompt: 'call lookup_order {"id": "{{input}}"}' },
            { id: "tell", agentId: looker.id, prompt: "Tell: {{steps.look.output}}", dependsOn: ["look"] }
          ]
        : [{ id: "look", agentId: looker.id, prompt: 'call lookup_order {"id": "{{input}}"}' }]
    const created = yield* client.request("POST", "/api/orchestrations", {
      headers: session,
      body: { name: "Look", steps }
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
    const execution = (id: string) =>
      Effect.map(client.request("GET", `/api/v1/executions/${id}`, auth), (response) => response.body)
    const untilStatus = (id: string, statuses: ReadonlyArray<string>) =>
      eventually(
        Effect.map(execution(id), (body) => {
          assert.include(statuses, body.status, JSON.stringify(body))
          return body
        }),
        { timeoutMs: 30_000 }
      )
    const pending = (executionId: string) =>
      eventually(
        Effect.map(client.request("GET", `/api/v1/approvals?status=pending&runId=${executionId}`, auth), (response) => {
          assert.strictEqual(response.status, 200, response.text)
          assert.strictEqual(response.body.data.length, 1, response.text)
          return response.body.data[0]
        }),
        { timeoutMs: 30_000 }
      )
    const decide = (id: string, body: Record<string, unknown>) =>
      client.request("POST", `/api/v1/approvals/${id}/decision`, { ...auth, body })
    return {
      auth,
      execute,
      execution,
      untilStatus,
      pending,
      decide,
      verifier: new Webhook(configured.signingSecret!)
    }
  })

/** The webhook events a receiver got, verified, each `{ id, type, data }`. */
const hookEvents = (hook: FakeReceiver.FakeReceiver, verifier: Webhook) =>
  hook.requests.map((request) => ({
    id: request.headers["webhook-id"],
    ...(verifier.verify(request.body, request.headers) as { type: string; data: any })
  }))

/** The types of the execution's own events (its stream), in order. */
const streamTypes = (executionId: string) =>
  Effect.flatMap(PgClient.PgClient, (sql) =>
    Effect.map(
      sql<{ type: string }>`SELECT type FROM execution_events WHERE execution_id = ${executionId} ORDER BY id`,
      (rows) => rows.map((row) => row.type)
    )
  )

layer(TestServer.layer(settings), { excludeTestServices: true })("executions with approvals", (it) => {
  describe("a call that needs approval", () => {
    it.effect("waits (`waiting`), then is made once with the approver's arguments; every event once", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const target = yield* FakeReceiver.make
          target.script({ body: JSON.stringify({ id: "A-2", status: "shipped" }) })
          const hook = yield* FakeReceiver.make
          const run = yield* setUp(target, hook, { policy: { approval: { when: 'id starts_with "A"' } } })
          const executionId = yield* run.execute("A-1")
          const approval = yield* run.pending(executionId)
          assert.deepInclude(approval, {
            runKind: "execution",
            runId: executionId,
            step: "look",
            tool: "lookup_order",
            arguments: { id: "A-1" },
            status: "pending"
          })
          yield* run.untilStatus(executionId, ["waiting"])
          assert.strictEqual(target.requests.length, 0, "nothing is called before the decision")

          const decided = yield* run.decide(approval.id, { decision: "approve", arguments: { id: "A-2" } })
          assert.strictEqual(decided.status, 200, decided.text)
          const done = yield* run.untilStatus(executionId, ["completed", "failed"])
          assert.strictEqual(done.status, "completed", JSON.stringify(done))
          assert.include(done.output, "shipped")
          assert.deepStrictEqual(
            target.requests.map((request) => request.path),
            ["/orders/A-2"]
          )
          const events = yield* eventually(
            Effect.sync(() => {
              const got = hookEvents(hook, run.verifier)
              assert.deepStrictEqual(
                got.map((event) => event.type),
                ["approval.requested", "approval.decided", "execution.completed"]
              )
              return got
            }),
            { timeoutMs: 15_000 }
          )
          assert.strictEqual(new Set(events.map((event) => event.id)).size, 3, "each event delivered once")
          const types = yield* streamTypes(executionId)
          assert.includeMembers(types, ["approval.requested", "approval.decided", "tool.called", "tool.succeeded"])
          assert.strictEqual(types.filter((type) => type === "approval.requested").length, 1)
          assert.strictEqual(types.filter((type) => type === "tool.called").length, 1)
        })
      )
    )

    it.effect("a rejection is a tool error the model reads, with the note, and the call is never made", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const target = yield* FakeReceiver.make
          const hook = yield* FakeReceiver.make
          const run = yield* setUp(target, hook, { policy: { approval: "always" } })
          const executionId = yield* run.execute("B-7")
          const approval = yield* run.pending(executionId)
          const decided = yield* run.decide(approval.id, { decision: "reject", note: "use the archive instead" })
          assert.strictEqual(decided.status, 200, decided.text)
          const done = yield* run.untilStatus(executionId, ["completed", "failed"])
          assert.strictEqual(done.status, "completed", JSON.stringify(done))
          assert.include(done.output, "lookup_order failed")
          assert.include(done.output, "use the archive instead")
          assert.strictEqual(target.requests.length, 0)
        })
      )
    )

    it.effect("cancelling a waiting execution cancels its approval; a decision then is a 409", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const client = yield* TestClient
          const target = yield* FakeReceiver.make
          const hook = yield* FakeReceiver.make
          const run = yield* setUp(target, hook, { policy: { approval: "always" } })
          const executionId = yield* run.execute("E-1")
          const approval = yield* run.pending(executionId)
          yield* run.untilStatus(executionId, ["waiting"])
          const cancelled = yield* client.request("POST", `/api/v1/executions/${executionId}/cancel`, run.auth)
          assert.strictEqual(cancelled.status, 202, cancelled.text)
          yield* run.untilStatus(executionId, ["cancelled"])
          const late = yield* run.decide(approval.id, { decision: "approve" })
          assert.strictEqual(late.status, 409, late.text)
          assert.include(late.body.detail, "its run ended first")
          assert.strictEqual(target.requests.length, 0)
        })
      )
    )

    it.effect("in a run of two steps, the step waits, then both complete", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const target = yield* FakeReceiver.make
          target.script({ body: JSON.stringify({ id: "C-1", status: "packed" }) })
          const hook = yield* FakeReceiver.make
          const run = yield* setUp(target, hook, { policy: { approval: "always" }, steps: "two" })
          const executionId = yield* run.execute("C-1")
          const approval = yield* run.pending(executionId)
          yield* run.untilStatus(executionId, ["waiting"])
          assert.strictEqual((yield* run.decide(approval.id, { decision: "approve" })).status, 200)
          const done = yield* run.untilStatus(executionId, ["completed", "failed"])
          assert.strictEqual(done.status, "completed", JSON.stringify(done))
          assert.include(done.output, "packed")
          assert.strictEqual(target.requests.length, 1)
          const types = yield* streamTypes(executionId)
          assert.strictEqual(types.filter((type) => type === "step.started").length, 2, types.join(","))
        })
      )
    )

    it.effect("nobody decides: `onExpiry: approve` makes the call, `reject` tells the model", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const target = yield* FakeReceiver.make
          target.script({ body: JSON.stringify({ id: "D-1", status: "late" }), times: 5 })
          const hook = yield* FakeReceiver.make
          const approving = yield* setUp(target, hook, {
            policy: { approval: "always", approvalTimeoutMs: 1_000, approvalOnExpiry: "approve" }
          })
          const rejecting = yield* setUp(target, hook, {
            policy: { approval: "always", approvalTimeoutMs: 1_000, approvalOnExpiry: "reject" }
          })
          const approvedId = yield* approving.execute("D-1")
          const rejectedId = yield* rejecting.execute("D-2")
          const approved = yield* approving.untilStatus(approvedId, ["completed", "failed"])
          assert.strictEqual(approved.status, "completed", JSON.stringify(approved))
          assert.include(approved.output, "late")
          const rejected = yield* rejecting.untilStatus(rejectedId, ["completed", "failed"])
          assert.strictEqual(rejected.status, "completed", JSON.stringify(rejected))
          assert.include(rejected.output, "nobody approved this call in time")
          assert.deepStrictEqual(
            target.requests.map((request) => request.path),
            ["/orders/D-1"]
          )
          const client = yield* TestClient
          void client
        })
      )
    )
  })
})
