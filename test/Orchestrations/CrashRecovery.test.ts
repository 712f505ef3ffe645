import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { FakeOpenAi } from "../support/FakeOpenAi.ts"
import { spawnService, waitReady } from "../support/Process.ts"
import { TestDatabaseUrl } from "../support/TestServer.ts"

const json = async (url: string, init: { method?: string; headers?: Record<string, string>; body?: unknown } = {}) => {
  const response = await fetch(url, {
    method: init.method ?? "GET",
    headers: { "content-type": "application/json", ...init.headers },
    body: init.body === undefined ? null : JSON.stringify(init.body)
  })
  const text = await response.text()
  if (response.status >= 300) throw new Error(`${init.method ?? "GET"} ${url}: ${response.status} ${text}`)
  return JSON.parse(text)
}

const count = 5

describe("crash recovery", () => {
  it.live("executions killed with the process (kill -9) all complete after a restart; no completed step runs twice", () =>
    Effect.gen(function*() {
      const databaseUrl = yield* TestDatabaseUrl
      const fake = yield* FakeOpenAi.make({ apiKey: "sk-crash" })
      const env = { DATABASE_URL: databaseUrl, OPENAI_BASE_URL: fake.url, OPENAI_API_KEY: "sk-crash" }
      // Step `a` answers quickly, step `b` slowly: the kill lands while every `b` is in flight.
      fake.setDefault({ delayMs: 3_000, text: "b-done" })
      fake.script({ delayMs: 100, text: "a-done", times: count })

      const first = yield* spawnService(env)
      yield* waitReady(first)
      const ids = yield* Effect.promise(async () => {
        const base = first.baseUrl
        await json(`${base}/api/auth/register`, { method: "POST", body: { email: "crash@example.com", password: "12345678" } })
        const { token } = await json(`${base}/api/auth/login`, {
          method: "POST",
          body: { email: "crash@example.com", password: "12345678" }
        })
        const session = { authorization: `Bearer ${token}` }
        const { key } = await json(`${base}/api/keys`, { method: "POST", headers: session, body: { name: "k" } })
        const agent = await json(`${base}/api/agents`, {
          method: "POST",
          headers: session,
          body: { name: "Worker", model: "openai/gpt-4o-mini" }
        })
        const orchestration = await json(`${base}/api/orchestrations`, {
          method: "POST",
          headers: session,
          body: {
            name: "Two steps",
            steps: [
              { id: "a", agentId: agent.id, prompt: "A {{input}}" },
              { id: "b", agentId: agent.id, prompt: "B {{input}} after {{steps.a.output}}", dependsOn: ["a"] }
            ]
          }
        })
        const started = []
        for (let i = 0; i < count; i++) {
          started.push(await json(`${base}/api/v1/orchestrations/${orchestration.id}/execute`, {
            method: "POST",
            headers: { authorization: `Bearer ${key}` },
            body: { input: `run-${i}` }
          }))
        }
        return { key: key as string, executions: started.map((s) => s.executionId as string) }
      })

      // Wait until every `b` has been asked, then kill the process outright.
      const asked = (prefix: string) => fake.requests.filter((r) => r.body.messages.at(-1).content.startsWith(prefix))
      for (let i = 0; i < 200 && asked("B ").length < count; i++) yield* Effect.sleep("50 millis")
      assert.strictEqual(asked("A ").length, count)
      assert.strictEqual(asked("B ").length, count)
      first.child.kill("SIGKILL")
      yield* Effect.promise(() => first.exited)
      fake.setDefault({ delayMs: 100, text: "b-done" })

      const second = yield* spawnService(env)
      yield* waitReady(second)
      const startedAt = Date.now()
      const finals = yield* Effect.promise(async () => {
        const results: Array<any> = []
        for (const id of ids.executions) {
          for (;;) {
            const execution = await json(`${second.baseUrl}/api/v1/executions/${id}`, {
              headers: { authorization: `Bearer ${ids.key}` }
            })
            if (["completed", "failed", "cancelled"].includes(execution.status)) {
              results.push(execution)
              break
            }
            if (Date.now() - startedAt > 90_000) throw new Error(`execution ${id} still ${execution.status}`)
            await new Promise((resolve) => setTimeout(resolve, 200))
          }
        }
        return results
      })
      console.log(`after the restart, all ${count} executions finished within ${Date.now() - startedAt} ms`)

      assert.deepStrictEqual(finals.map((e) => e.status), Array(count).fill("completed"))
      assert.deepStrictEqual(finals.map((e) => e.output), Array(count).fill("b-done"))
      // Every `a` completed before the kill and was never asked again; each
      // in-flight `b` was asked again after the restart.
      for (let i = 0; i < count; i++) {
        assert.strictEqual(asked(`A run-${i}`).length, 1, `step a of run-${i}`)
        assert.isAtLeast(asked(`B run-${i} `).length, 2, `step b of run-${i}`)
      }
      second.child.kill("SIGTERM")
      yield* Effect.promise(() => second.exited)
    }), 180_000)
})
