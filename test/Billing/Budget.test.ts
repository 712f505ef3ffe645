import { assert, describe, layer } from "@effect/vitest"
import { Effect, Option } from "effect"
import { SqlClient } from "effect/sql"
import { eventually } from "../support/Eventually.ts"
import { FakeOpenAi, openaiKey } from "../support/FakeOpenAi.ts"
import * as TestServer from "../support/TestServer.ts"
import { type Account, TestClient } from "../support/TestServer.ts"

// Free: 1,000 tokens a day and two models; pro: any OpenAI model.
const withFake = TestServer.layerWithFakeOpenAi(openaiKey, {
  freeDailyTokens: 1000,
  freeModels: Option.some(["local", "openai/gpt-4o-mini"]),
  proModels: Option.some(["local", "openai/*"])
})

const billing = (account: Account) =>
  Effect.flatMap(TestClient, (client) =>
    client.request("GET", "/api/billing", { headers: TestServer.bearer(account.token) })
  )

const setUp = (model = "openai/gpt-4o-mini") =>
  Effect.gen(function* () {
    const client = yield* TestClient
    const account = yield* TestServer.signUp()
    const { key } = yield* TestServer.createKey(account)
    const agent = yield* TestServer.createAgent(account, { model })
    const chat = (message: string, headers: Record<string, string> = {}, conversationId?: string) =>
      client.request("POST", `/api/v1/agents/${agent.id}/chat`, {
        headers: { ...TestServer.bearer(key), ...headers },
        body: conversationId === undefined ? { message } : { message, conversationId }
      })
    return { account, key, agentId: agent.id, chat }
  })

const secondsToUtcMidnight = () => Math.ceil((86_400_000 - (Date.now() % 86_400_000)) / 1000)

