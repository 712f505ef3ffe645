import { assert, describe, layer } from "@effect/vitest"
import { Duration, Effect, Fiber, Layer, Option, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import { promptEstimate } from "../../src/Models/Models.ts"
import { countTokens } from "../../src/Models/Tokens.ts"
import { anthropicKey, FakeAnthropic } from "../support/FakeAnthropic.ts"
import { ceilingOf, FakeOpenAi, type FakeServer, openaiKey, type RecordedRequest } from "../support/FakeOpenAi.ts"
import { awaitRun, teamOf } from "../support/Teams.ts"
import * as TestServer from "../support/TestServer.ts"
import { type Account, bearer, TestClient } from "../support/TestServer.ts"

const openaiModel = "openai/gpt-4o-mini"
const anthropicModel = "anthropic/claude-3-5-haiku-latest"

// A small budget (free and pro alike) against work that asks for several times as much.
const budget = 3000
const freeMaxOutput = 200
const proMaxOutput = 600
const businessMaxOutput = 900

const withFakes = Layer.unwrap(
  Effect.gen(function* () {
    const openai = yield* FakeOpenAi.make({ apiKey: openaiKey })
    const anthropic = yield* FakeAnthropic.make({ apiKey: anthropicKey })
    return TestServer.layer({
      openaiBaseUrl: openai.url,
      openaiApiKey: Option.some(Redacted.make(openaiKey)),
      anthropicBaseUrl: anthropic.url,
      anthropicApiKey: Option.some(Redacted.make(anthropicKey)),
      modelTimeout: Duration.seconds(3),
      modelMaxRetries: 0,
      freeDailyTokens: budget,
      proDailyTokens: budget,
      // Requests are not what is measured here.
      freeDailyLimit: 100_000,
      freeMaxOutputTokens: freeMaxOutput,
      proMaxOutputTokens: proMaxOutput,
      businessMaxOutputTokens: businessMaxOutput
    }).pipe(Layer.merge(Layer.succeed(FakeOpenAi, openai)), Layer.merge(Layer.succeed(FakeAnthropic, anthropic)))
  })
)

// --- what the providers saw --------------------------------------------------

const fakes = Effect.gen(function* () {
  return { openai: yield* FakeOpenAi, anthropic: yield* FakeAnthropic }
})

/** Both fakes answer after `delayMs` (so calls overlap), billing the whole max_tokens of each request. */
const expensive = (delayMs = 120) =>
  Effect.gen(function* () {
    const { anthropic, openai } = yield* fakes
    for (const fake of [openai, anthropic]) {
      fake.reset()
      fake.setDefault({ delayMs, fillMaxTokens: true })
    }
  })

/**
 * What the service reserved for a request the fake received: the prompt's
 * tokens as estimated for its provider, plus the max_tokens it sent.
 */
const reservationOf = (provider: "openai" | "anthropic", request: RecordedRequest) => {
  const body = request.body
  const texts: Array<string> = [
    ...(provider === "anthropic" && typeof body.system === "string" ? [body.system] : []),
    ...body.messages.map((message: { content: string }) => message.content)
  ]
  const tokens = texts.reduce((total, text) => total + countTokens(text), 0)
  return promptEstimate(`${provider}/${body.model}`, tokens, texts.length) + ceilingOf(request)!
}

const billed = (fake: FakeServer) => fake.reported.reduce((total, usage) => total + usage.input + usage.output, 0)

/** Today's row of the tenant: tokens used and reserved. */
const usageOf = (tenantId: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const rows = yield* sql<{ tokens: number; reserved: number }>`
      SELECT coalesce(sum(tokens), 0)::int AS tokens, coalesce(sum(reserved), 0)::int AS reserved
      FROM daily_usage WHERE tenant_id = ${tenantId}`
    return rows[0]!
  }).pipe(Effect.orDie)

/**
 * Once everything has settled: every request carried a max_tokens within the
 * plan's (`ceiling`); the tokens the providers billed are at most the budget
 * plus one reservation; nothing is left reserved, and the day's count is what
 * they billed. Where calls were interrupted (`interrupted`: the siblings of a
 * refused step stop), an interrupted call counts its whole reservation, which
 * the provider may have billed anyway: the count is at least what was billed,
 * and at most every call's reservation.
 */
