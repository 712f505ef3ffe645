import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { awaitFinal, executeMany, orchestrationSetup, request, requestJson, twoStepSetup } from "../support/Cluster.ts"
import { eventually } from "../support/Eventually.ts"
import { FakeOpenAi, openaiKey } from "../support/FakeOpenAi.ts"
import { spawnService, waitReady } from "../support/Process.ts"
import { TestDatabaseUrl } from "../support/TestServer.ts"

const count = 5

describe("crash recovery", () => {
  it.live(
    "executions killed with the process (kill -9) all complete after a restart; no completed step runs twice",
    () =>
      Effect.gen(function* () {
        const databaseUrl = yield* TestDatabaseUrl
        const fake = yield* FakeOpenAi.make({ apiKey: openaiKey })
        const env = { DATABASE_URL: databaseUrl, OPENAI_BASE_URL: fake.url, OPENAI_API_KEY: openaiKey }
        // Step `a` answers quickly, step `b` slowly: the kill lands while every `b` is in flight.
        fake.setDefault({ delayMs: 3_000, text: "b-done" })
        fake.script({ delayMs: 100, text: "a-done", times: count })

        const first = yield* spawnService(env)
        yield* waitReady(first)
        const ids = yield* Effect.promise(async () => {
          const setup = await twoStepSetup(first.baseUrl, "crash@example.com")
          return { bearer: setup.bearer, executions: await executeMany([first.baseUrl], setup, count) }
        })

        // Wait until every `b` has been asked, then kill the process outright.
        const asked = (prefix: string) => fake.requests.filter((r) => r.body.messages.at(-1).content.startsWith(prefix))
        yield* eventually(
          Effect.sync(() => assert.isAtLeast(asked("B ").length, count, "every b asked")),
          { timeoutMs: 10_000 }
        )
        assert.strictEqual(asked("A ").length, count)
        assert.strictEqual(asked("B ").length, count)
        first.child.kill("SIGKILL")
        yield* Effect.promise(() => first.exited)
        fake.setDefault({ delayMs: 100, text: "b-done" })

        const second = yield* spawnService(env)
        yield* waitReady(second)
        const startedAt = Date.now()
        const finals = yield* Effect.promise(() => awaitFinal([second.baseUrl], ids.bearer, ids.executions, 90_000))
        console.log(`after the restart, all ${count} executions finished within ${Date.now() - startedAt} ms`)

        assert.deepStrictEqual(
          finals.map((e) => e.status),
          Array(count).fill("completed")
        )
        assert.deepStrictEqual(
          finals.map((e) => e.output),
          Array(count).fill("b-done")
        )
        // Every `a` completed before the kill and was never asked again; each
        // in-flight `b` was asked again after the restart.
        for (let i = 0; i < count; i++) {
          assert.strictEqual(asked(`A run-${i}`).length, 1, `step a of run-${i}`)
          assert.isAtLeast(asked(`B run-${i} `).length, 2, `step b of run-${i}`)
        }
        second.child.kill("SIGTERM")
        yield* Effect.promise(() => second.exited)
      }),
    180_000
  )
})