layer(withFake, { excludeTestServices: true })("model cost per plan", (it) => {
  describe("the daily token budget", () => {
    it.effect("chat is refused with 429 once the day's tokens are spent; billing reports them", () =>
      Effect.gen(function* () {
        const fake = yield* FakeOpenAi
        fake.reset()
        fake.setDefault({ text: "Sure.", usage: { input: 400, output: 200 } })
        const { account, agentId, chat, key } = yield* setUp()
        const fresh = yield* billing(account)
        assert.deepInclude(fresh.body, { tokenBudget: 1000, tokensUsedToday: 0, tokensRemainingToday: 1000 })

        const first = yield* chat("one")
        assert.strictEqual(first.status, 200, first.text)
        assert.strictEqual(first.body.tokens, 600)
        assert.deepInclude((yield* billing(account)).body, { tokensUsedToday: 600, tokensRemainingToday: 400 })
        // Admitted while tokens remain; this turn ends past the budget.
        assert.strictEqual((yield* chat("two")).status, 200)
        const calls = fake.requests.length

        const refused = yield* chat("three")
        assert.strictEqual(refused.status, 429)
        assert.strictEqual(refused.headers.get("content-type"), "application/problem+json")
        assert.strictEqual(refused.body.type, "urn:agent-host:problem:token-budget-spent")
        assert.strictEqual(refused.body.plan, "free")
        assert.strictEqual(refused.body.budget, 1000)
        assert.strictEqual(refused.body.used, 1200)
        assert.strictEqual(new Date(refused.body.resetAt).getTime() % 86_400_000, 0)
        assert.include(refused.body.detail, "1000 model tokens per day")
        assert.strictEqual(refused.headers.get("ratelimit-limit"), "1000")
        assert.strictEqual(refused.headers.get("ratelimit-remaining"), "0")
        assert.isTrue(Math.abs(Number(refused.headers.get("retry-after")) - secondsToUtcMidnight()) <= 2)
        assert.strictEqual(refused.headers.get("retry-after"), refused.headers.get("ratelimit-reset"))
        // Refused before the model was called.
        assert.strictEqual(fake.requests.length, calls)

        const streamed = yield* chat("four", { accept: "text/event-stream" })
        assert.strictEqual(streamed.status, 429)
        assert.strictEqual(streamed.body.type, "urn:agent-host:problem:token-budget-spent")

        const client = yield* TestClient
        const orchestration = yield* client.request("POST", "/api/orchestrations", {
          headers: TestServer.bearer(account.token),
          body: { name: "Flow", steps: [{ id: "s", agentId, prompt: "Hi" }] }
        })
        const executed = yield* client.request("POST", `/api/v1/orchestrations/${orchestration.body.id}/execute`, {
          headers: TestServer.bearer(key),
          body: { input: "x" }
        })
        assert.strictEqual(executed.status, 429)
        assert.strictEqual(executed.body.type, "urn:agent-host:problem:token-budget-spent")
        assert.isNotNull(executed.headers.get("retry-after"))

        assert.deepInclude((yield* billing(account)).body, {
          plan: "free",
          tokenBudget: 1000,
          tokensUsedToday: 1200,
          tokensRemainingToday: 0
        })
      })
    )

    it.effect("an execution's next step fails with a clear error once the budget is spent", () =>
      Effect.gen(function* () {
        const fake = yield* FakeOpenAi
        fake.reset()
        fake.setDefault({ text: "Done.", usage: { input: 900, output: 150 } })
        const client = yield* TestClient
        const { account, agentId, key } = yield* setUp()
        const created = yield* client.request("POST", "/api/orchestrations", {
          headers: TestServer.bearer(account.token),
          body: {
            name: "Two",
            steps: [
              { id: "first", agentId, prompt: "Start {{input}}" },
              { id: "second", agentId, prompt: "Go on from {{steps.first.output}}", dependsOn: ["first"] }
            ]
          }
        })
        assert.strictEqual(created.status, 201, created.text)
        const execute = (idempotencyKey: string, input: string) =>
          client.request("POST", `/api/v1/orchestrations/${created.body.id}/execute`, {
            headers: { ...TestServer.bearer(key), "idempotency-key": idempotencyKey },
            body: { input }
          })
        const started = yield* execute("budget-run", "x")
        assert.strictEqual(started.status, 202, started.text)
        const execution = yield* waitFinal(key, started.body.executionId)
        assert.strictEqual(execution.status, "failed")
        assert.include(execution.error, "Step second")
        assert.include(execution.error, "model tokens per day")
        assert.strictEqual(execution.tokensUsed, 1050)
        // Only the first step reached the model.
        assert.strictEqual(fake.requests.length, 1)
        assert.deepInclude((yield* billing(account)).body, { tokensUsedToday: 1050, tokensRemainingToday: 0 })

        // With the budget spent, a replay still answers with the execution
        // its key names; a new run, or the key with another body, does not.
        const replay = yield* execute("budget-run", "x")
        assert.strictEqual(replay.status, 202, replay.text)
        assert.deepStrictEqual(replay.body, {
          executionId: started.body.executionId,
          status: "failed",
          orchestrationId: created.body.id
        })
        const other = yield* execute("budget-run", "y")
        assert.strictEqual(other.status, 409, other.text)
        const fresh = yield* execute("another-run", "x")
        assert.strictEqual(fresh.status, 429, fresh.text)
        assert.strictEqual(fresh.body.type, "urn:agent-host:problem:token-budget-spent")
        assert.strictEqual(fake.requests.length, 1)
      })
    )

    it.effect("the count is exact under concurrent chats: it is the sum of the turns' tokens", () =>
      Effect.gen(function* () {
        const fake = yield* FakeOpenAi
        fake.reset()
        fake.setDefault({})
        const n = 30
        fake.script(
          ...Array.from({ length: n }, (_, i) => ({ text: `Reply ${i}`, usage: { input: 10 + i, output: 2 * i + 1 } }))
        )
        const { account, chat } = yield* setUp()
        const sql = yield* SqlClient.SqlClient
        yield* sql`UPDATE tenants SET plan = 'business' WHERE id = ${account.tenantId}`
        const responses = yield* Effect.forEach(
          Array.from({ length: n }, (_, i) => i),
          (i) => chat(`m${i}`, {}, `c${i}`),
          { concurrency: "unbounded" }
        )
        assert.deepStrictEqual(
          responses.map((r) => r.status),
          Array(n).fill(200)
        )
        const sum = responses.reduce((total, r) => total + (r.body.tokens as number), 0)
        const expected = Array.from({ length: n }, (_, i) => 10 + i + 2 * i + 1).reduce((a, b) => a + b, 0)
        assert.strictEqual(sum, expected)
        const status = yield* billing(account)
        assert.deepInclude(status.body, { plan: "business", tokenBudget: null, tokensRemainingToday: null })
        assert.strictEqual(status.body.tokensUsedToday, expected)
      })
    )
  })

  describe("the tokens of runs' steps", () => {
    it.effect(
      "concurrent steps are each charged before their run is final, and the day's count is their exact sum",
      () =>
        Effect.gen(function* () {
          const fake = yield* FakeOpenAi
          fake.reset()
          fake.setDefault({})
          const n = 24
          fake.script(
            ...Array.from({ length: n }, (_, i) => ({ text: `Done ${i}`, usage: { input: 5 + i, output: 3 * i + 2 } }))
          )
          const client = yield* TestClient
          const { account, agentId, key } = yield* setUp()
          const sql = yield* SqlClient.SqlClient
          yield* sql`UPDATE tenants SET plan = 'pro' WHERE id = ${account.tenantId}`
          const created = yield* client.request("POST", "/api/orchestrations", {
            headers: TestServer.bearer(account.token),
            body: { name: "One", steps: [{ id: "only", agentId, prompt: "Do {{input}}" }] }
          })
          assert.strictEqual(created.status, 201, created.text)
          const started = yield* Effect.forEach(
            Array.from({ length: n }, (_, i) => i),
            (i) =>
              client.request("POST", `/api/v1/orchestrations/${created.body.id}/execute`, {
                headers: TestServer.bearer(key),
                body: { input: `run ${i}` }
              }),
            { concurrency: "unbounded" }
          )
          assert.deepStrictEqual(
            started.map((r) => r.status),
            Array(n).fill(202)
          )
          const finals = yield* Effect.forEach(started, (r) => waitFinal(key, r.body.executionId), {
            concurrency: "unbounded"
          })
          assert.deepStrictEqual(
            finals.map((e) => e.status),
            Array(n).fill("completed")
          )
          const expected = Array.from({ length: n }, (_, i) => 5 + i + 3 * i + 2).reduce((a, b) => a + b, 0)
          assert.strictEqual(
            finals.reduce((total, e) => total + (e.tokensUsed as number), 0),
            expected
          )
          // Read straight from the table, not through the service (which would
          // wait for this node's writes in flight): the charges landed before
          // the runs were final.
          const rows = yield* sql<{ tokens: number }>`
          SELECT coalesce(sum(tokens), 0)::int AS tokens FROM daily_usage WHERE tenant_id = ${account.tenantId}`
          assert.strictEqual(rows[0]!.tokens, expected)
        })
    )
  })

  describe("the models a plan may use", () => {
    it.effect("refused at agent create and update, and at chat and run time after a plan change", () =>
      Effect.gen(function* () {
        const fake = yield* FakeOpenAi
        fake.reset()
        fake.setDefault({ usage: { input: 5, output: 5 } })
        const client = yield* TestClient
        const sql = yield* SqlClient.SqlClient
        const account = yield* TestServer.signUp()
        const { key } = yield* TestServer.createKey(account)
        const auth = TestServer.bearer(account.token)

        const refusedCreate = yield* client.request("POST", "/api/agents", {
          headers: auth,
          body: { name: "Big", model: "openai/gpt-4o" }
        })
        assert.strictEqual(refusedCreate.status, 403)
        assert.strictEqual(refusedCreate.body.type, "urn:agent-host:problem:model-not-allowed")
        assert.deepInclude(refusedCreate.body, { plan: "free", model: "openai/gpt-4o" })
        assert.include(refusedCreate.body.detail, "free plan may not use")
        const billed = yield* billing(account)
        assert.deepStrictEqual(billed.body.models, ["local", "openai/gpt-4o-mini"])

        const small = yield* TestServer.createAgent(account, { model: "openai/gpt-4o-mini" })
        const refusedUpdate = yield* client.request("PUT", `/api/agents/${small.id}`, {
          headers: auth,
          body: { model: "anthropic/claude-3-5-haiku" }
        })
        assert.strictEqual(refusedUpdate.status, 403)
        assert.strictEqual(refusedUpdate.body.type, "urn:agent-host:problem:model-not-allowed")

        // On pro, any OpenAI model.
        yield* sql`UPDATE tenants SET plan = 'pro' WHERE id = ${account.tenantId}`
        const big = yield* TestServer.createAgent(account, { model: "openai/gpt-4o" })
        const chatBig = () =>
          client.request("POST", `/api/v1/agents/${big.id}/chat`, {
            headers: TestServer.bearer(key),
            body: { message: "hi" }
          })
        assert.strictEqual((yield* chatBig()).status, 200)
        const orchestration = yield* client.request("POST", "/api/orchestrations", {
          headers: auth,
          body: { name: "Big flow", steps: [{ id: "s", agentId: big.id, prompt: "Hi" }] }
        })
        assert.strictEqual(orchestration.status, 201)

        // Back to free: the agent exists, but its model is refused when used.
        yield* sql`UPDATE tenants SET plan = 'free' WHERE id = ${account.tenantId}`
        const calls = fake.requests.length
        const refusedChat = yield* chatBig()
        assert.strictEqual(refusedChat.status, 403)
        assert.deepInclude(refusedChat.body, {
          type: "urn:agent-host:problem:model-not-allowed",
          plan: "free",
          model: "openai/gpt-4o"
        })
        const started = yield* client.request("POST", `/api/v1/orchestrations/${orchestration.body.id}/execute`, {
          headers: TestServer.bearer(key),
          body: { input: "x" }
        })
        assert.strictEqual(started.status, 202)
        const execution = yield* waitFinal(key, started.body.executionId)
        assert.strictEqual(execution.status, "failed")
        assert.include(execution.error, `Step s: The free plan may not use the model "openai/gpt-4o"`)
        assert.strictEqual(fake.requests.length, calls)
      })
    )
  })
})

// --- helpers ------------------------------------------------------------------

const waitFinal = (key: string, id: string) =>
  Effect.flatMap(TestClient, (client) =>
    eventually(
      Effect.map(client.request("GET", `/api/v1/executions/${id}`, { headers: TestServer.bearer(key) }), (response) => {
        assert.include(["completed", "failed", "cancelled"], response.body.status, "the execution finished")
        return response.body
      }),
      { timeoutMs: 15_000 }
    )
  )
