import { PgClient } from "@effect/sql-pg"
import { assert, describe, layer } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"
import { ApprovalDefaults } from "../../src/Approvals/Defaults.ts"
import { TenantId } from "../../src/Domain/Ids.ts"
import { ExecutionsRepo } from "../../src/Orchestrations/ExecutionsRepo.ts"
import { eventually } from "../support/Eventually.ts"
import * as FakeReceiver from "../support/FakeReceiver.ts"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"
import { lookupTool } from "../support/Tools.ts"

// A tenant's approval defaults (docs/approvals.md#tenant-defaults), and the
// time a run waits for a person, which its timeout does not count: through
// the real service, the local model asking for the calls, the tool's target
// a receiver on loopback.

const settings = { webhookAllowPrivate: true }

/** A tenant with a key; `withTool` adds a tool under `policy` and a one-step orchestration over it. */
const tenant = Effect.gen(function* () {
  const client = yield* TestClient
  const account = yield* TestServer.signUp()
  const session = { headers: TestServer.bearer(account.token) }
  const { key } = yield* TestServer.createKey(account, ["execute", "read", "approvals"])
  const auth = { headers: TestServer.bearer(key) }
  const setDefaults = (body: Record<string, unknown>) =>
    client.request("PUT", "/api/settings/approvals", { ...session, body })
  const withTool = (
    target: FakeReceiver.FakeReceiver,
    name: string,
    policy: Record<string, unknown>,
    orchestration: Record<string, unknown> = {}
  ) =>
    Effect.gen(function* () {
      const tool = yield* client.request("POST", "/api/tools", {
        ...session,
        body: { ...lookupTool(target.url("/orders/{{args.id}}")), name, policy }
      })
      assert.strictEqual(tool.status, 201, tool.text)
      const agent = yield* TestServer.createAgent(account, { model: "local", toolIds: [tool.body.id] })
      const created = yield* client.request("POST", "/api/orchestrations", {
        ...session,
        body: {
          name,
          ...orchestration,
          steps: [{ id: "look", agentId: agent.id, prompt: `call ${name} {"id": "{{input}}"}` }]
        }
      })
      assert.strictEqual(created.status, 201, created.text)
      const execute = (input: string) =>
        Effect.map(
          client.request("POST", `/api/v1/orchestrations/${created.body.id}/execute`, { ...auth, body: { input } }),
          (response) => {
            assert.strictEqual(response.status, 202, response.text)
            return response.body.executionId as string
          }
        )
      return { execute, id: tool.body.id as string }
    })
  const untilStatus = (id: string, statuses: ReadonlyArray<string>) =>
    eventually(
      Effect.map(client.request("GET", `/api/v1/executions/${id}`, auth), (response) => {
        assert.include(statuses, response.body.status, response.text)
        return response.body
      }),
      { timeoutMs: 30_000 }
    )
  const approvalsOf = (runId: string) =>
    Effect.map(client.request("GET", `/api/v1/approvals?runId=${runId}`, auth), (response) => {
      assert.strictEqual(response.status, 200, response.text)
      return response.body.data as ReadonlyArray<any>
    })
  const pending = (runId: string) =>
    eventually(
      Effect.map(approvalsOf(runId), (data) => {
        assert.lengthOf(data, 1)
        assert.strictEqual(data[0].status, "pending")
        return data[0]
      }),
      { timeoutMs: 30_000 }
    )
  const decide = (id: string, body: Record<string, unknown>) =>
    client.request("POST", `/api/v1/approvals/${id}/decision`, { ...auth, body })
  return {
    client,
    tenantId: TenantId.make(account.tenantId),
    session,
    setDefaults,
    withTool,
    untilStatus,
    approvalsOf,
    pending,
    decide
  }
})