const expectWithinBudget = (account: Account, options: { readonly ceiling: number; readonly interrupted: boolean }) =>
  Effect.gen(function* () {
    const { anthropic, openai } = yield* fakes
    const requests = [
      ...openai.requests.map((request) => ({ provider: "openai" as const, request })),
      ...anthropic.requests.map((request) => ({ provider: "anthropic" as const, request }))
    ]
    assert.isAbove(requests.length, 0)
    for (const { request } of requests) {
      const sent = ceilingOf(request)
      assert.isNumber(sent, JSON.stringify(request.body))
      assert.isAtLeast(sent!, 1)
      assert.isAtMost(sent!, options.ceiling)
    }
    const largestReservation = Math.max(...requests.map(({ provider, request }) => reservationOf(provider, request)))
    const charged = billed(openai) + billed(anthropic)
    assert.isAtMost(charged, budget + largestReservation, `billed ${charged} against ${budget} + ${largestReservation}`)
    // The fakes bill no more than the reservation: words of the prompt, and at most max_tokens.
    for (const { provider, request } of requests) {
      assert.isAtMost(countWordsOf(request) + ceilingOf(request)!, reservationOf(provider, request))
    }
    const answered = new Set([...openai.reported, ...anthropic.reported].map((usage) => usage.request))
    const abandoned = requests.filter(({ request }) => !answered.has(request))
    const settled = yield* TestServer.waitFor(
      "every reservation settled",
      Effect.map(usageOf(account.tenantId), (row) => (row.reserved === 0 ? row : undefined))
    )
    if (options.interrupted) {
      assert.isAtLeast(settled.tokens, charged)
      assert.isAtMost(
        settled.tokens,
        requests.reduce((total, { provider, request }) => total + reservationOf(provider, request), 0)
      )
    } else {
      assert.deepStrictEqual(abandoned, [])
      assert.strictEqual(settled.tokens, charged)
    }
    return { charged, largestReservation, requests: requests.length }
  })

const countWordsOf = (request: RecordedRequest) => {
  const words = (text: unknown) =>
    typeof text === "string" ? text.split(/\s+/).filter((word) => word !== "").length : 0
  return (
    words(request.body.system) +
    request.body.messages.reduce((total: number, message: { content: string }) => total + words(message.content), 0)
  )
}

// --- the service's routes ------------------------------------------------------

const chat = (key: string, agentId: string, body: Record<string, unknown>, stream = false) =>
  Effect.flatMap(TestClient, (client) =>
    client.request("POST", `/api/v1/agents/${agentId}/chat`, {
      headers: { ...bearer(key), ...(stream ? { accept: "text/event-stream" } : {}) },
      body
    })
  )

/** A chat's outcome: "ok", "spent" (the budget refused it, as a 429 or a stream's error event), or what else came. */
const outcomeOf = (response: TestServer.TestResponse, stream: boolean): string => {
  if (!stream || response.status !== 200) {
    if (response.status === 200) return "ok"
    if (response.status === 429 && response.body?.type === "urn:agent-host:problem:token-budget-spent") {
      assert.isNotNull(response.headers.get("retry-after"))
      return "spent"
    }
    return `${response.status} ${response.text}`
  }
  const events = response.text
    .split("\n\n")
    .filter((block) => block !== "")
    .map((block) => ({
      event: block.split("\n")[0]!.slice("event: ".length),
      data: JSON.parse(block.split("\n")[1]!.slice("data: ".length))
    }))
  const last = events.at(-1)
  if (last?.event === "done") return "ok"
  if (last?.event === "error" && last.data.type === "urn:agent-host:problem:token-budget-spent") return "spent"
  return `stream ${response.text}`
}

const execute = (key: string, orchestrationId: string, input: string) =>
  Effect.flatMap(TestClient, (client) =>
    client.request("POST", `/api/v1/orchestrations/${orchestrationId}/execute`, {
      headers: bearer(key),
      body: { input }
    })
  )

const waitExecution = (key: string, id: string) =>
  TestServer.waitFor(
    `execution ${id} final`,
    Effect.flatMap(TestClient, (client) =>
      Effect.map(client.request("GET", `/api/v1/executions/${id}`, { headers: bearer(key) }), (response) =>
        ["completed", "failed", "cancelled"].includes(response.body?.status) ? response.body : undefined
      )
    ),
    60_000
  )

const startRun = (key: string, teamId: string, mission: string) =>
  Effect.flatMap(TestClient, (client) =>
    client.request("POST", `/api/v1/teams/${teamId}/run`, { headers: bearer(key), body: { mission } })
  )

