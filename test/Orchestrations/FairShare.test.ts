import { assert, describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import { FakeOpenAi, openaiKey } from "../support/FakeOpenAi.ts"
import { awaitRun, startRun, teamOf } from "../support/Teams.ts"
import * as TestServer from "../support/TestServer.ts"
import { bearer, TestClient, waitFor } from "../support/TestServer.ts"

// A fair share per tenant (issue 33): executions and team runs of one tenant
// run at most FREE_MAX_RUNNING_RUNS at once, across the cluster, measured at
// the provider; the rest wait in order and all end; another tenant is not
// held up; a cancel closes the provider connections of the runs it stops.

const freeCap = 3
const proCap = 60

const withFake = TestServer.layerWithFakeOpenAi(openaiKey, {
  freeMaxRunningRuns: freeCap,
  proMaxRunningRuns: proCap,
  // The runs below are many: neither the day's requests nor its tokens may stop them.
  freeDailyLimit: 1_000_000,
  freeDailyTokens: 1_000_000_000,
  proDailyLimit: 1_000_000,
  proDailyTokens: 1_000_000_000
})

const finalStatuses = ["completed", "failed", "cancelled"]

/** A tenant with a key, a one-step orchestration and a one-member team, both on the fake provider. */
const tenant = (input: string) =>
  Effect.gen(function* () {
    const client = yield* TestClient
    const account = yield* TestServer.signUp()
    const { key } = yield* TestServer.createKey(account)
    const { agents, team } = yield* teamOf(account, "openai/gpt-4o-mini", 1, { maxTurns: 2 })
    const created = yield* client.request("POST", "/api/orchestrations", {
      headers: bearer(account.token),
      body: { name: "One", steps: [{ id: "s", agentId: agents[0]!.id, prompt: `Say {{input}} ${input}` }] }
    })
    assert.strictEqual(created.status, 201, created.text)
    const auth = bearer(key)
    const execute = (headers: Record<string, string> = {}) =>
      client.request("POST", `/api/v1/orchestrations/${created.body.id}/execute`, {
        headers: { ...auth, ...headers },
        body: { input }
      })
    const runTeam = (headers: Record<string, string> = {}) =>
      client.request("POST", `/api/v1/teams/${team.id}/run`, {
        headers: { ...auth, ...headers },
        body: { mission: input }
      })
    const execution = (id: string) =>
      Effect.map(client.request("GET", `/api/v1/executions/${id}`, { headers: auth }), (response) => response.body)
    const teamRun = (id: string) =>
      Effect.map(
        client.request("GET", `/api/v1/teams/${team.id}/runs/${id}`, { headers: auth }),
        (response) => response.body.data
      )
    const cancelExecution = (id: string) => client.request("POST", `/api/v1/executions/${id}/cancel`, { headers: auth })
    const cancelRun = (id: string) =>
      client.request("POST", `/api/v1/teams/${team.id}/runs/${id}/cancel`, { headers: auth })
    return { account, execute, runTeam, execution, teamRun, cancelExecution, cancelRun }
  })

/** Starts `executions` executions and `runs` team runs at once; every answer must be a 202. */
const startMany = (t: Effect.Success<ReturnType<typeof tenant>>, executions: number, runs: number) =>
  Effect.gen(function* () {
    const started = yield* Effect.forEach(
      [
        ...Array.from({ length: executions }, () => "execution" as const),
        ...Array.from({ length: runs }, () => "run" as const)
      ],
      (kind) => Effect.map(kind === "execution" ? t.execute() : t.runTeam(), (response) => ({ kind, response })),
      { concurrency: "unbounded" }
    )
    for (const { response } of started) assert.strictEqual(response.status, 202, response.text)
    return {
      executionIds: started.filter((s) => s.kind === "execution").map((s) => s.response.body.executionId as string),
      runIds: started.filter((s) => s.kind === "run").map((s) => s.response.body.data.runId as string)
    }
  })

layer(withFake, { excludeTestServices: true })("a fair share per tenant", (it) => {
  describe("the per-tenant cap on running executions and team runs", () => {
    it.effect(
      "100 runs of one tenant at once: at most the cap at the provider, the rest wait in order and all end; another tenant starts at once",
      () =>
        Effect.gen(function* () {
          const fake = yield* FakeOpenAi
          const a = yield* tenant("tenant-a")
          const b = yield* tenant("tenant-b")
          fake.reset()
          // Every call is held open until the test lets it answer.
          fake.setDefault({ hold: true, text: "FINAL ANSWER: done" })

          const { executionIds, runIds } = yield* startMany(a, 50, 50)
          yield* waitFor(
            "the cap's worth of calls at the provider",
            Effect.sync(() => (fake.open === freeCap ? true : undefined))
          )

          // The others wait, `pending`, and say why.
          const pending = yield* Effect.forEach(executionIds, a.execution, { concurrency: 10 })
          const waiting = pending.filter((execution) => execution.waiting !== undefined)
          assert.isAtLeast(waiting.length, 50 - freeCap)
          for (const execution of waiting) {
            assert.strictEqual(execution.status, "pending")
            assert.strictEqual(execution.waiting.reason, "tenant_concurrency")
            assert.strictEqual(execution.waiting.limit, freeCap)
          }
          const runsWaiting = (yield* Effect.forEach(runIds, a.teamRun, { concurrency: 10 })).filter(
            (run) => run.waiting !== undefined
          )
          assert.isAtLeast(runsWaiting.length, 50 - freeCap)
          // Every waiting run has a distinct place in one queue of the tenant's.
          const places = [...waiting, ...runsWaiting].map((run) => run.waiting.ahead).sort((x, y) => x - y)
          assert.deepStrictEqual(
            places,
            places.map((_, i) => i)
          )

          // A request that asks not to wait is refused, with Retry-After, and stores nothing.
          const refused = yield* a.execute({ prefer: "wait=0" })
          assert.strictEqual(refused.status, 429, refused.text)
          assert.strictEqual(refused.body.type, "urn:agent-host:problem:too-many-running-runs")
          assert.strictEqual(refused.body.limit, freeCap)
          assert.strictEqual(refused.headers.get("retry-after"), "5")
          const refusedRun = yield* a.runTeam({ prefer: "wait=0" })
          assert.strictEqual(refusedRun.status, 429, refusedRun.text)

          // Another tenant's run reaches the provider at once, beside the first tenant's.
          const other = yield* b.execute({ prefer: "wait=0" })
          assert.strictEqual(other.status, 202, other.text)
          yield* waitFor(
            "the other tenant's call at the provider",
            Effect.sync(() => (fake.open === freeCap + 1 ? true : undefined)),
            5_000
          )
          assert.strictEqual((yield* b.execution(other.body.executionId)).status, "running")
          assert.strictEqual(fake.maxOpen, freeCap + 1)

          // The first tenant alone from now on: its runs go through, the cap's worth at a time.
          fake.releaseHeld()
          yield* waitFor(
            "the other tenant's run to end",
            Effect.map(b.execution(other.body.executionId), (execution) =>
              execution.status === "completed" ? true : undefined
            )
          )
          fake.reset()
          const allFinal = Effect.gen(function* () {
            const executions = yield* Effect.forEach(executionIds, a.execution, { concurrency: 10 })
            const runs = yield* Effect.forEach(runIds, a.teamRun, { concurrency: 10 })
            return [...executions, ...runs]
          })
          const finals = yield* waitFor(
            "every run to end",
            Effect.gen(function* () {
              fake.releaseHeld()
              assert.isAtMost(fake.open, freeCap)
              const all = yield* allFinal
              return all.every((run) => finalStatuses.includes(run.status)) ? all : undefined
            }),
            120_000
          )
          assert.isAtMost(fake.maxOpen, freeCap)
          for (const run of finals) {
            assert.strictEqual(run.status, "completed", JSON.stringify(run))
            assert.isUndefined(run.waiting)
          }
        }),
      180_000
    )
  })

  describe("cancel", () => {
    it.effect(
      "cancelling 50 running runs closes every provider connection within a second",
      () =>
        Effect.gen(function* () {
          const fake = yield* FakeOpenAi
          const sql = yield* SqlClient.SqlClient
          const c = yield* tenant("tenant-c")
          // A plan whose cap lets all 50 run.
          yield* sql`UPDATE tenants SET plan = 'pro' WHERE id = ${c.account.tenantId}`
          fake.reset()
          fake.setDefault({ hold: true, text: "FINAL ANSWER: done" })

          const { executionIds, runIds } = yield* startMany(c, 25, 25)
          yield* waitFor(
            "50 calls held open at the provider",
            Effect.sync(() => (fake.open === 50 ? true : undefined)),
            30_000
          )

          const cancels = yield* Effect.forEach(
            [...executionIds.map((id) => c.cancelExecution(id)), ...runIds.map((id) => c.cancelRun(id))],
            (cancel) => cancel,
            { concurrency: "unbounded" }
          )
          const answered = Date.now()
          for (const cancel of cancels) assert.strictEqual(cancel.status, 202, cancel.text)
          yield* waitFor(
            "every provider connection to close",
            Effect.sync(() => (fake.open === 0 ? true : undefined)),
            5_000
          )
          const closed = fake.closedByClient
          assert.strictEqual(closed.length, 50)
          assert.isAtMost(Math.max(...closed) - answered, 1_000)
          for (const id of executionIds) assert.strictEqual((yield* c.execution(id)).status, "cancelled")
          for (const id of runIds) assert.strictEqual((yield* c.teamRun(id)).status, "cancelled")
        }),
      60_000
    )

    it.effect("a run cancelled while it waits for a slot leaves the queue and never reaches the provider", () =>
      Effect.gen(function* () {
        const fake = yield* FakeOpenAi
        const d = yield* tenant("tenant-d")
        fake.reset()
        fake.setDefault({ hold: true, text: "FINAL ANSWER: done" })
        const { executionIds } = yield* startMany(d, freeCap + 2, 0)
        yield* waitFor(
          "the cap's worth of calls",
          Effect.sync(() => (fake.open === freeCap ? true : undefined))
        )
        const waiting = yield* waitFor(
          "the waiting executions",
          Effect.gen(function* () {
            const executions = yield* Effect.forEach(executionIds, d.execution)
            const queued = executions.filter((execution) => execution.waiting !== undefined)
            return queued.length === 2 ? queued : undefined
          })
        )
        for (const execution of waiting) assert.strictEqual((yield* d.cancelExecution(execution.id)).status, 202)
        fake.releaseHeld()
        for (const id of executionIds) {
          const final = yield* waitFor(
            "the execution to end",
            Effect.map(d.execution(id), (execution) =>
              finalStatuses.includes(execution.status) ? execution : undefined
            )
          )
          const wasWaiting = waiting.some((execution) => execution.id === id)
          assert.strictEqual(final.status, wasWaiting ? "cancelled" : "completed")
          assert.isUndefined(final.waiting)
        }
        // Only the runs that held slots called the provider.
        assert.strictEqual(fake.requests.length, freeCap)
      })
    )
  })

  describe("team limits bounded by plan", () => {
    it.effect("a team past the plan's maxTurns, tokenBudget or timeoutMs is refused, naming the setting", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const account = yield* TestServer.signUp()
        const agent = yield* TestServer.createAgent(account, { model: "openai/gpt-4o-mini" })
        const members = [{ agentId: agent.id }]
        const refused = yield* client.request("POST", "/api/teams", {
          headers: bearer(account.token),
          body: { name: "Big", members, maxTurns: 50, tokenBudget: 10_000_000, timeoutMs: 3_600_000 }
        })
        assert.strictEqual(refused.status, 400, refused.text)
        const paths = refused.body.errors.map((error: { path: Array<string> }) => error.path.join("."))
        assert.deepStrictEqual(paths, ["payload.maxTurns", "payload.tokenBudget", "payload.timeoutMs"])
        assert.include(refused.body.errors[0].message, "FREE_TEAM_MAX_TURNS")
        assert.include(refused.body.errors[1].message, "FREE_TEAM_TOKEN_BUDGET")
        assert.include(refused.body.errors[2].message, "FREE_TEAM_TIMEOUT")

        const created = yield* client.request("POST", "/api/teams", {
          headers: bearer(account.token),
          body: { name: "Small", members, maxTurns: 12 }
        })
        assert.strictEqual(created.status, 201, created.text)
        const updated = yield* client.request("PUT", `/api/teams/${created.body.id}`, {
          headers: bearer(account.token),
          body: { maxTurns: 13 }
        })
        assert.strictEqual(updated.status, 400, updated.text)
        assert.include(updated.body.detail, "FREE_TEAM_MAX_TURNS")
      })
    )

    it.effect(
      "a team set under a larger plan runs within the smaller plan's bounds",
      () =>
        Effect.gen(function* () {
          const fake = yield* FakeOpenAi
          const sql = yield* SqlClient.SqlClient
          const account = yield* TestServer.signUp()
          const { key } = yield* TestServer.createKey(account)
          yield* sql`UPDATE tenants SET plan = 'pro' WHERE id = ${account.tenantId}`
          const { team } = yield* teamOf(account, "openai/gpt-4o-mini", 1, { maxTurns: 20 })
          assert.strictEqual(team.maxTurns, 20)
          yield* sql`UPDATE tenants SET plan = 'free' WHERE id = ${account.tenantId}`
          fake.reset()
          // Never a final answer: the run goes to its turn limit.
          fake.setDefault({ text: "Still thinking." })
          const runId = yield* startRun(key, team.id, "Go on")
          const run = yield* awaitRun(account, team.id, runId, 60_000)
          assert.strictEqual(run.status, "completed", JSON.stringify(run))
          assert.strictEqual(run.stopReason, "max_turns")
          // The free plan's 12 turns, and the closing turn.
          assert.strictEqual(run.turns, 13)
        }),
      90_000
    )
  })
})
