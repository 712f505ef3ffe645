import { PgClient } from "@effect/sql-pg"
import { assert, describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import * as V8 from "node:v8"
import * as Vm from "node:vm"
import { eventually } from "../support/Eventually.ts"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"
import { lookupTool } from "../support/Tools.ts"

// A thousand executions waiting for approvals at once on one node: what they
// hold while they wait. A waiting run is a suspended workflow (its stored
// messages and its approval's row), so no workflow is in flight, no
// connection is taken, and the heap grows by little per run.

const runs = 1_000

V8.setFlagsFromString("--expose-gc")
const gc = Vm.runInNewContext("gc") as () => void

const heapMb = () => {
  gc()
  gc()
  return process.memoryUsage().heapUsed / 1_048_576
}

const settings = {
  webhookAllowPrivate: true,
  enforceDailyLimits: false,
  freeMaxRunningRuns: 0,
  freeDailyTokens: 1_000_000_000
}

layer(TestServer.layer(settings), { excludeTestServices: true, timeout: 300_000 })("many waiting runs", (it) => {
  describe("1,000 executions waiting for approvals", () => {
    it.effect(
      "hold no workflow in flight and no connection; memory and connections measured before and after",
      () =>
        Effect.gen(function* () {
          const client = yield* TestClient
          const sql = yield* PgClient.PgClient
          const account = yield* TestServer.signUp()
          const session = TestServer.bearer(account.token)
          const { key } = yield* TestServer.createKey(account, ["execute", "read", "approvals"])
          const tool = yield* client.request("POST", "/api/tools", {
            headers: session,
            body: { ...lookupTool("http://127.0.0.1:9/orders/{{args.id}}"), policy: { approval: "always" } }
          })
          assert.strictEqual(tool.status, 201, tool.text)
          const agent = yield* TestServer.createAgent(account, { model: "local", toolIds: [tool.body.id] })
          const created = yield* client.request("POST", "/api/orchestrations", {
            headers: session,
            body: {
              name: "Wait",
              steps: [{ id: "s", agentId: agent.id, prompt: 'call lookup_order {"id": "{{input}}"}' }]
            }
          })
          assert.strictEqual(created.status, 201, created.text)
          const auth = { headers: TestServer.bearer(key) }
          const connections = Effect.map(
            sql<{ n: number }>`SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database()`,
            (rows) => rows[0]!.n
          )
          const inFlight = Effect.map(client.request("GET", "/metrics"), (response) => {
            const line = (response.text as string).split("\n").find((l) => l.startsWith("workflows_in_flight"))
            return line === undefined ? 0 : Number(line.split(" ").at(-1))
          })
          const pending = Effect.map(
            sql<{
              n: number
            }>`SELECT count(*)::int AS n FROM approvals WHERE tenant_id = ${account.tenantId} AND status = 'pending'`,
            (rows) => rows[0]!.n
          )
          const execute = (input: string) =>
            Effect.map(
              client.request("POST", `/api/v1/orchestrations/${created.body.id}/execute`, { ...auth, body: { input } }),
              (response) => {
                assert.strictEqual(response.status, 202, response.text)
                return response.body.executionId as string
              }
            )

          // Warm: one run to waiting, so that what is measured is the runs, not the code's first use.
          yield* execute("W-0")
          yield* eventually(
            Effect.map(pending, (n) => assert.strictEqual(n, 1)),
            { timeoutMs: 30_000 }
          )
          const before = { heapMb: heapMb(), connections: yield* connections, inFlight: yield* inFlight }

          const started = Date.now()
          yield* Effect.forEach(
            Array.from({ length: runs }, (_, i) => `A-${i}`),
            execute,
            { concurrency: 20, discard: true }
          )
          yield* eventually(
            Effect.map(pending, (n) => assert.strictEqual(n, runs + 1)),
            {
              timeoutMs: 240_000,
              intervalMs: 500
            }
          )
          // Every run waits, suspended: none is in flight.
          yield* eventually(
            Effect.map(inFlight, (n) => assert.strictEqual(n, 0)),
            { timeoutMs: 60_000 }
          )
          const waiting = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM executions
            WHERE tenant_id = ${account.tenantId} AND status = 'running' AND waiting`
          assert.strictEqual(waiting[0]!.n, runs + 1)
          const after = { heapMb: heapMb(), connections: yield* connections, inFlight: yield* inFlight }
          console.log(
            "%d runs waiting for approvals after %d ms: heap %s MB before, %s MB after (%s KB a run); " +
              "connections %d before, %d after; workflows in flight %d before, %d after",
            runs,
            Date.now() - started,
            before.heapMb.toFixed(1),
            after.heapMb.toFixed(1),
            (((after.heapMb - before.heapMb) * 1024) / runs).toFixed(1),
            before.connections,
            after.connections,
            before.inFlight,
            after.inFlight
          )
          // The burst of starts may fill the pool (DATABASE_POOL_SIZE, 10); the waiting runs hold none beyond it.
          assert.isAtMost(after.connections, before.connections + 10, "no connection held by a waiting run")
          // Idle workflow entities are let go after 10 s (effect's cluster): the heap settles once they are.
          const settled = yield* eventually(
            Effect.sync(() => {
              const now = heapMb()
              assert.isBelow(((now - before.heapMb) * 1024) / runs, 20, "KB of heap per waiting run")
              return now
            }),
            { timeoutMs: 60_000, intervalMs: 2_000 }
          )
          console.log("heap once idle entities were let go: %s MB", settled.toFixed(1))
        }),
      300_000
    )
  })
})