const setUp = Effect.gen(function* () {
  const account = yield* TestServer.signUp()
  const { key } = yield* TestServer.createKey(account, ["read", "chat", "execute", "teams"])
  return { account, key }
})

/** An orchestration of `steps` independent steps on one agent. */
const wideOrchestration = (account: Account, agentId: string, steps: number) =>
  Effect.gen(function* () {
    const client = yield* TestClient
    const created = yield* client.request("POST", "/api/orchestrations", {
      headers: bearer(account.token),
      body: {
        name: "Wide",
        steps: Array.from({ length: steps }, (_, i) => ({ id: `s${i}`, agentId, prompt: `Part ${i} of {{input}}` }))
      }
    })
    assert.strictEqual(created.status, 201, created.text)
    return created.body.id as string
  })

layer(withFakes, { excludeTestServices: true })("token reservations", (it) => {
  describe("concurrent work of one tenant against a small budget", () => {
    it.effect("executions of many independent steps, several at once", () =>
      Effect.gen(function* () {
        yield* expensive()
        const { account, key } = yield* setUp
        const agent = yield* TestServer.createAgent(account, {
          model: openaiModel,
          instructions: "You write one part."
        })
        const orchestrationId = yield* wideOrchestration(account, agent.id, 10)
        // 40 calls of more than 200 tokens each: about three times the budget.
        const started = yield* Effect.forEach(
          Array.from({ length: 4 }, (_, i) => i),
          (i) => execute(key, orchestrationId, `run ${i}`),
          { concurrency: "unbounded" }
        )
        assert.deepStrictEqual(
          started.map((response) => response.status),
          [202, 202, 202, 202]
        )
        const finals = yield* Effect.forEach(started, (response) => waitExecution(key, response.body.executionId), {
          concurrency: "unbounded"
        })
        const refused = finals.filter((execution) => execution.status === "failed")
        assert.isAbove(refused.length, 0)
        for (const execution of refused) assert.include(execution.error, "model tokens per day")
        yield* expectWithinBudget(account, { ceiling: freeMaxOutput, interrupted: true })
      })
    )

    it.effect("team runs, closing turns included", () =>
      Effect.gen(function* () {
        yield* expensive()
        const { account, key } = yield* setUp
        // Pro: more of its runs run at once, each turn asking for up to 600 tokens.
        const sql = yield* SqlClient.SqlClient
        yield* sql`UPDATE tenants SET plan = 'pro' WHERE id = ${account.tenantId}`
        const { team } = yield* teamOf(account, anthropicModel, 2, { maxTurns: 4 })
        // 6 runs of 4 turns and a closing turn each: about eight times the budget.
        const started = yield* Effect.forEach(
          Array.from({ length: 6 }, (_, i) => i),
          (i) => startRun(key, team.id, `Mission ${i}`),
          { concurrency: "unbounded" }
        )
        assert.deepStrictEqual(
          started.map((response) => response.status),
          Array(6).fill(202)
        )
        const runs = yield* Effect.forEach(
          started,
          (response) => awaitRun(account, team.id, response.body.data.runId, 60_000),
          {
            concurrency: "unbounded"
          }
        )
        // A turn refused fails its run; a closing turn refused leaves the run to end with what it has.
        assert.isTrue(
          runs.some((run) => run.status === "failed" && (run.error ?? "").includes("model tokens per day")) ||
            runs.some((run) => run.status === "completed" && run.turns < 5),
          JSON.stringify(runs.map((run) => [run.status, run.turns, run.error]))
        )
        // A run's turns follow one another: none is interrupted, and each run counts what it spent.
        const { charged } = yield* expectWithinBudget(account, { ceiling: proMaxOutput, interrupted: false })
        assert.strictEqual(
          runs.reduce((total, run) => total + run.tokensUsed, 0),
          charged
        )
      })
    )

    it.effect("chats with and without memory, streamed or not, on both providers", () =>
      Effect.gen(function* () {
        yield* expensive()
        const { account, key } = yield* setUp
        const remembering = yield* TestServer.createAgent(account, { model: anthropicModel, memoryEnabled: true })
        const forgetting = yield* TestServer.createAgent(account, { model: openaiModel, memoryEnabled: false })
        // 30 chats of more than 200 tokens each: about twice the budget.
        const asks = Array.from({ length: 30 }, (_, i) => ({
          agentId: i % 2 === 0 ? remembering.id : forgetting.id,
          stream: i % 3 === 0,
          body: { message: `Question ${i}: how far is it?`, conversationId: `c${i % 5}` }
        }))
        const outcomes = yield* Effect.forEach(
          asks,
          (ask) =>
            Effect.map(chat(key, ask.agentId, ask.body, ask.stream), (response) => outcomeOf(response, ask.stream)),
          { concurrency: "unbounded" }
        )
        for (const outcome of outcomes) assert.include(["ok", "spent"], outcome)
        assert.include(outcomes, "spent")
        assert.include(outcomes, "ok")
        yield* expectWithinBudget(account, { ceiling: freeMaxOutput, interrupted: false })
      })
    )

    it.effect("executions, team runs and chats all at once", () =>
      Effect.gen(function* () {
        yield* expensive()
        const { account, key } = yield* setUp
        const agent = yield* TestServer.createAgent(account, { model: openaiModel, memoryEnabled: true })
        const orchestrationId = yield* wideOrchestration(account, agent.id, 8)
        const { team } = yield* teamOf(account, anthropicModel, 2, { maxTurns: 3 })
        const executions = Effect.forEach([0, 1, 2], (i) => execute(key, orchestrationId, `run ${i}`), {
          concurrency: "unbounded"
        })
        const runs = Effect.forEach([0, 1, 2], (i) => startRun(key, team.id, `Mission ${i}`), {
          concurrency: "unbounded"
        })
        const chats = Effect.forEach(
          Array.from({ length: 12 }, (_, i) => i),
          (i) =>
            Effect.map(chat(key, agent.id, { message: `Hello ${i}`, conversationId: `m${i % 3}` }, i % 2 === 0), (r) =>
              outcomeOf(r, i % 2 === 0)
            ),
          { concurrency: "unbounded" }
        )
        const [executed, started, chatted] = yield* Effect.all([executions, runs, chats], { concurrency: "unbounded" })
        // Accepted while the day's tokens were not yet spent, or refused at once.
        for (const response of [...executed, ...started]) assert.include([202, 429], response.status, response.text)
        for (const outcome of chatted) assert.include(["ok", "spent"], outcome)
        const finals = yield* Effect.forEach(
          executed.filter((r) => r.status === 202),
          (r) => waitExecution(key, r.body.executionId),
          { concurrency: "unbounded" }
        )
        const runsDone = yield* Effect.forEach(
          started.filter((r) => r.status === 202),
          (r) => awaitRun(account, team.id, r.body.data.runId, 60_000),
          { concurrency: "unbounded" }
        )
        // The work asked for more than the budget: something was refused.
        const refusals =
          [...executed, ...started].filter((r) => r.status === 429).length +
          chatted.filter((outcome) => outcome === "spent").length +
          [...finals, ...runsDone].filter((final) => (final.error ?? "").includes("model tokens per day")).length
        assert.isAbove(refusals, 0)
        yield* expectWithinBudget(account, { ceiling: freeMaxOutput, interrupted: true })
      })
    )
  })

  describe("what a call holds and settles", () => {
    it.effect(
      "a call in flight holds its prompt and the plan's max_tokens; business holds nothing and gets its own ceiling",
      () =>
        Effect.gen(function* () {
          const { anthropic, openai } = yield* fakes
          openai.reset()
          anthropic.reset()
          openai.setDefault({ delayMs: 1500 })
          const { account, key } = yield* setUp
          const agent = yield* TestServer.createAgent(account, {
            model: openaiModel,
            instructions: "You are Scout, a hiking guide."
          })

          const inFlight = yield* Effect.forkChild(
            chat(key, agent.id, { message: "Where should I hike this weekend?" })
          )
          const held = yield* TestServer.waitFor(
            "the reservation",
            Effect.map(usageOf(account.tenantId), (row) => (row.reserved > 0 ? row : undefined))
          )
          assert.strictEqual(openai.requests.length, 1)
          assert.strictEqual(ceilingOf(openai.requests[0]!), freeMaxOutput)
          assert.strictEqual(held.reserved, reservationOf("openai", openai.requests[0]!))
          assert.strictEqual(held.tokens, 0)
          const answered = yield* Fiber.join(inFlight)
          assert.strictEqual(answered.status, 200, answered.text)
          const settled = yield* TestServer.waitFor(
            "the settlement",
            Effect.map(usageOf(account.tenantId), (row) => (row.reserved === 0 ? row : undefined))
          )
          assert.strictEqual(settled.tokens, billed(openai))
          assert.strictEqual(settled.tokens, answered.body.tokens)

          const sql = yield* SqlClient.SqlClient
          yield* sql`UPDATE tenants SET plan = 'pro' WHERE id = ${account.tenantId}`
          openai.setDefault({})
          assert.strictEqual((yield* chat(key, agent.id, { message: "And on Sunday?" })).status, 200)
          assert.strictEqual(ceilingOf(openai.requests[1]!), proMaxOutput)

          yield* sql`UPDATE tenants SET plan = 'business' WHERE id = ${account.tenantId}`
          openai.setDefault({ delayMs: 1000 })
          const before = yield* usageOf(account.tenantId)
          // The request's own count tells business apart: the chat reserves nothing.
          const business = yield* Effect.forkChild(chat(key, agent.id, { message: "And next month?" }))
          yield* TestServer.waitFor(
            "the business call",
            Effect.sync(() => (openai.requests.length === 3 ? true : undefined))
          )
          assert.strictEqual((yield* usageOf(account.tenantId)).reserved, 0)
          assert.strictEqual(ceilingOf(openai.requests[2]!), businessMaxOutput)
          const answer = yield* Fiber.join(business)
          assert.strictEqual(answer.status, 200, answer.text)
          // Its tokens still count.
          yield* TestServer.waitFor(
            "the business tokens",
            Effect.map(usageOf(account.tenantId), (row) =>
              row.tokens === before.tokens + answer.body.tokens ? true : undefined
            )
          )
        })
    )

    it.effect("a refused call gives its reservation back; a timed-out or cut one is charged its whole worst case", () =>
      Effect.gen(function* () {
        const { anthropic, openai } = yield* fakes
        openai.reset()
        anthropic.reset()
        openai.setDefault({})
        const { account, key } = yield* setUp
        const agent = yield* TestServer.createAgent(account, { model: openaiModel, instructions: "You are brief." })
        const settledRow = TestServer.waitFor(
          "the settlement",
          Effect.map(usageOf(account.tenantId), (row) => (row.reserved === 0 ? row : undefined))
        )

        // Refused by the provider (an HTTP error): nothing billed, nothing charged.
        openai.script({ status: 400, message: "Bad request." })
        const refused = yield* chat(key, agent.id, { message: "One" })
        assert.strictEqual(refused.status, 502, refused.text)
        const afterRefusal = yield* settledRow
        assert.strictEqual(afterRefusal.tokens, 0)

        // No answer within MODEL_TIMEOUT: the provider may have read the prompt and
        // written up to max_tokens, so the whole reservation counts.
        openai.script({ hang: true })
        const timedOut = yield* chat(key, agent.id, { message: "Two" })
        assert.strictEqual(timedOut.status, 504, timedOut.text)
        const worstCase = reservationOf("openai", openai.requests[1]!)
        const afterTimeout = yield* settledRow
        assert.strictEqual(afterTimeout.tokens, worstCase)

        // Cut after two deltas: the same, whatever text came.
        openai.script({ text: "Alpha beta gamma delta.", dropAfter: 2 })
        const cut = yield* chat(key, agent.id, { message: "Three" }, true)
        assert.strictEqual(cut.status, 200)
        assert.match(cut.text, /event: error/)
        const afterCut = yield* settledRow
        assert.strictEqual(afterCut.tokens, worstCase + reservationOf("openai", openai.requests[2]!))
        assert.strictEqual(openai.reported.length, 0)
      })
    )

    it.effect("a reservation never settled holds the budget for the rest of its day only", () =>
      Effect.gen(function* () {
        const { anthropic, openai } = yield* fakes
        openai.reset()
        anthropic.reset()
        openai.setDefault({})
        const { account, key } = yield* setUp
        const agent = yield* TestServer.createAgent(account, { model: openaiModel })
        assert.strictEqual((yield* chat(key, agent.id, { message: "Hi" })).status, 200)
        yield* TestServer.waitFor(
          "the settlement",
          Effect.map(usageOf(account.tenantId), (row) => (row.reserved === 0 ? row : undefined))
        )
        // As a process killed in the middle of its calls leaves it.
        const sql = yield* SqlClient.SqlClient
        yield* sql`UPDATE daily_usage SET reserved = ${budget} WHERE tenant_id = ${account.tenantId}`
        const calls = openai.requests.length

        const refused = yield* chat(key, agent.id, { message: "Again" })
        assert.strictEqual(refused.status, 429, refused.text)
        assert.strictEqual(refused.body.type, "urn:agent-host:problem:token-budget-spent")
        assert.include(refused.body.detail, "reserved by model calls in flight")
        assert.isBelow(refused.body.used, budget)
        assert.strictEqual(refused.headers.get("ratelimit-remaining"), "0")
        assert.isNotNull(refused.headers.get("retry-after"))
        const execution = yield* wideOrchestration(account, agent.id, 1)
        const started = yield* execute(key, execution, "x")
        assert.strictEqual(started.status, 202, started.text)
        const failed = yield* waitExecution(key, started.body.executionId)
        assert.strictEqual(failed.status, "failed")
        assert.include(failed.error, "reserved by model calls in flight")
        assert.strictEqual(openai.requests.length, calls)

        // The next day starts with nothing reserved.
        yield* sql`UPDATE daily_usage SET day = day - 1 WHERE tenant_id = ${account.tenantId}`
        const nextDay = yield* chat(key, agent.id, { message: "Good morning" })
        assert.strictEqual(nextDay.status, 200, nextDay.text)
        assert.strictEqual(openai.requests.length, calls + 1)
      })
    )
  })

  describe("streamed chats: refusals before the stream", () => {
    /** Open streams of the tenant's, on any node. */
    const placesOf = (tenantId: string) =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const rows = yield* sql<{
          n: number
        }>`SELECT count(*)::int AS n FROM event_stream_slots WHERE tenant_id = ${tenantId}`
        return rows[0]!.n
      }).pipe(Effect.orDie)

    it.effect("at the stream cap, an unknown agent is 404 and a bad message 400; a good chat meets the cap", () =>
      Effect.gen(function* () {
        const { openai } = yield* fakes
        openai.reset()
        openai.setDefault({})
        const { account, key } = yield* setUp
        const agent = yield* TestServer.createAgent(account, { model: openaiModel, memoryEnabled: true })
        const client = yield* TestClient
        // The dashboard's route takes a session, the v1 route a key.
        const streamed = (path: string, body: Record<string, unknown>) =>
          client.request("POST", path, {
            headers: { ...bearer(path.startsWith("/api/v1/") ? key : account.token), accept: "text/event-stream" },
            body
          })
        // Every place of the tenant's held, as by streams open on another node.
        const sql = yield* SqlClient.SqlClient
        for (let i = 0; i < 10; i++) {
          yield* sql`SELECT take_event_stream_slot(${`elsewhere-${account.tenantId}-${i}`}, ${account.tenantId},
                                                   'elsewhere', NULL, 10, '10 minutes'::interval)`
        }
        assert.strictEqual(yield* placesOf(account.tenantId), 10)
        for (const prefix of ["/api/v1/agents", "/api/agents"]) {
          const unknown = yield* streamed(`${prefix}/00000000-0000-4000-8000-000000000000/chat`, { message: "Hi" })
          assert.strictEqual(unknown.status, 404, unknown.text)
          const empty = yield* streamed(`${prefix}/${agent.id}/chat`, { message: "   " })
          assert.strictEqual(empty.status, 400, empty.text)
          const notText = yield* streamed(`${prefix}/${agent.id}/chat`, { message: 7 })
          assert.strictEqual(notText.status, 400, notText.text)
          const capped = yield* streamed(`${prefix}/${agent.id}/chat`, { message: "Hi" })
          assert.strictEqual(capped.status, 429, capped.text)
          assert.strictEqual(capped.body.type, "urn:agent-host:problem:too-many-streams")
        }
        // Nothing reached the model, and only the other node's places are held.
        assert.strictEqual(openai.requests.length, 0)
        assert.strictEqual(yield* placesOf(account.tenantId), 10)
        assert.deepStrictEqual(yield* usageOf(account.tenantId), { tokens: 0, reserved: 0 })
      })
    )

    it.effect(
      "a streamed chat refused for tokens reserved in flight is a 429 problem with Retry-After, with or without memory",
      () =>
        Effect.gen(function* () {
          const { openai } = yield* fakes
          openai.reset()
          openai.setDefault({})
          const { account, key } = yield* setUp
          const remembering = yield* TestServer.createAgent(account, { model: openaiModel, memoryEnabled: true })
          const forgetting = yield* TestServer.createAgent(account, { model: openaiModel, memoryEnabled: false })
          assert.strictEqual((yield* chat(key, remembering.id, { message: "Hi", conversationId: "held" })).status, 200)
          yield* TestServer.waitFor(
            "the settlement",
            Effect.map(usageOf(account.tenantId), (row) => (row.reserved === 0 ? row : undefined))
          )
          // What is left of the day is held by calls in flight (as a killed process leaves it).
          const sql = yield* SqlClient.SqlClient
          yield* sql`UPDATE daily_usage SET reserved = ${budget} WHERE tenant_id = ${account.tenantId}`
          const calls = openai.requests.length
          for (const agent of [remembering, forgetting]) {
            const refused = yield* chat(key, agent.id, { message: "Again", conversationId: "held" }, true)
            assert.strictEqual(refused.status, 429, refused.text)
            assert.match(refused.headers.get("content-type") ?? "", /^application\/problem\+json/)
            assert.strictEqual(refused.body.type, "urn:agent-host:problem:token-budget-spent")
            assert.include(refused.body.detail, "reserved by model calls in flight")
            assert.strictEqual(refused.headers.get("ratelimit-remaining"), "0")
            assert.isNotNull(refused.headers.get("retry-after"))
          }
          assert.strictEqual(openai.requests.length, calls)
          // The places the refused streams took are given back.
          yield* TestServer.waitFor(
            "the places released",
            Effect.map(placesOf(account.tenantId), (n) => (n === 0 ? true : undefined))
          )

          // With the budget free again, the same stream runs: its place is taken, then given back.
          yield* sql`UPDATE daily_usage SET reserved = 0 WHERE tenant_id = ${account.tenantId}`
          const streamed = yield* chat(key, remembering.id, { message: "Once more", conversationId: "held" }, true)
          assert.strictEqual(outcomeOf(streamed, true), "ok")
          // Deltas, then one done: nothing of the turn's start reaches the client.
          const names = streamed.text
            .split("\n\n")
            .filter((block) => block !== "")
            .map((block) => block.split("\n")[0])
          assert.isAbove(names.length, 1)
          assert.deepStrictEqual(names, [...Array(names.length - 1).fill("event: delta"), "event: done"])
          yield* TestServer.waitFor(
            "the place released",
            Effect.map(placesOf(account.tenantId), (n) => (n === 0 ? true : undefined))
          )
        })
    )
  })
})

