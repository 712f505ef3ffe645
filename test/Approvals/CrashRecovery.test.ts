import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Crypto from "node:crypto"
import pg from "pg"
import { Webhook } from "standardwebhooks"
import { awaitFinal, request, requestJson, signUpTenant } from "../support/Cluster.ts"
import { eventually } from "../support/Eventually.ts"
import * as FakeReceiver from "../support/FakeReceiver.ts"
import { quietWindow } from "../support/QuietWindow.ts"
import { type ServiceProcess, spawnService, waitReady } from "../support/Process.ts"
import { TestDatabaseUrl } from "../support/TestServer.ts"
import { lookupTool } from "../support/Tools.ts"

// A run waiting for an approval on node A, A killed (-9), the approval
// decided through node B: the run goes on exactly once, the approved call
// made once (seen by the receiver), each webhook event delivered once.

const kill = (service: ServiceProcess) =>
  Effect.promise(async () => {
    service.child.kill("SIGKILL")
    await service.exited
  })

describe("approvals across a kill -9", () => {
  it.live(
    "decided on another node after the waiting node died: the call is made once, every event once",
    () =>
      Effect.gen(function* () {
        const databaseUrl = yield* TestDatabaseUrl
        const target = yield* FakeReceiver.make
        target.script({ body: JSON.stringify({ id: "A-1", status: "shipped" }) })
        const hook = yield* FakeReceiver.make
        const env = {
          DATABASE_URL: databaseUrl,
          WEBHOOK_ALLOW_PRIVATE: "true",
          WEBHOOK_SECRET_KEY: Crypto.randomBytes(32).toString("base64"),
          SHARD_LOCK_EXPIRATION: "2 seconds",
          ENFORCE_DAILY_LIMITS: "false"
        }
        const first = yield* spawnService(env)
        yield* waitReady(first)
        const setup = yield* Effect.promise(async () => {
          const tenant = await signUpTenant(first.baseUrl, "approval-crash@example.com")
          const approver = await requestJson(`${first.baseUrl}/api/keys`, {
            method: "POST",
            headers: tenant.session,
            body: { name: "approver", scopes: ["approvals"] }
          })
          const tool = await requestJson(`${first.baseUrl}/api/tools`, {
            method: "POST",
            headers: tenant.session,
            body: { ...lookupTool(target.url("/orders/{{args.id}}")), policy: { approval: "always" } }
          })
          const agent = await requestJson(`${first.baseUrl}/api/agents`, {
            method: "POST",
            headers: tenant.session,
            body: { name: "Clerk", model: "local", toolIds: [tool.id] }
          })
          const orchestration = await requestJson(`${first.baseUrl}/api/orchestrations`, {
            method: "POST",
            headers: tenant.session,
            body: {
              name: "Lookup",
              steps: [{ id: "s", agentId: agent.id, prompt: 'call lookup_order {"id": "{{input}}"}' }]
            }
          })
          const hooked = await requestJson(`${first.baseUrl}/api/orchestrations/${orchestration.id}`, {
            method: "PUT",
            headers: tenant.session,
            body: { outputWebhookUrl: hook.url() }
          })
          const started = await requestJson(`${first.baseUrl}/api/v1/orchestrations/${orchestration.id}/execute`, {
            method: "POST",
            headers: tenant.bearer,
            body: { input: "A-1" }
          })
          return {
            bearer: tenant.bearer,
            approver: { authorization: `Bearer ${approver.key}` },
            executionId: started.executionId as string,
            verifier: new Webhook(hooked.signingSecret as string)
          }
        })
        const db = new pg.Client({ connectionString: databaseUrl })
        yield* Effect.acquireRelease(
          Effect.promise(() => db.connect()),
          () => Effect.promise(() => db.end())
        )
        // Waiting on A: the approval is written, its event delivered and recorded so, the run shown `waiting`.
        // (A delivery A made but had not recorded when killed is made again by B: at least once, as Standard
        // Webhooks has it, the receiver telling the two apart by `webhook-id`. Here each is to be made once.)
        const approval = yield* Effect.promise(() =>
          eventually(
            async () => {
              const page = await requestJson(
                `${first.baseUrl}/api/v1/approvals?status=pending&runId=${setup.executionId}`,
                { headers: setup.approver }
              )
              assert.strictEqual(page.data.length, 1)
              const execution = await requestJson(`${first.baseUrl}/api/v1/executions/${setup.executionId}`, {
                headers: setup.bearer
              })
              assert.strictEqual(execution.status, "waiting")
              assert.strictEqual(hook.requests.length, 1, "approval.requested delivered")
              const recorded = await db.query(
                "SELECT status FROM webhook_events WHERE subject_id = $1 AND type = 'approval.requested'",
                [setup.executionId]
              )
              assert.deepStrictEqual(
                recorded.rows.map((row) => row.status),
                ["delivered"],
                "approval.requested recorded delivered"
              )
              return page.data[0]
            },
            { timeoutMs: 30_000 }
          )
        )
        yield* kill(first)

        const second = yield* spawnService(env)
        yield* waitReady(second)
        const decided = yield* Effect.promise(() =>
          request(`${second.baseUrl}/api/v1/approvals/${approval.id}/decision`, {
            method: "POST",
            headers: setup.approver,
            body: { decision: "approve", note: "go" }
          })
        )
        assert.strictEqual(decided.status, 200, decided.text)
        const [final] = yield* Effect.promise(() =>
          awaitFinal([second.baseUrl], setup.bearer, [setup.executionId], 90_000)
        )
        assert.strictEqual(final.status, "completed", JSON.stringify(final))
        assert.include(final.output, "shipped")
        assert.deepStrictEqual(
          target.requests.map((received) => [received.path, received.headers["idempotency-key"]]),
          [["/orders/A-1", `${setup.executionId}:s:local_call_1`]]
        )
        const events = yield* Effect.promise(() =>
          eventually(
            () => {
              const got = hook.requests.map((received) => ({
                id: received.headers["webhook-id"],
                ...(setup.verifier.verify(received.body, received.headers) as { type: string })
              }))
              assert.deepStrictEqual(
                got.map((event) => event.type),
                ["approval.requested", "approval.decided", "execution.completed"]
              )
              return got
            },
            { timeoutMs: 30_000 }
          )
        )
        assert.strictEqual(new Set(events.map((event) => event.id)).size, 3)
        const calls = yield* Effect.promise(() =>
          requestJson(`${second.baseUrl}/api/v1/executions/${setup.executionId}/tool-calls`, {
            headers: setup.bearer
          })
        )
        assert.strictEqual(calls.data.length, 1)
        assert.deepInclude(calls.data[0], { status: "succeeded", attempts: 1 })
        // Nothing more arrives once it is over: no second call, no event twice.
        yield* quietWindow(2_000)
        assert.strictEqual(target.requests.length, 1)
        assert.strictEqual(hook.requests.length, 3)
      }),
    180_000
  )
})
