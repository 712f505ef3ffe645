import { assert, describe, it } from "@effect/vitest"
import { PgClient } from "@effect/sql-pg"
import { Effect, Redacted } from "effect"
import { Reactivity } from "effect/reactivity"
import * as Crypto from "node:crypto"
import { request, requestJson, signUpTenant } from "../support/Cluster.ts"
import { eventually } from "../support/Eventually.ts"
import { freePort, type ServiceProcess, spawnService, waitReady } from "../support/Process.ts"
import { TestDatabaseUrl } from "../support/TestServer.ts"

// Three nodes of the service as child processes on one database, every one of
// them ticking. Two schedules every 2 s (one `skip`, one `run_once`) run for
// about 30 s while one node is killed (SIGKILL) and started again: each slot
// from the first to the last starts exactly one execution, counted by slot.
// Then every node is stopped, the cluster's clock goes stale past an outage,
// and the nodes come back: the `skip` schedule records the gap's slots as
// skipped and runs none of them; the `run_once` one runs one for all of them.
// Both then go on, each slot once.

const intervalMs = 2_000

interface SlotRow {
  readonly slot_at: Date
  readonly status: string
  readonly missed_slots: number
  readonly run_id: string | null
}

describe("schedules across a cluster", () => {
  it.live(
    "each slot runs once with a node killed and restarted; missed slots after a full outage follow the policy",
    () =>
      Effect.gen(function* () {
        const databaseUrl = yield* TestDatabaseUrl
        const sql = yield* PgClient.make({ url: Redacted.make(databaseUrl) })
        const env = {
          DATABASE_URL: databaseUrl,
          WEBHOOK_SECRET_KEY: Crypto.randomBytes(32).toString("base64"),
          RUNNER_SECRET: Crypto.randomBytes(32).toString("base64"),
          ENFORCE_DAILY_LIMITS: "false"
        }
        const startNode = Effect.gen(function* () {
          const node = yield* spawnService({ ...env, RUNNER_ADDRESS: `127.0.0.1:${yield* freePort}` })
          return node
        })
        const startAll = (count: number) =>
          Effect.gen(function* () {
            const nodes: Array<ServiceProcess> = []
            for (let i = 0; i < count; i++) nodes.push(yield* startNode)
            yield* Effect.forEach(nodes, (node) => waitReady(node), { concurrency: "unbounded" })
            return nodes
          })
        const kill = (node: ServiceProcess) =>
          Effect.promise(async () => {
            node.child.kill("SIGKILL")
            await node.exited
          })

        const nodes = yield* startAll(3)
        const base = nodes[0]!.baseUrl
        const setup = yield* Effect.promise(async () => {
          const tenant = await signUpTenant(base, `schedules-${Crypto.randomBytes(4).toString("hex")}@example.com`)
          const agent = await requestJson(`${base}/api/agents`, {
            method: "POST",
            headers: tenant.session,
            body: { name: "Worker", model: "local" }
          })
          const orchestration = await requestJson(`${base}/api/orchestrations`, {
            method: "POST",
            headers: tenant.session,
            body: { name: "Tick", steps: [{ id: "s", agentId: agent.id, prompt: "Say {{input}}" }] }
          })
          const schedule = (missedPolicy: string) =>
            requestJson(`${base}/api/schedules`, {
              method: "POST",
              headers: tenant.session,
              body: {
                name: missedPolicy,
                target: { orchestrationId: orchestration.id, input: missedPolicy },
                intervalSeconds: intervalMs / 1000,
                missedPolicy
              }
            })
          return {
            ...tenant,
            skip: (await schedule("skip")).id as string,
            once: (await schedule("run_once")).id as string
          }
        })

        const slotsOf = (scheduleId: string) =>
          sql<SlotRow>`
            SELECT slot_at, status, missed_slots, run_id FROM schedule_runs
            WHERE schedule_id = ${scheduleId} ORDER BY slot_at`
        const startedCount = (scheduleId: string) =>
          Effect.map(slotsOf(scheduleId), (rows) => rows.filter((row) => row.status === "started").length)
        const atLeast = (scheduleId: string, count: number, timeoutMs: number) =>
          eventually(
            Effect.flatMap(startedCount(scheduleId), (n) =>
              n >= count ? Effect.void : Effect.fail(new Error(`${n} of ${count} slots started`))
            ),
            { timeoutMs, intervalMs: 200 }
          )
        // Every slot claimed has settled (a slot claimed by a node killed before its start is taken again).
        const settled = (scheduleId: string) =>
          eventually(
            Effect.flatMap(slotsOf(scheduleId), (rows) =>
              rows.some((row) => row.status === "claimed")
                ? Effect.fail(
                    new Error(`claimed slots: ${JSON.stringify(rows.filter((row) => row.status === "claimed"))}`)
                  )
                : Effect.succeed(rows)
            ),
            { timeoutMs: 60_000, intervalMs: 250 }
          )
        /** The executions of a schedule, by the slot each was started for. */
        const executionsBySlot = (scheduleId: string) =>
          Effect.map(
            sql<{ idempotency_key: string; n: number }>`
              SELECT idempotency_key, count(*)::int AS n FROM executions
              WHERE tenant_id = (SELECT tenant_id FROM schedules WHERE id = ${scheduleId})
                AND idempotency_key LIKE ${`schedule:${scheduleId}:%`}
              GROUP BY idempotency_key`,
            (rows) => new Map(rows.map((row) => [row.idempotency_key.slice(`schedule:${scheduleId}:`.length), row.n]))
          )
        /** Slots one interval apart, all started, each with exactly one execution. */
        const eachOnce = (scheduleId: string, rows: ReadonlyArray<SlotRow>) =>
          Effect.gen(function* () {
            const bySlot = yield* executionsBySlot(scheduleId)
            for (const [i, row] of rows.entries()) {
              const at = row.slot_at.toISOString()
              assert.strictEqual(row.status, "started", `slot ${at}`)
              assert.strictEqual(bySlot.get(at), 1, `executions of slot ${at}`)
              if (i > 0) assert.strictEqual(row.slot_at.getTime() - rows[i - 1]!.slot_at.getTime(), intervalMs, at)
            }
          })

        // About 30 s: a few slots, one node killed, more slots on the two left, the node back, more slots.
        yield* atLeast(setup.skip, 4, 30_000)
        yield* kill(nodes[1]!)
        yield* atLeast(setup.skip, 8, 30_000)
        nodes[1] = yield* startNode
        yield* waitReady(nodes[1]!)
        yield* atLeast(setup.skip, 15, 40_000)
        yield* atLeast(setup.once, 15, 10_000)

        for (const id of [setup.skip, setup.once]) {
          const rows = yield* settled(id)
          assert.isAtLeast(rows.length, 15)
          yield* eachOnce(id, rows)
        }
        // No execution of the tenant outside a slot.
        const [{ n: executions }] = (yield* sql<{ n: number }>`
          SELECT count(*)::int AS n FROM executions
          WHERE tenant_id = (SELECT tenant_id FROM schedules WHERE id = ${setup.skip})`) as unknown as [{ n: number }]
        const [{ n: started }] = (yield* sql<{ n: number }>`
          SELECT count(*)::int AS n FROM schedule_runs
          WHERE schedule_id IN (${setup.skip}, ${setup.once}) AND status = 'started'`) as unknown as [{ n: number }]
        assert.strictEqual(executions, started)

        // Every node stopped; the cluster's clock goes stale past an outage; the nodes come back.
        yield* Effect.forEach(nodes, kill, { discard: true })
        const before = {
          skip: (yield* slotsOf(setup.skip)).length,
          once: (yield* slotsOf(setup.once)).length
        }
        yield* eventually(
          Effect.flatMap(
            sql<{ stale: boolean }>`SELECT ticked_at < now() - interval '7 seconds' AS stale FROM schedule_clock`,
            ([clock]) => (clock!.stale ? Effect.void : Effect.fail(new Error("the clock is still fresh")))
          ),
          { timeoutMs: 20_000, intervalMs: 250 }
        )
        const back = yield* startAll(3)
        yield* atLeast(setup.skip, before.skip + 2, 30_000)
        yield* atLeast(setup.once, before.once + 3, 30_000)
        const [{ resumed_at: resumedAt }] = (yield* sql<{ resumed_at: Date }>`
          SELECT resumed_at FROM schedule_clock`) as unknown as [{ resumed_at: Date }]

        // skip: the gap is one `skipped` record and no run; the slots since the resume each ran once.
        const skipRows = yield* settled(setup.skip)
        yield* eachOnce(setup.skip, skipRows.slice(0, before.skip))
        const skipped = skipRows[before.skip]!
        assert.strictEqual(skipped.status, "skipped", JSON.stringify(skipRows.slice(before.skip)))
        assert.isAtLeast(skipped.missed_slots, 3)
        assert.isNull(skipped.run_id)
        assert.isBelow(skipped.slot_at.getTime(), resumedAt.getTime())
        const skipAfter = skipRows.slice(before.skip + 1)
        assert.isTrue(skipAfter.every((row) => row.slot_at.getTime() >= resumedAt.getTime()))
        yield* eachOnce(setup.skip, skipAfter)
        const lastBefore = skipRows[before.skip - 1]!.slot_at.getTime()
        assert.strictEqual(
          (skipped.slot_at.getTime() - lastBefore) / intervalMs,
          skipped.missed_slots,
          "the record stands for every slot of the gap"
        )

        // run_once: one run stands for the gap's slots; then each slot once.
        const onceRows = yield* settled(setup.once)
        const caughtUp = onceRows[before.once]!
        assert.strictEqual(caughtUp.status, "started", JSON.stringify(onceRows.slice(before.once)))
        assert.isAtLeast(caughtUp.missed_slots, 3)
        assert.isBelow(caughtUp.slot_at.getTime(), resumedAt.getTime())
        const onceAfter = onceRows.slice(before.once + 1)
        assert.isTrue(onceAfter.every((row) => row.slot_at.getTime() >= resumedAt.getTime()))
        yield* eachOnce(setup.once, onceRows.slice(0, before.once))
        yield* eachOnce(setup.once, onceAfter)
        const bySlot = yield* executionsBySlot(setup.once)
        assert.strictEqual(bySlot.get(caughtUp.slot_at.toISOString()), 1)
        // Nothing else of the gap ran.
        const gapRuns = [...bySlot.keys()].filter((at) => {
          const t = Date.parse(at)
          return t > onceRows[before.once - 1]!.slot_at.getTime() && t < caughtUp.slot_at.getTime()
        })
        assert.deepStrictEqual(gapRuns, [])

        // Quiet before the scope stops the nodes.
        yield* Effect.promise(() =>
          Promise.all(
            [setup.skip, setup.once].map((id) =>
              request(`${back[0]!.baseUrl}/api/schedules/${id}/pause`, { method: "POST", headers: setup.session })
            )
          )
        )
      }).pipe(Effect.scoped, Effect.provide(Reactivity.layer)),
    240_000
  )
})
