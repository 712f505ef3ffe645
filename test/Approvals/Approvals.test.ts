import { assert, describe, layer } from "@effect/vitest"
import { Duration, Effect, Option, Redacted } from "effect"
import * as Crypto from "node:crypto"
import { Webhook } from "standardwebhooks"
import { Approvals } from "../../src/Approvals/Approvals.ts"
import { tokenFor } from "../../src/Approvals/Wake.ts"
import { ExecutionWorkflow } from "../../src/Orchestrations/ExecutionWorkflow.ts"
import type { ApprovalRequest } from "../../src/Approvals/Repo.ts"
import { newId, TenantId } from "../../src/Domain/Ids.ts"
import { Webhooks } from "../../src/Webhooks/Webhooks.ts"
import { eventually } from "../support/Eventually.ts"
import * as FakeReceiver from "../support/FakeReceiver.ts"
import * as TestServer from "../support/TestServer.ts"
import { type Account, TestClient } from "../support/TestServer.ts"
import { lookupTool } from "../support/Tools.ts"

// Approvals through the API (docs/approvals.md): a tool's approval policy as
// saved, the inbox's routes with a session and with a key of the `approvals`
// scope, decisions (edited arguments checked, the first one only), expiry,
// and the events each writes to the owner's webhook.

const settings = {
  webhookAllowPrivate: true,
  webhookRetrySchedule: [Duration.millis(100), Duration.millis(200)],
  webhookTimeout: Duration.millis(500),
  webhookSecretKey: Option.some(Redacted.make(Crypto.randomBytes(32).toString("base64")))
}

const session = (account: Account) => ({ headers: TestServer.bearer(account.token) })

/** A tenant with a tool that takes `{ id }`, an orchestration owner with a webhook at `receiver`, and its secret. */
const setUp = (receiver: FakeReceiver.FakeReceiver) =>
  Effect.gen(function* () {
    const client = yield* TestClient
    const webhooks = yield* Webhooks
    const account = yield* TestServer.signUp()
    const tool = yield* client.request("POST", "/api/tools", {
      ...session(account),
      body: { ...lookupTool(receiver.url("/orders/{{args.id}}")), policy: { approval: "always" } }
    })
    assert.strictEqual(tool.status, 201, tool.text)
    const owner = { kind: "orchestration" as const, id: newId() }
    const configured = yield* webhooks.configure(TenantId.make(account.tenantId), owner, { url: receiver.url() }, [
      "payload",
      "outputWebhookUrl"
    ])
    const request = (overrides: Partial<ApprovalRequest> = {}): ApprovalRequest => {
      const id = newId()
      return {
        id,
        // A run that is not there: the decision's wake finds nothing to wake.
        wakeToken: tokenFor(ExecutionWorkflow, newId(), id),
        tenantId: TenantId.make(account.tenantId),
        runKind: "execution",
        runId: newId(),
        scope: "look",
        callId: "call_1",
        owner,
        toolId: tool.body.id as string,
        tool: "lookup_order",
        arguments: { id: "A-1" },
        reason: "to find the order",
        timeoutMs: 60_000,
        onExpiry: "reject",
        ...overrides
      }
    }
    return { account, toolId: tool.body.id as string, request, verifier: new Webhook(configured.signingSecret!) }
  })

/** The webhook events the receiver got, verified, as `{ type, data }`. */
const events = (receiver: FakeReceiver.FakeReceiver, verifier: Webhook) =>
  receiver.requests.map((request) => ({
    id: request.headers["webhook-id"],
    ...(verifier.verify(request.body, request.headers) as { type: string; data: any })
  }))

