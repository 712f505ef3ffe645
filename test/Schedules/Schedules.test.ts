import { assert, describe, it, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"
import { Schedules } from "../../src/Schedules/Schedules.ts"
import { planSlots } from "../../src/Schedules/Schedules.ts"
import type { ScheduleRow } from "../../src/Schedules/Repo.ts"
import type { TenantId } from "../../src/Domain/Ids.ts"
import { eventually } from "../support/Eventually.ts"
import * as TestServer from "../support/TestServer.ts"
import { type Account, TestClient } from "../support/TestServer.ts"

// Schedules through the routes of a real server, whose ticker runs as on
// every node: CRUD, validation naming the field, pause and resume, the next
// five slots, a slot that starts its run, and slots refused over the plan's
// daily requests, recorded with their reason.

const dailyLimit = 2

const ServerLayer = Schedules.ticker.pipe(
  Layer.provide(Schedules.layer),
  Layer.provideMerge(
    TestServer.layer({ freeDailyLimit: dailyLimit, enforceDailyLimits: true, authAttemptsPerAddress: 10_000 })
  )
)

interface Tenant {
  readonly account: Account
  readonly auth: Record<string, string>
  readonly orchestrationId: string
  readonly teamId: string
}

/** A tenant with an agent on the local model, an orchestration of it using `{{topic}}`, and a team of it. */
const tenant = Effect.gen(function* () {
  const client = yield* TestClient
  const account = yield* TestServer.signUp()
  const agent = yield* TestServer.createAgent(account, { model: "local" })
  const auth = TestServer.bearer(account.token)
  const orchestration = yield* client.request("POST", "/api/orchestrations", {
    headers: auth,
    body: { name: "Daily", steps: [{ id: "s", agentId: agent.id, prompt: "Say {{input}} about {{variables.topic}}" }] }
  })
  assert.strictEqual(orchestration.status, 201, orchestration.text)
  const team = yield* client.request("POST", "/api/teams", {
    headers: auth,
    body: { name: "Team", members: [{ agentId: agent.id, role: "helper" }], maxTurns: 1 }
  })
  assert.strictEqual(team.status, 201, team.text)
  return { account, auth, orchestrationId: orchestration.body.id, teamId: team.body.id } satisfies Tenant
})

const create = (t: Tenant, body: Record<string, unknown>) =>
  Effect.flatMap(TestClient, (client) => client.request("POST", "/api/schedules", { headers: t.auth, body }))

const orchestrationTarget = (t: Tenant) => ({
  orchestrationId: t.orchestrationId,
  input: "hello",
  variables: { topic: "tides" }
})

/** The fields a 400 names, as `payload.a.b`. */
const named = (body: any): Array<string> => body.errors.map((error: any) => error.path.join("."))

const slotsOf = (t: Tenant, id: string) =>
  Effect.flatMap(TestClient, (client) =>
    Effect.map(client.request("GET", `/api/schedules/${id}/runs?limit=200`, { headers: t.auth }), (response) => {
      assert.strictEqual(response.status, 200, response.text)
      return response.body.data as Array<any>
    })
  )

describe("slots after an outage", () => {
  const base: ScheduleRow = {
    id: "s",
    tenantId: "t" as TenantId,
    name: "",
    orchestrationId: "o",
    input: "",
    variables: null,
    teamId: null,
    mission: null,
    cron: null,
    intervalSeconds: 2,
    timezone: "UTC",
    status: "active",
    missedPolicy: "skip",
    anchorAt: new Date("2026-01-01T00:00:00Z"),
    nextRunAt: new Date("2026-01-01T00:00:10Z"),
    lastRunAt: null,
    lastRunId: null,
    createdAt: new Date(0),
    updatedAt: new Date(0)
  }
  const now = new Date("2026-01-01T00:00:30.500Z")
  const resumedAt = new Date("2026-01-01T00:00:25.200Z")

  it("skip: one record of the slots of the gap, then each slot since the resume", () => {
    const plan = planSlots(base, now, resumedAt)
    assert.deepStrictEqual(
      plan.slots.map((slot) => [slot.slotAt.toISOString().slice(17, 19), slot.status, slot.missedSlots]),
      [
        ["24", "skipped", 8],
        ["26", "claimed", 0],
        ["28", "claimed", 0],
        ["30", "claimed", 0]
      ]
    )
    assert.strictEqual(plan.nextRunAt.toISOString(), "2026-01-01T00:00:32.000Z")
  })

  it("run_once: one run for the slots of the gap", () => {
    const plan = planSlots({ ...base, missedPolicy: "run_once" }, now, resumedAt)
    assert.deepStrictEqual(plan.slots[0]!.status, "claimed")
    assert.deepStrictEqual(plan.slots[0]!.missedSlots, 8)
    assert.strictEqual(plan.slots.length, 4)
  })

  it("no outage: every slot due is claimed, none missed", () => {
    const plan = planSlots(base, now, new Date("2025-12-31T00:00:00Z"))
    assert.strictEqual(plan.slots.length, 11)
    assert.isTrue(plan.slots.every((slot) => slot.status === "claimed" && slot.missedSlots === 0))
  })
})

layer(ServerLayer, { excludeTestServices: true })("schedules", (it) => {
  it.effect("create, read, list, change and delete; another tenant's is a 404", () =>
    Effect.gen(function* () {
      const client = yield* TestClient
      const t = yield* tenant
      const created = yield* create(t, {
        name: "Tides",
        target: orchestrationTarget(t),
        intervalSeconds: 3600,
        status: "paused"
      })
      assert.strictEqual(created.status, 201, created.text)
      const schedule = created.body
      assert.strictEqual(schedule.status, "paused")
      assert.strictEqual(schedule.timezone, "UTC")
      assert.strictEqual(schedule.missedPolicy, "skip")
      assert.deepStrictEqual(schedule.target, orchestrationTarget(t))
      assert.isNull(schedule.nextRunAt)
      assert.isNull(schedule.lastRunAt)

      const got = yield* client.request("GET", `/api/schedules/${schedule.id}`, { headers: t.auth })
      assert.strictEqual(got.status, 200)
      assert.strictEqual(got.body.name, "Tides")
      const listed = yield* client.request("GET", "/api/schedules", { headers: t.auth })
      assert.strictEqual(listed.body.total, 1)
      assert.strictEqual(listed.body.data[0].id, schedule.id)

      const changed = yield* client.request("PUT", `/api/schedules/${schedule.id}`, {
        headers: t.auth,
        body: { name: "Team", target: { teamId: t.teamId, mission: "Plan the week" }, missedPolicy: "run_once" }
      })
      assert.strictEqual(changed.status, 200, changed.text)
      assert.deepStrictEqual(changed.body.target, { teamId: t.teamId, mission: "Plan the week" })
      assert.strictEqual(changed.body.missedPolicy, "run_once")
      assert.strictEqual(changed.body.intervalSeconds, 3600)

      const other = yield* tenant
      for (const [method, path] of [
        ["GET", `/api/schedules/${schedule.id}`],
        ["PUT", `/api/schedules/${schedule.id}`],
        ["POST", `/api/schedules/${schedule.id}/pause`],
        ["POST", `/api/schedules/${schedule.id}/resume`],
        ["GET", `/api/schedules/${schedule.id}/runs`],
        ["DELETE", `/api/schedules/${schedule.id}`]
      ] as const) {
        const response = yield* client.request(method, path, {
          headers: other.auth,
          body: method === "PUT" ? {} : undefined
        })
        assert.strictEqual(response.status, 404, `${method} ${path}: ${response.text}`)
      }
      const otherList = yield* client.request("GET", "/api/schedules", { headers: other.auth })
      assert.strictEqual(otherList.body.total, 0)

      const removed = yield* client.request("DELETE", `/api/schedules/${schedule.id}`, { headers: t.auth })
      assert.strictEqual(removed.status, 204)
      const gone = yield* client.request("GET", `/api/schedules/${schedule.id}`, { headers: t.auth })
      assert.strictEqual(gone.status, 404)
    })
  )

  it.effect("bad input is a 400 naming the field", () =>
    Effect.gen(function* () {
      const t = yield* tenant
      const other = yield* tenant
      const cases: Array<readonly [Record<string, unknown>, string]> = [
        [{ target: orchestrationTarget(t), cron: "61 * * * *" }, "payload.cron"],
        [{ target: orchestrationTarget(t), cron: "0 0 9 * * *" }, "payload.cron"],
        [{ target: orchestrationTarget(t), cron: "0 9 * * *", timezone: "Mars/Olympus" }, "payload.timezone"],
        [{ target: orchestrationTarget(t), intervalSeconds: 60, timezone: "+02:00" }, "payload.timezone"],
        [{ target: orchestrationTarget(t), cron: "0 9 * * *", intervalSeconds: 60 }, "payload.cron"],
        [{ target: orchestrationTarget(t) }, "payload.cron"],
        [{ target: orchestrationTarget(t), intervalSeconds: 0 }, "payload.intervalSeconds"],
        [{ target: orchestrationTarget(other), intervalSeconds: 60 }, "payload.target.orchestrationId"],
        [
          { target: { ...orchestrationTarget(t), variables: {} }, intervalSeconds: 60 },
          "payload.target.variables.topic"
        ],
        [{ target: { teamId: other.teamId, mission: "x" }, intervalSeconds: 60 }, "payload.target.teamId"],
        [{ target: orchestrationTarget(t), intervalSeconds: 60, missedPolicy: "all" }, "payload.missedPolicy"]
      ]
      for (const [body, field] of cases) {
        const response = yield* create(t, body)
        assert.strictEqual(response.status, 400, `${JSON.stringify(body)}: ${response.text}`)
        assert.include(named(response.body), field, `${JSON.stringify(body)}: ${response.text}`)
      }
      const client = yield* TestClient
      const listed = yield* client.request("GET", "/api/schedules", { headers: t.auth })
      assert.strictEqual(listed.body.total, 0)
    })
  )

  it.effect("the next five slots of a cron in its time zone; pause and resume", () =>
    Effect.gen(function* () {
      const client = yield* TestClient
      const t = yield* tenant
      const created = yield* create(t, {
        target: orchestrationTarget(t),
        cron: "30 9 * * 1-5",
        timezone: "America/New_York"
      })
      assert.strictEqual(created.status, 201, created.text)
      const { nextRuns, nextRunAt, id } = created.body
      assert.strictEqual(nextRuns.length, 5)
      assert.strictEqual(nextRuns[0], nextRunAt)
      const local = new Intl.DateTimeFormat("en-US", {
        timeZone: "America/New_York",
        weekday: "short",
        hour: "2-digit",
        minute: "2-digit",
        hourCycle: "h23"
      })
      let previous = Date.now()
      for (const slot of nextRuns as Array<string>) {
        const at = Date.parse(slot)
        assert.isAbove(at, previous)
        previous = at
        const parts = Object.fromEntries(local.formatToParts(new Date(at)).map((part) => [part.type, part.value]))
        assert.strictEqual(`${parts.hour}:${parts.minute}`, "09:30", slot)
        assert.notInclude(["Sat", "Sun"], parts.weekday, slot)
      }

      const paused = yield* client.request("POST", `/api/schedules/${id}/pause`, { headers: t.auth })
      assert.strictEqual(paused.status, 200)
      assert.strictEqual(paused.body.status, "paused")
      assert.isNull(paused.body.nextRunAt)
      assert.deepStrictEqual(paused.body.nextRuns, [])
      const again = yield* client.request("POST", `/api/schedules/${id}/pause`, { headers: t.auth })
      assert.strictEqual(again.body.status, "paused")
      const resumed = yield* client.request("POST", `/api/schedules/${id}/resume`, { headers: t.auth })
      assert.strictEqual(resumed.status, 200)
      assert.strictEqual(resumed.body.status, "active")
      assert.deepStrictEqual(resumed.body.nextRuns, nextRuns)
    })
  )

  it.effect("each slot starts one run; over the daily limit a slot is refused with its reason", () =>
    Effect.gen(function* () {
      const client = yield* TestClient
      const t = yield* tenant
      const created = yield* create(t, { target: orchestrationTarget(t), intervalSeconds: 1 })
      assert.strictEqual(created.status, 201, created.text)
      const id = created.body.id
      // Two slots within the plan's two requests a day, then refusals.
      const slots = yield* eventually(
        Effect.gen(function* () {
          const slots = yield* slotsOf(t, id)
          if (slots.filter((slot) => slot.status === "refused").length < 2)
            return yield* Effect.fail(new Error(`slots: ${JSON.stringify(slots)}`))
          return slots
        }),
        { timeoutMs: 20_000 }
      )
      yield* client.request("POST", `/api/schedules/${id}/pause`, { headers: t.auth })
      const started = slots.filter((slot) => slot.status === "started")
      assert.strictEqual(started.length, dailyLimit, JSON.stringify(slots))
      assert.strictEqual(new Set(started.map((slot) => slot.runId)).size, dailyLimit)
      for (const slot of started) {
        assert.strictEqual(slot.runKind, "execution")
        const execution = yield* client.request("GET", `/api/executions/${slot.runId}`, { headers: t.auth })
        assert.strictEqual(execution.status, 200, execution.text)
        assert.strictEqual(execution.body.orchestrationId, t.orchestrationId)
      }
      const refused = slots.filter((slot) => slot.status === "refused")
      assert.match(refused[0].reason, /allows 2 requests per day/)
      assert.isNull(refused[0].runId)
      // One row per slot, on whole seconds one second apart.
      const times = slots.map((slot) => Date.parse(slot.slotAt)).sort((a, b) => a - b)
      assert.strictEqual(new Set(times).size, times.length)
      for (let i = 1; i < times.length; i++) assert.strictEqual(times[i]! - times[i - 1]!, 1000)
      // The schedule shows its last slot and its last run.
      const schedule = yield* client.request("GET", `/api/schedules/${id}`, { headers: t.auth })
      assert.strictEqual(schedule.body.lastRunAt, new Date(times[times.length - 1]!).toISOString())
      assert.include(
        started.map((slot) => slot.runId),
        schedule.body.lastRunId
      )
      // The executions are the slots' own: none started outside them.
      const sql = yield* SqlClient.SqlClient
      const [row] = yield* sql<{ n: number }>`
        SELECT count(*)::int AS n FROM executions WHERE tenant_id = ${t.account.tenantId}`
      assert.strictEqual(row!.n, dailyLimit)
    })
  )

  it.effect(
    "a slot claimed by a node that died before its start is started once; one whose run started is not started again",
    () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const sql = yield* SqlClient.SqlClient
        const t = yield* tenant
        // Paused: the ticker claims none of its slots; only the rows below are its.
        const created = yield* create(t, { target: orchestrationTarget(t), intervalSeconds: 3600, status: "paused" })
        assert.strictEqual(created.status, 201, created.text)
        const id = created.body.id as string
        const lost = new Date(Date.UTC(2026, 0, 1, 8))
        const halfDone = new Date(Date.UTC(2026, 0, 1, 9))
        // The second slot's run was started (with the slot's key) before its node died.
        const { key } = yield* TestServer.createKey(t.account)
        const earlier = yield* client.request("POST", `/api/v1/orchestrations/${t.orchestrationId}/execute`, {
          headers: { ...TestServer.bearer(key), "idempotency-key": `schedule:${id}:${halfDone.toISOString()}` },
          body: { input: "hello", variables: { topic: "tides" } }
        })
        assert.strictEqual(earlier.status, 202, earlier.text)
        for (const slotAt of [lost, halfDone]) {
          yield* sql`
          INSERT INTO schedule_runs (id, schedule_id, tenant_id, slot_at, status, counted, claimed_at)
          VALUES (${crypto.randomUUID()}, ${id}, ${t.account.tenantId}, ${slotAt}, 'claimed', ${slotAt === halfDone},
            now() - interval '1 minute')`
        }
        const slots = yield* eventually(
          Effect.gen(function* () {
            const slots = yield* slotsOf(t, id)
            if (slots.some((slot) => slot.status !== "started"))
              return yield* Effect.fail(new Error(`slots: ${JSON.stringify(slots)}`))
            return slots
          }),
          { timeoutMs: 20_000 }
        )
        const bySlot = new Map(slots.map((slot) => [slot.slotAt, slot.runId]))
        assert.strictEqual(bySlot.get(halfDone.toISOString()), earlier.body.executionId)
        const rows = yield* sql<{ idempotencyKey: string; n: number }>`
        SELECT idempotency_key, count(*)::int AS n FROM executions
        WHERE tenant_id = ${t.account.tenantId} GROUP BY idempotency_key ORDER BY idempotency_key`
        assert.deepStrictEqual(
          rows.map((row) => [row.idempotencyKey, row.n]),
          [
            [`schedule:${id}:${lost.toISOString()}`, 1],
            [`schedule:${id}:${halfDone.toISOString()}`, 1]
          ]
        )
      })
  )

  it.effect("a team target starts a team run", () =>
    Effect.gen(function* () {
      const client = yield* TestClient
      const t = yield* tenant
      const created = yield* create(t, { target: { teamId: t.teamId, mission: "Say hi" }, intervalSeconds: 1 })
      assert.strictEqual(created.status, 201, created.text)
      const slot = yield* eventually(
        Effect.gen(function* () {
          const slots = yield* slotsOf(t, created.body.id)
          const started = slots.find((slot) => slot.status === "started")
          return started ?? (yield* Effect.fail(new Error(`slots: ${JSON.stringify(slots)}`)))
        }),
        { timeoutMs: 15_000 }
      )
      yield* client.request("POST", `/api/schedules/${created.body.id}/pause`, { headers: t.auth })
      assert.strictEqual(slot.runKind, "team_run")
      const run = yield* client.request("GET", `/api/teams/${t.teamId}/runs/${slot.runId}`, { headers: t.auth })
      assert.strictEqual(run.status, 200, run.text)
    })
  )
})