const unenforced = Layer.unwrap(
  Effect.gen(function* () {
    const openai = yield* FakeOpenAi.make({ apiKey: openaiKey })
    return TestServer.layer({
      openaiBaseUrl: openai.url,
      openaiApiKey: Option.some(Redacted.make(openaiKey)),
      modelMaxRetries: 0,
      enforceDailyLimits: false,
      // Spent by the first call, were it enforced.
      freeDailyTokens: 10,
      freeMaxOutputTokens: freeMaxOutput,
      businessMaxOutputTokens: businessMaxOutput
    }).pipe(Layer.merge(Layer.succeed(FakeOpenAi, openai)))
  })
)

layer(unenforced, { excludeTestServices: true })("token reservations with ENFORCE_DAILY_LIMITS off", (it) => {
  it.effect("nothing is reserved or refused, and every call gets the business ceiling", () =>
    Effect.gen(function* () {
      const openai = yield* FakeOpenAi
      openai.reset()
      openai.setDefault({ delayMs: 300, fillMaxTokens: true })
      const { account, key } = yield* setUp
      const agent = yield* TestServer.createAgent(account, { model: openaiModel })
      const inFlight = yield* Effect.forkChild(chat(key, agent.id, { message: "One" }))
      yield* TestServer.waitFor(
        "the call",
        Effect.sync(() => (openai.requests.length === 1 ? true : undefined))
      )
      assert.deepStrictEqual(yield* usageOf(account.tenantId), { tokens: 0, reserved: 0 })
      assert.strictEqual((yield* Fiber.join(inFlight)).status, 200)
      const again = yield* chat(key, agent.id, { message: "Two" })
      assert.strictEqual(again.status, 200, again.text)
      assert.deepStrictEqual(openai.requests.map(ceilingOf), [businessMaxOutput, businessMaxOutput])
      assert.strictEqual(billed(openai), 2 * businessMaxOutput + 2)
      assert.deepStrictEqual(yield* usageOf(account.tenantId), { tokens: 0, reserved: 0 })
    })
  )
})