layer(TestServer.layer(settings), { excludeTestServices: true })("approvals", (it) => {
  describe("a tool's approval policy", () => {
    it.effect("is saved as sent, read as `never` when absent, and a bad rule is a 400 naming the field", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const account = yield* TestServer.signUp()
        const base = lookupTool("http://127.0.0.1:1/orders/{{args.id}}")
        const plain = yield* client.request("POST", "/api/tools", { ...session(account), body: base })
        assert.strictEqual(plain.status, 201, plain.text)
        assert.notProperty(plain.body.policy, "approval")
        const ruled = yield* client.request("POST", "/api/tools", {
          ...session(account),
          body: {
            ...base,
            name: "pay",
            policy: {
              approval: { when: 'amount > 100 or url starts_with "https://api.example.com/"' },
              approvalOnExpiry: "approve",
              approvalTimeoutMs: 120_000
            }
          }
        })
        assert.strictEqual(ruled.status, 201, ruled.text)
        assert.deepInclude(ruled.body.policy, {
          approval: { when: 'amount > 100 or url starts_with "https://api.example.com/"' },
          approvalOnExpiry: "approve",
          approvalTimeoutMs: 120_000
        })
        const bad = yield* client.request("POST", "/api/tools", {
          ...session(account),
          body: { ...base, name: "bad", policy: { approval: { when: "amount >" } } }
        })
        assert.strictEqual(bad.status, 400, bad.text)
        assert.strictEqual(bad.headers.get("content-type"), "application/problem+json")
        const errors = bad.body.errors as Array<{ path: Array<string | number>; message: string }>
        assert.isTrue(
          errors.some((error) => error.path.join(".") === "payload.policy.approval.when"),
          JSON.stringify(errors)
        )
        const updated = yield* client.request("PUT", `/api/tools/${plain.body.id}`, {
          ...session(account),
          body: { policy: { approval: { when: "and" } } }
        })
        assert.strictEqual(updated.status, 400, updated.text)
      })
    )
  })

  describe("the inbox and decisions", () => {
    it.effect(
      "a request is listed and read; approving with edited arguments checks them; a second decision is a 409",
      () =>
        Effect.scoped(
          Effect.gen(function* () {
            const client = yield* TestClient
            const approvals = yield* Approvals
            const receiver = yield* FakeReceiver.make
            const { account, request, verifier } = yield* setUp(receiver)
            const asked = yield* approvals.request(request())
            // Asked again (the step run again after a crash): the same approval, no second event.
            const again = yield* approvals.request({ ...request(), runId: asked.approval.runId })
            assert.strictEqual(again.approval.id, asked.approval.id)
            assert.isFalse(again.created)
            const id = asked.approval.id

            const listed = yield* client.request("GET", "/api/approvals?status=pending", session(account))
            assert.strictEqual(listed.status, 200, listed.text)
            assert.deepStrictEqual(
              listed.body.data.map((approval: { id: string }) => approval.id),
              [id]
            )
            assert.deepInclude(listed.body.data[0], {
              runKind: "execution",
              step: "look",
              turn: null,
              callId: "call_1",
              tool: "lookup_order",
              arguments: { id: "A-1" },
              reason: "to find the order",
              status: "pending",
              onExpiry: "reject",
              decidedBy: null
            })
            // Another tenant sees nothing of it.
            const stranger = yield* TestServer.signUp()
            const foreign = yield* client.request("GET", `/api/approvals/${id}`, session(stranger))
            assert.strictEqual(foreign.status, 404, foreign.text)

            // A key needs the `approvals` scope, which a key made without a list lacks.
            const plainKey = yield* TestServer.createKey(account)
            const refused = yield* client.request("GET", "/api/v1/approvals", {
              headers: TestServer.bearer(plainKey.key)
            })
            assert.strictEqual(refused.status, 403, refused.text)
            const key = yield* TestServer.createKey(account, ["approvals"])
            const byKey = yield* client.request("GET", `/api/v1/approvals/${id}`, {
              headers: TestServer.bearer(key.key)
            })
            assert.strictEqual(byKey.status, 200, byKey.text)

            const wrong = yield* client.request("POST", `/api/approvals/${id}/decision`, {
              ...session(account),
              body: { decision: "approve", arguments: { id: 7 } }
            })
            assert.strictEqual(wrong.status, 400, wrong.text)
            assert.deepStrictEqual(
              wrong.body.errors.map((error: { path: Array<string> }) => error.path),
              [["payload", "arguments", "id"]]
            )
            const withReject = yield* client.request("POST", `/api/approvals/${id}/decision`, {
              ...session(account),
              body: { decision: "reject", arguments: { id: "A-2" } }
            })
            assert.strictEqual(withReject.status, 400, withReject.text)

            const approved = yield* client.request("POST", `/api/v1/approvals/${id}/decision`, {
              headers: TestServer.bearer(key.key),
              body: { decision: "approve", arguments: { id: "A-2" }, note: "the other order" }
            })
            assert.strictEqual(approved.status, 200, approved.text)
            assert.deepInclude(approved.body, {
              status: "approved",
              decidedBy: `key:${key.id}`,
              note: "the other order",
              editedArguments: { id: "A-2" }
            })
            const second = yield* client.request("POST", `/api/approvals/${id}/decision`, {
              ...session(account),
              body: { decision: "reject" }
            })
            assert.strictEqual(second.status, 409, second.text)
            assert.strictEqual(second.headers.get("content-type"), "application/problem+json")
            assert.include(second.body.detail, `approved by key:${key.id}`)

            const seen = yield* eventually(
              Effect.sync(() => {
                const got = events(receiver, verifier)
                assert.deepStrictEqual(
                  got.map((event) => event.type),
                  ["approval.requested", "approval.decided"]
                )
                return got
              })
            )
            assert.strictEqual(seen[0]!.data.id, id)
            assert.strictEqual(seen[1]!.data.status, "approved")
            assert.deepStrictEqual(seen[1]!.data.editedArguments, { id: "A-2" })
          })
        )
    )

    it.effect("two decisions at once: one wins, the other is a 409 naming it", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const client = yield* TestClient
          const approvals = yield* Approvals
          const receiver = yield* FakeReceiver.make
          const { account, request } = yield* setUp(receiver)
          for (let round = 0; round < 5; round++) {
            const { approval } = yield* approvals.request(request())
            const [a, b] = yield* Effect.all(
              [
                client.request("POST", `/api/approvals/${approval.id}/decision`, {
                  ...session(account),
                  body: { decision: "approve" }
                }),
                client.request("POST", `/api/approvals/${approval.id}/decision`, {
                  ...session(account),
                  body: { decision: "reject", note: "no" }
                })
              ],
              { concurrency: 2 }
            )
            const statuses = [a.status, b.status].sort()
            assert.deepStrictEqual(statuses, [200, 409], `${a.text} ${b.text}`)
            const winner = a.status === 200 ? a : b
            const loser = a.status === 200 ? b : a
            assert.include(loser.body.detail, `${winner.body.status} by user:${account.userId}`)
            const stored = yield* approvals.get(TenantId.make(account.tenantId), approval.id)
            assert.strictEqual(stored.status, winner.body.status)
          }
        })
      )
    )

    it.effect("expiry: `reject` makes it expired, `approve` approves it; a decision after either is a 409", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const client = yield* TestClient
          const approvals = yield* Approvals
          const receiver = yield* FakeReceiver.make
          const { account, request, verifier } = yield* setUp(receiver)
          const rejecting = (yield* approvals.request(request())).approval
          const approving = (yield* approvals.request(request({ onExpiry: "approve" }))).approval
          assert.strictEqual((yield* approvals.expire(rejecting.id))?.status, "expired")
          const approvedByExpiry = yield* approvals.expire(approving.id)
          assert.strictEqual(approvedByExpiry?.status, "approved")
          assert.strictEqual(approvedByExpiry?.decidedBy, "expiry")
          // Expiring again changes nothing.
          assert.strictEqual((yield* approvals.expire(rejecting.id))?.status, "expired")
          const late = yield* client.request("POST", `/api/approvals/${rejecting.id}/decision`, {
            ...session(account),
            body: { decision: "approve" }
          })
          assert.strictEqual(late.status, 409, late.text)
          assert.include(late.body.detail, "expired")
          yield* eventually(
            Effect.sync(() =>
              assert.deepStrictEqual(
                events(receiver, verifier)
                  .map((event) => event.type)
                  .sort(),
                ["approval.expired", "approval.expired", "approval.requested", "approval.requested"]
              )
            )
          )
        })
      )
    )
  })
})