layer(ExecutionsRepo.layer.pipe(Layer.provideMerge(TestServer.layer(settings))), { excludeTestServices: true })(
  "approval defaults",
  (it) => {
    describe("the routes", () => {
      it.effect("show the service's defaults, set the fields sent, refuse bad ones, per tenant", () =>
        Effect.gen(function* () {
          const one = yield* tenant
          const other = yield* tenant
          const initial = yield* one.client.request("GET", "/api/settings/approvals", one.session)
          assert.strictEqual(initial.status, 200, initial.text)
          assert.deepStrictEqual(initial.body, {
            approval: "never",
            approvalTimeoutMs: 86_400_000,
            approvalOnExpiry: "reject",
            updatedAt: null
          })
          const set = yield* one.setDefaults({ approval: { when: "amount > 100" }, approvalOnExpiry: "approve" })
          assert.strictEqual(set.status, 200, set.text)
          assert.deepInclude(set.body, {
            approval: { when: "amount > 100" },
            approvalTimeoutMs: 86_400_000,
            approvalOnExpiry: "approve"
          })
          assert.isString(set.body.updatedAt)
          // A field left out keeps its value.
          const again = yield* one.setDefaults({ approvalTimeoutMs: 60_000 })
          assert.deepInclude(again.body, {
            approval: { when: "amount > 100" },
            approvalTimeoutMs: 60_000,
            approvalOnExpiry: "approve"
          })
          const read = yield* one.client.request("GET", "/api/settings/approvals", one.session)
          assert.deepStrictEqual(read.body, again.body)

          const badRule = yield* one.setDefaults({ approval: { when: "amount >" } })
          assert.strictEqual(badRule.status, 400, badRule.text)
          assert.strictEqual(badRule.headers.get("content-type"), "application/problem+json")
          assert.deepInclude(badRule.body.errors[0].path, "approval")
          const badTimeout = yield* one.setDefaults({ approvalTimeoutMs: 10 })
          assert.strictEqual(badTimeout.status, 400, badTimeout.text)
          assert.include(JSON.stringify(badTimeout.body.errors), "approvalTimeoutMs")
          const unchanged = yield* one.client.request("GET", "/api/settings/approvals", one.session)
          assert.deepStrictEqual(unchanged.body, again.body)

          // `null` goes back to the service's.
          const cleared = yield* one.setDefaults({ approval: null })
          assert.strictEqual(cleared.status, 200, cleared.text)
          assert.deepInclude(cleared.body, {
            approval: "never",
            approvalTimeoutMs: 60_000,
            approvalOnExpiry: "approve"
          })

          const others = yield* other.client.request("GET", "/api/settings/approvals", other.session)
          assert.strictEqual(others.body.approval, "never")
          const anonymous = yield* one.client.request("GET", "/api/settings/approvals")
          assert.strictEqual(anonymous.status, 401)
        })
      )
    })

    describe("another node", () => {
      it.effect("sees a change at its next tool load, told by the change itself", () =>
        Effect.scoped(
          Effect.gen(function* () {
            // A second instance of the service's defaults: another node's cache, listening on its own.
            const other = Context.get(yield* Layer.build(Layer.fresh(ApprovalDefaults.layer)), ApprovalDefaults)
            const run = yield* tenant
            // Once it listens, what it reads is kept: only the notification can make it read again.
            yield* eventually(
              Effect.sync(() => assert.isTrue(other.listening(), "listening")),
              { timeoutMs: 10_000 }
            )
            assert.deepStrictEqual(yield* other.stored(run.tenantId), {})
            const set = yield* run.setDefaults({ approval: "always", approvalOnExpiry: "approve" })
            assert.strictEqual(set.status, 200, set.text)
            yield* eventually(
              Effect.map(other.stored(run.tenantId), (stored) =>
                assert.deepStrictEqual(stored, { approval: "always", approvalOnExpiry: "approve" })
              ),
              { timeoutMs: 10_000 }
            )
            yield* run.setDefaults({ approval: null })
            yield* eventually(
              Effect.map(other.stored(run.tenantId), (stored) =>
                assert.deepStrictEqual(stored, { approvalOnExpiry: "approve" })
              ),
              { timeoutMs: 10_000 }
            )
          })
        )
      )
    })

    describe("a tool without its own approval", () => {
      it.effect("takes the tenant's; a tool set to never does not", () =>
        Effect.scoped(
          Effect.gen(function* () {
            const target = yield* FakeReceiver.make
            target.script({ body: JSON.stringify({ status: "shipped" }) })
            const run = yield* tenant
            const set = yield* run.setDefaults({
              approval: { when: 'id starts_with "A"' },
              approvalTimeoutMs: 120_000,
              approvalOnExpiry: "approve"
            })
            assert.strictEqual(set.status, 200, set.text)
            const unset = yield* run.withTool(target, "lookup_order", {})
            const never = yield* run.withTool(target, "lookup_never", { approval: "never" })

            const asked = yield* unset.execute("A-1")
            const approval = yield* run.pending(asked)
            assert.deepInclude(approval, { tool: "lookup_order", arguments: { id: "A-1" }, onExpiry: "approve" })
            assert.strictEqual(
              new Date(approval.expiresAt).getTime() - new Date(approval.requestedAt).getTime(),
              120_000
            )
            yield* run.untilStatus(asked, ["waiting"])

            // The rule does not hold: made without asking.
            const notAsked = yield* unset.execute("B-1")
            yield* run.untilStatus(notAsked, ["completed"])
            assert.lengthOf(yield* run.approvalsOf(notAsked), 0)
            // Its own `never` wins over the tenant's rule.
            const ownPolicy = yield* never.execute("A-2")
            yield* run.untilStatus(ownPolicy, ["completed"])
            assert.lengthOf(yield* run.approvalsOf(ownPolicy), 0)
            assert.deepStrictEqual(
              target.requests.map((request) => request.path),
              ["/orders/B-1", "/orders/A-2"]
            )

            // Its own `approval` removed (`null`): the tenant's applies to it too.
            const cleared = yield* run.client.request("PUT", `/api/tools/${never.id}`, {
              ...run.session,
              body: { policy: { approval: null } }
            })
            assert.strictEqual(cleared.status, 200, cleared.text)
            assert.notProperty(cleared.body.policy, "approval")
            const askedNow = yield* never.execute("A-3")
            assert.deepInclude(yield* run.pending(askedNow), { tool: "lookup_never", arguments: { id: "A-3" } })

            const decided = yield* run.decide(approval.id, { decision: "approve" })
            assert.strictEqual(decided.status, 200, decided.text)
            yield* run.untilStatus(asked, ["completed"])
            assert.includeMembers(
              target.requests.map((request) => request.path),
              ["/orders/A-1"]
            )
          })
        )
      )
    })

    describe("the run's timeout", () => {
      it.effect("does not count the time it waited for a person", () =>
        Effect.scoped(
          Effect.gen(function* () {
            const sql = yield* PgClient.PgClient
            const repo = yield* ExecutionsRepo
            const target = yield* FakeReceiver.make
            target.script({ body: JSON.stringify({ status: "shipped" }) })
            const run = yield* tenant
            // A run of at most a second, whose call waits up to a minute.
            const tool = yield* run.withTool(
              target,
              "lookup_order",
              { approval: "always", approvalTimeoutMs: 60_000 },
              { timeoutMs: 1_000 }
            )
            const executionId = yield* tool.execute("A-1")
            const approval = yield* run.pending(executionId)
            // Not cut to the run's timeout.
            assert.strictEqual(
              new Date(approval.expiresAt).getTime() - new Date(approval.requestedAt).getTime(),
              60_000
            )
            // Past the run's timeout by the database's clock (the sweep's), it is still waiting and not swept.
            yield* eventually(
              Effect.map(
                sql<{ past: boolean }>`SELECT now() > created_at + interval '1500 milliseconds' AS past
                                      FROM executions WHERE id = ${executionId}`,
                (rows) => assert.isTrue(rows[0]?.past, "past its timeout")
              ),
              { timeoutMs: 10_000 }
            )
            assert.notInclude(yield* repo.failTimedOut(0), executionId)
            yield* run.untilStatus(executionId, ["waiting"])

            const decided = yield* run.decide(approval.id, { decision: "approve" })
            assert.strictEqual(decided.status, 200, decided.text)
            const done = yield* run.untilStatus(executionId, ["completed", "failed"])
            assert.strictEqual(done.status, "completed", JSON.stringify(done))
            assert.deepStrictEqual(
              target.requests.map((request) => request.path),
              ["/orders/A-1"]
            )
            const [held] = yield* sql<{ heldMs: number; waiting: boolean; waitingSince: Date | null }>`
              SELECT held_ms::float8 AS held_ms, waiting, waiting_since FROM executions WHERE id = ${executionId}`
            assert.isAtLeast(held!.heldMs, 1_000)
            assert.isFalse(held!.waiting)
            assert.isNull(held!.waitingSince)
          })
        )
      )
    })
  }
)