describe("crash recovery of one-step runs (their step is not an activity)", () => {
  it.live(
    "a one-step run finished before a kill -9 is never asked again; one in flight at the kill is asked again and completes",
    () =>
      Effect.gen(function* () {
        const databaseUrl = yield* TestDatabaseUrl
        const fake = yield* FakeOpenAi.make({ apiKey: openaiKey })
        const env = { DATABASE_URL: databaseUrl, OPENAI_BASE_URL: fake.url, OPENAI_API_KEY: openaiKey }
        fake.script({ delayMs: 50, text: "quick", times: count })
        fake.setDefault({ delayMs: 3_000, text: "slow" })

        const first = yield* spawnService(env)
        yield* waitReady(first)
        const setup = yield* Effect.promise(() =>
          orchestrationSetup(first.baseUrl, "one-step-crash@example.com", "openai/gpt-4o-mini", [
            { id: "s", prompt: "S {{input}}" }
          ])
        )
        const execute = (input: string) =>
          requestJson(`${first.baseUrl}/api/v1/orchestrations/${setup.orchestrationId}/execute`, {
            method: "POST",
            headers: setup.bearer,
            body: { input }
          }).then((started) => started.executionId as string)
        const inputs = Array.from({ length: 2 * count }, (_, i) => `run-${i}`)
        // The first runs finish before the kill; the others are in flight at it.
        const finished = yield* Effect.promise(() => Promise.all(inputs.slice(0, count).map(execute)))
        const before = yield* Effect.promise(() => awaitFinal([first.baseUrl], setup.bearer, finished, 30_000))
        assert.deepStrictEqual(
          before.map((e) => e.output),
          Array(count).fill("quick")
        )
        const inFlight = yield* Effect.promise(() => Promise.all(inputs.slice(count).map(execute)))
        const asked = (input: string) => fake.requests.filter((r) => r.body.messages.at(-1).content === `S ${input}`)
        yield* eventually(
          Effect.sync(() =>
            assert.isFalse(
              inputs.slice(count).some((input) => asked(input).length === 0),
              "every step in flight"
            )
          ),
          { timeoutMs: 10_000 }
        )
        for (const input of inputs.slice(count)) assert.strictEqual(asked(input).length, 1, `${input} in flight`)
        first.child.kill("SIGKILL")
        yield* Effect.promise(() => first.exited)
        fake.setDefault({ delayMs: 50, text: "after" })

        const second = yield* spawnService(env)
        yield* waitReady(second)
        const finals = yield* Effect.promise(() =>
          awaitFinal([second.baseUrl], setup.bearer, [...finished, ...inFlight], 90_000)
        )
        assert.deepStrictEqual(
          finals.map((e) => e.status),
          Array(2 * count).fill("completed")
        )
        assert.deepStrictEqual(
          finals.map((e) => e.output),
          [...Array(count).fill("quick"), ...Array(count).fill("after")]
        )
        for (const input of inputs.slice(0, count))
          assert.strictEqual(asked(input).length, 1, `${input} finished before the kill`)
        for (const input of inputs.slice(count))
          assert.isAtLeast(asked(input).length, 2, `${input} in flight at the kill`)
        second.child.kill("SIGTERM")
        yield* Effect.promise(() => second.exited)
      }),
    180_000
  )
})

describe("executions whose start did not reach the cluster", () => {
  it.live(
    "an execute answered 503 (its answer gave up waiting on the cluster) still completes, across a kill -9 and a restart",
    () =>
      Effect.gen(function* () {
        const databaseUrl = yield* TestDatabaseUrl
        // Every answer gives up on the cluster at once: the row is stored, the start may or may not be
        // by the kill; either way the restarted node (its own start or its sweep) finishes the run.
        const first = yield* spawnService({
          DATABASE_URL: databaseUrl,
          CLUSTER_CALL_TIMEOUT: "0 millis",
          ENFORCE_DAILY_LIMITS: "false"
        })
        yield* waitReady(first)
        const setup = yield* Effect.promise(async () => {
          const tenant = await orchestrationSetup(first.baseUrl, "sweep@example.com", "local", [
            { id: "s", prompt: "Say {{input}}" }
          ])
          const started = await request(`${first.baseUrl}/api/v1/orchestrations/${tenant.orchestrationId}/execute`, {
            method: "POST",
            headers: tenant.bearer,
            body: { input: "hello" }
          })
          assert.strictEqual(started.status, 503, started.text)
          assert.strictEqual(started.body.detail, "The execution is stored and will start shortly")
          const listed = await requestJson(`${first.baseUrl}/api/v1/executions`, { headers: tenant.bearer })
          assert.strictEqual(listed.total, 1)
          return { bearer: tenant.bearer, id: listed.data[0].id as string }
        })
        first.child.kill("SIGKILL")
        yield* Effect.promise(() => first.exited)

        const second = yield* spawnService({ DATABASE_URL: databaseUrl, ENFORCE_DAILY_LIMITS: "false" })
        yield* waitReady(second)
        const [final] = yield* Effect.promise(() => awaitFinal([second.baseUrl], setup.bearer, [setup.id], 30_000))
        assert.strictEqual(final.status, "completed")
        second.child.kill("SIGTERM")
        yield* Effect.promise(() => second.exited)
      }),
    120_000
  )
})
