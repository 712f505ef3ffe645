import { assert, describe, layer } from "@effect/vitest"
import { Clock, Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"
import { eventually } from "../support/Eventually.ts"
import * as TestServer from "../support/TestServer.ts"
import { type Account, TestClient } from "../support/TestServer.ts"

// A clock the test can move forward; everything else about time stays real.
let offsetMs = 0
const realClock = Clock.Clock.defaultValue()
const shiftedClock: Clock.Clock = {
  currentTimeMillisUnsafe: () => realClock.currentTimeMillisUnsafe() + offsetMs,
  currentTimeMillis: Effect.sync(() => realClock.currentTimeMillisUnsafe() + offsetMs),
  currentTimeNanosUnsafe: () => realClock.currentTimeNanosUnsafe() + BigInt(offsetMs) * 1_000_000n,
  currentTimeNanos: Effect.sync(() => realClock.currentTimeNanosUnsafe() + BigInt(offsetMs) * 1_000_000n),
  monotonicTimeNanosUnsafe: () => realClock.monotonicTimeNanosUnsafe(),
  monotonicTimeNanos: realClock.monotonicTimeNanos,
  sleep: (duration) => realClock.sleep(duration)
}

const setUp = Effect.gen(function* () {
  const account = yield* TestServer.signUp()
  const key = yield* TestServer.createKey(account)
  return { account, key: key.key }
})

const listAgents = (key: string) =>
  Effect.flatMap(TestClient, (client) => client.request("GET", "/api/v1/agents", { headers: TestServer.bearer(key) }))

const billing = (account: Account) => Effect.flatMap(TestServer.apiClient(account.token), (api) => api.billing.status())

const secondsToUtcMidnight = () => {
  const now = Date.now() + offsetMs
  return Math.ceil((86_400_000 - (now % 86_400_000)) / 1000)
}

layer(TestServer.layer().pipe(Layer.provide(Layer.succeed(Clock.Clock, shiftedClock))), { excludeTestServices: true })(
  "daily request limits",
  (it) => {
    describe("exact under concurrency", () => {
      it.effect("150 concurrent requests from a fresh free tenant: exactly 100 succeed and 50 get 429", () =>
        Effect.gen(function* () {
          const { account, key } = yield* setUp
          const responses = yield* Effect.forEach(Array.from({ length: 150 }), () => listAgents(key), {
            concurrency: "unbounded"
          })
          const statuses = responses.map((r) => r.status)
          assert.strictEqual(statuses.filter((s) => s === 200).length, 100)
          assert.strictEqual(statuses.filter((s) => s === 429).length, 50)
          // Each success was told a different remaining count: 99 down to 0.
          const remaining = responses
            .filter((r) => r.status === 200)
            .map((r) => Number(r.headers.get("ratelimit-remaining")))
          assert.deepStrictEqual(
            [...remaining].sort((a, b) => a - b),
            Array.from({ length: 100 }, (_, i) => i)
          )
          const status = yield* billing(account)
          assert.deepInclude(status, { plan: "free", limit: 100, usedToday: 100, remainingToday: 0 })
        })
      )
    })

    describe("headers and the 429", () => {
      it.effect(
        "counted responses carry RateLimit headers; the 429 says the plan, the limit and when to come back",
        () =>
          Effect.gen(function* () {
            const { key } = yield* setUp
            const first = yield* listAgents(key)
            assert.strictEqual(first.headers.get("ratelimit-limit"), "100")
            assert.strictEqual(first.headers.get("ratelimit-remaining"), "99")
            const reset = Number(first.headers.get("ratelimit-reset"))
            assert.isTrue(Math.abs(reset - secondsToUtcMidnight()) <= 2, `${reset}`)
            for (let i = 0; i < 99; i++) yield* listAgents(key)
            const refused = yield* listAgents(key)
            assert.strictEqual(refused.status, 429)
            assert.strictEqual(refused.headers.get("content-type"), "application/problem+json")
            assert.strictEqual(refused.headers.get("ratelimit-remaining"), "0")
            assert.strictEqual(refused.headers.get("retry-after"), refused.headers.get("ratelimit-reset"))
            assert.strictEqual(refused.body.plan, "free")
            assert.strictEqual(refused.body.limit, 100)
            assert.strictEqual(new Date(refused.body.resetAt).getTime() % 86_400_000, 0)
            assert.include(refused.body.detail, "100 requests per day")
          })
      )

      it.effect("errors after the count still carry the headers", () =>
        Effect.gen(function* () {
          const { key } = yield* setUp
          const client = yield* TestClient
          const response = yield* client.request("GET", "/api/v1/agents?limit=0", { headers: TestServer.bearer(key) })
          assert.strictEqual(response.status, 400)
          assert.strictEqual(response.headers.get("ratelimit-limit"), "100")
        })
      )
    })

    describe("what counts", () => {
      it.effect("refusals for auth, scope or quota and session routes are not counted", () =>
        Effect.gen(function* () {
          const { account, key } = yield* setUp
          const client = yield* TestClient
          const chatOnly = yield* TestServer.createKey(account, ["chat"])
          yield* client.request("GET", "/api/v1/agents", { headers: TestServer.bearer(`ak_${"x".repeat(43)}`) })
          const forbidden = yield* listAgents(chatOnly.key)
          assert.strictEqual(forbidden.status, 403)
          yield* client.request("GET", "/api/agents", { headers: TestServer.bearer(account.token) })
          yield* client.request("GET", "/health/ready")
          assert.strictEqual((yield* billing(account)).usedToday, 0)
          yield* listAgents(key)
          assert.strictEqual((yield* billing(account)).usedToday, 1)
        })
      )

      it.effect("all of a tenant's keys share one count; another tenant has its own", () =>
        Effect.gen(function* () {
          const { account, key } = yield* setUp
          const second = yield* TestServer.createKey(account)
          yield* listAgents(key)
          yield* listAgents(second.key)
          assert.strictEqual((yield* billing(account)).usedToday, 2)
          const other = yield* setUp
          assert.strictEqual((yield* billing(other.account)).usedToday, 0)
        })
      )
    })

    describe("plans", () => {
      it.effect("an upgrade lifts the limit on the very next request; business has no limit headers", () =>
        Effect.gen(function* () {
          const { account, key } = yield* setUp
          const sql = yield* SqlClient.SqlClient
          for (let i = 0; i < 100; i++) yield* listAgents(key)
          assert.strictEqual((yield* listAgents(key)).status, 429)
          yield* sql`UPDATE tenants SET plan = 'pro' WHERE id = ${account.tenantId}`
          const pro = yield* listAgents(key)
          assert.strictEqual(pro.status, 200)
          assert.strictEqual(pro.headers.get("ratelimit-limit"), "10000")
          assert.strictEqual(pro.headers.get("ratelimit-remaining"), String(10_000 - 101))
          yield* sql`UPDATE tenants SET plan = 'business' WHERE id = ${account.tenantId}`
          const business = yield* listAgents(key)
          assert.strictEqual(business.status, 200)
          assert.isNull(business.headers.get("ratelimit-limit"))
          const status = yield* billing(account)
          assert.deepInclude(status, { plan: "business", limit: null, remainingToday: null, usedToday: 102 })
        })
      )

      it.effect(
        "business requests do not wait for their count, yet every one is counted; a downgrade is refused once announced",
        () =>
          Effect.gen(function* () {
            const { account, key } = yield* setUp
            const sql = yield* SqlClient.SqlClient
            yield* sql`UPDATE tenants SET plan = 'business' WHERE id = ${account.tenantId}`
            // The first count tells this node the plan; the next ones go on without waiting.
            assert.strictEqual((yield* listAgents(key)).status, 200)
            const responses = yield* Effect.forEach(Array.from({ length: 120 }), () => listAgents(key), {
              concurrency: "unbounded"
            })
            assert.deepStrictEqual(new Set(responses.map((r) => r.status)), new Set([200]))
            assert.isTrue(responses.every((r) => r.headers.get("ratelimit-limit") === null))
            // The standing waits for the counts still on their way.
            assert.deepInclude(yield* billing(account), { plan: "business", usedToday: 121 })
            // An operator's downgrade below what is used today: once the change is
            // announced, every request is refused again.
            yield* sql`UPDATE tenants SET plan = 'free' WHERE id = ${account.tenantId}`
            let passed = 0
            let refused = false
            yield* eventually(
              Effect.flatMap(listAgents(key), (response) => {
                if (response.status === 429) return Effect.sync(() => (refused = true))
                passed++
                return Effect.die(new Error("no request is refused yet after the downgrade"))
              }),
              { intervalMs: 10 }
            )
            assert.isTrue(refused, "a request was refused after the downgrade")
            for (let i = 0; i < 5; i++) assert.strictEqual((yield* listAgents(key)).status, 429)
            // What passed before the announcement was counted, past the free limit.
            assert.deepInclude(yield* billing(account), { plan: "free", usedToday: 121 + passed, limit: 100 })
          })
      )
    })

    describe("a missing day row", () => {
      it.effect("deleting the tenant's daily_usage row starts the count again instead of failing", () =>
        Effect.gen(function* () {
          const { account, key } = yield* setUp
          const sql = yield* SqlClient.SqlClient
          for (let i = 0; i < 3; i++) assert.strictEqual((yield* listAgents(key)).status, 200)
          // An operator resets the tenant's usage; this node believes the row exists.
          yield* sql`DELETE FROM daily_usage WHERE tenant_id = ${account.tenantId}`
          const responses = yield* Effect.forEach(Array.from({ length: 5 }), () => listAgents(key), {
            concurrency: "unbounded"
          })
          assert.deepStrictEqual(
            responses.map((r) => r.status),
            [200, 200, 200, 200, 200]
          )
          const remaining = responses.map((r) => Number(r.headers.get("ratelimit-remaining")))
          assert.deepStrictEqual(
            [...remaining].sort((a, b) => a - b),
            [95, 96, 97, 98, 99]
          )
          assert.strictEqual((yield* billing(account)).usedToday, 5)
          yield* sql`DELETE FROM daily_usage WHERE tenant_id = ${account.tenantId}`
          assert.strictEqual((yield* listAgents(key)).headers.get("ratelimit-remaining"), "99")
        })
      )
    })

    describe("the UTC day", () => {
      it.effect("usage per day: requests and tokens of each UTC day, oldest first, zero-filled, ending today", () =>
        Effect.gen(function* () {
          const client = yield* TestClient
          const { account, key } = yield* setUp
          const session = TestServer.bearer(account.token)
          const api = yield* TestServer.apiClient(account.token)
          for (let i = 0; i < 3; i++) assert.strictEqual((yield* listAgents(key)).status, 200)
          const first = yield* api.billing.usage({ query: { days: 3 } })
          // Two days on: the day in between had no requests.
          offsetMs += 2 * 86_400_000
          for (let i = 0; i < 2; i++) assert.strictEqual((yield* listAgents(key)).status, 200)
          const later = yield* api.billing.usage({ query: { days: 3 } })
          const today = new Date(Date.now() + offsetMs).toISOString().slice(0, 10)
          const day = (back: number) => new Date(Date.now() + offsetMs - back * 86_400_000).toISOString().slice(0, 10)
          assert.deepStrictEqual(later.days, [
            { day: day(2), requests: 3, tokens: 0 },
            { day: day(1), requests: 0, tokens: 0 },
            { day: today, requests: 2, tokens: 0 }
          ])
          assert.deepStrictEqual([later.plan, later.limit], ["free", 100])
          assert.strictEqual(first.days.at(-1)!.day, day(2))
          // The default is 30 days; the bounds are 1 and 90.
          const month = yield* api.billing.usage({ query: {} })
          assert.strictEqual(month.days.length, 30)
          assert.strictEqual(month.days.at(-1)!.day, today)
          for (const days of ["0", "91", "x", "1.5"]) {
            const bad = yield* client.request("GET", `/api/billing/usage?days=${days}`, { headers: session })
            assert.strictEqual(bad.status, 400, days)
            assert.deepStrictEqual(bad.body.errors[0].path, ["query", "days"], days)
          }
          // Another tenant's requests are not in it.
          const other = yield* setUp
          yield* listAgents(other.key)
          const again = yield* api.billing.usage({ query: { days: 1 } })
          assert.deepStrictEqual(again.days, [{ day: today, requests: 2, tokens: 0 }])
          // Tokens a chat charged show on today's entry, as the billing status counts them.
          const agent = yield* TestServer.createAgent(account, { model: "local" })
          const chat = yield* client.request("POST", `/api/v1/agents/${agent.id}/chat`, {
            headers: TestServer.bearer(key),
            body: { message: "Hello there", conversationId: "usage" }
          })
          assert.strictEqual(chat.status, 200, chat.text)
          const status = yield* billing(account)
          assert.isAbove(status.tokensUsedToday, 0)
          const withTokens = yield* api.billing.usage({ query: { days: 1 } })
          assert.deepStrictEqual(withTokens.days, [{ day: today, requests: 3, tokens: status.tokensUsedToday }])
        })
      )

      it.effect("the count starts again at midnight UTC", () =>
        Effect.gen(function* () {
          const { account, key } = yield* setUp
          for (let i = 0; i < 100; i++) yield* listAgents(key)
          assert.strictEqual((yield* listAgents(key)).status, 429)
          const before = yield* billing(account)
          // Move to one second after the reset.
          offsetMs += before.resetAt.getTime() - (Date.now() + offsetMs) + 1000
          const after = yield* listAgents(key)
          assert.strictEqual(after.status, 200)
          assert.strictEqual(after.headers.get("ratelimit-remaining"), "99")
          const status = yield* billing(account)
          assert.strictEqual(status.usedToday, 1)
          assert.strictEqual(status.resetAt.getTime(), before.resetAt.getTime() + 86_400_000)
        })
      )
    })
  }
)
