import { assert, describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import { eventually } from "../support/Eventually.ts"
import * as TestServer from "../support/TestServer.ts"
import { type Account, TestClient, type TestResponse } from "../support/TestServer.ts"

// The session twins of the key routes that start model work (chat, streamed
// or not; execute; team run) count against the plan's daily requests in the
// same count as their key twins: refused at the same count, with the same
// problem and RateLimit headers. So do uploads, rechunks and searches. The
// dashboard's reads are not counted.

const freeLimit = 5
const proLimit = 7

const settings = { freeDailyLimit: freeLimit, proDailyLimit: proLimit, authAttemptsPerAddress: 10_000 }

interface Tenant {
  readonly account: Account
  readonly key: string
  readonly agentId: string
  readonly orchestrationId: string
  readonly teamId: string
}

/** A tenant with a key, an agent on the local model, a one-step orchestration over it and a team of it. */
const tenant = Effect.gen(function* () {
  const client = yield* TestClient
  const account = yield* TestServer.signUp()
  const { key } = yield* TestServer.createKey(account)
  const agent = yield* TestServer.createAgent(account, { model: "local" })
  const auth = TestServer.bearer(account.token)
  const orchestration = yield* client.request("POST", "/api/orchestrations", {
    headers: auth,
    body: { name: "One", steps: [{ id: "s", agentId: agent.id, prompt: "Say {{input}}" }] }
  })
  assert.strictEqual(orchestration.status, 201, orchestration.text)
  const team = yield* client.request("POST", "/api/teams", {
    headers: auth,
    body: { name: "Team", members: [{ agentId: agent.id, role: "helper" }], maxTurns: 1 }
  })
  assert.strictEqual(team.status, 201, team.text)
  return {
    account,
    key,
    agentId: agent.id,
    orchestrationId: orchestration.body.id,
    teamId: team.body.id
  } satisfies Tenant
})

type Credential = "key" | "session"

/** The three operations that start model work, each by its key route or its session route. */
const operations = {
  chat: (t: Tenant, via: Credential) => ({
    path: via === "key" ? `/api/v1/agents/${t.agentId}/chat` : `/api/agents/${t.agentId}/chat`,
    body: { message: "Hello", conversationId: "twins" }
  }),
  execute: (t: Tenant, via: Credential) => ({
    path:
      via === "key"
        ? `/api/v1/orchestrations/${t.orchestrationId}/execute`
        : `/api/orchestrations/${t.orchestrationId}/execute`,
    body: { input: "twins" }
  }),
  run: (t: Tenant, via: Credential) => ({
    path: via === "key" ? `/api/v1/teams/${t.teamId}/run` : `/api/teams/${t.teamId}/run`,
    body: { mission: "Say hello." }
  })
} as const

const call = (t: Tenant, operation: keyof typeof operations, via: Credential, headers: Record<string, string> = {}) =>
  Effect.flatMap(TestClient, (client) => {
    const { path, body } = operations[operation](t, via)
    return client.request("POST", path, {
      headers: { ...TestServer.bearer(via === "key" ? t.key : t.account.token), ...headers },
      body
    })
  })

const usedToday = (t: Tenant) =>
  Effect.flatMap(TestClient, (client) =>
    Effect.map(
      client.request("GET", "/api/billing", { headers: TestServer.bearer(t.account.token) }),
      (response) => response.body.usedToday as number
    )
  )

const limitHeaders = (response: TestResponse) => ({
  limit: response.headers.get("ratelimit-limit"),
  remaining: response.headers.get("ratelimit-remaining"),
  retryAfter: response.headers.get("retry-after") === null ? null : "set"
})

/** The refusal as a client sees it, without what differs by the moment (the detail and reset are the same day's). */
const refusal = (response: TestResponse) => ({
  status: response.status,
  contentType: response.headers.get("content-type"),
  type: response.body?.type,
  plan: response.body?.plan,
  limit: response.body?.limit,
  resetAt: response.body?.resetAt,
  headers: limitHeaders(response)
})

const statuses = (responses: ReadonlyArray<TestResponse>) => responses.map((response) => response.status)

layer(TestServer.layer(settings), { excludeTestServices: true })("session twins", (it) => {
  describe("the same count as the key twins", () => {
    for (const operation of ["chat", "execute", "run"] as const) {
      it.effect(
        `${operation}: a session alone is refused at the same count as a key alone, with the same problem and headers`,
        () =>
          Effect.gen(function* () {
            const byKey = yield* tenant
            const bySession = yield* tenant
            const keyResponses: Array<TestResponse> = []
            const sessionResponses: Array<TestResponse> = []
            for (let i = 0; i < freeLimit + 2; i++) {
              keyResponses.push(yield* call(byKey, operation, "key"))
              sessionResponses.push(yield* call(bySession, operation, "session"))
            }
            const accepted = operation === "chat" ? 200 : 202
            const expected = [...Array(freeLimit).fill(accepted), 429, 429]
            assert.deepStrictEqual(statuses(keyResponses), expected, keyResponses.at(-1)!.text)
            assert.deepStrictEqual(statuses(sessionResponses), expected, sessionResponses.at(-1)!.text)
            // Counted responses carry the same RateLimit headers, request by request.
            assert.deepStrictEqual(sessionResponses.map(limitHeaders), keyResponses.map(limitHeaders))
            assert.deepStrictEqual(limitHeaders(sessionResponses[0]!), {
              limit: String(freeLimit),
              remaining: String(freeLimit - 1),
              retryAfter: null
            })
            // The same 429.
            const refused = refusal(sessionResponses.at(-1)!)
            assert.deepStrictEqual(refused, refusal(keyResponses.at(-1)!))
            assert.deepInclude(refused, {
              status: 429,
              contentType: "application/problem+json",
              type: "urn:agent-host:problem:daily-limit-reached",
              plan: "free",
              limit: freeLimit
            })
            assert.deepStrictEqual(refused.headers, { limit: String(freeLimit), remaining: "0", retryAfter: "set" })
            assert.strictEqual(yield* usedToday(byKey), freeLimit)
            assert.strictEqual(yield* usedToday(bySession), freeLimit)
          })
      )
    }

    it.effect("key and session requests of one tenant share one count: whichever comes past the limit is refused", () =>
      Effect.gen(function* () {
        const t = yield* tenant
        const responses = [
          yield* call(t, "chat", "key"),
          yield* call(t, "chat", "session"),
          yield* call(t, "execute", "session"),
          yield* call(t, "run", "key"),
          yield* call(t, "run", "session"),
          yield* call(t, "chat", "session"),
          yield* call(t, "execute", "key"),
          yield* call(t, "run", "session")
        ]
        assert.deepStrictEqual(statuses(responses), [200, 200, 202, 202, 202, 429, 429, 429])
        assert.deepStrictEqual(
          responses.map((r) => r.headers.get("ratelimit-remaining")),
          ["4", "3", "2", "1", "0", "0", "0", "0"]
        )
        assert.strictEqual(yield* usedToday(t), freeLimit)
      })
    )

    it.effect("a streamed session chat is counted like any other; so are key requests on /api/public", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const t = yield* tenant
        const streamed = yield* call(t, "chat", "session", { accept: "text/event-stream" })
        assert.strictEqual(streamed.status, 200, streamed.text)
        assert.include(streamed.text, "event: done")
        assert.strictEqual(streamed.headers.get("ratelimit-remaining"), String(freeLimit - 1))
        const publicRun = yield* client.request("POST", `/api/public/teams/${t.teamId}/run`, {
          headers: { "x-api-key": t.key },
          body: { mission: "Say hello." }
        })
        assert.strictEqual(publicRun.status, 202, publicRun.text)
        assert.strictEqual(yield* usedToday(t), 2)
        for (let i = 0; i < freeLimit - 2; i++) assert.strictEqual((yield* call(t, "run", "session")).status, 202)
        const refused = yield* call(t, "chat", "session", { accept: "text/event-stream" })
        assert.strictEqual(refused.status, 429)
        assert.strictEqual(refused.body.type, "urn:agent-host:problem:daily-limit-reached")
      })
    )

    it.effect("the plan's own limit applies: pro is refused at PRO_DAILY_LIMIT, business never, without headers", () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const pro = yield* tenant
        yield* sql`UPDATE tenants SET plan = 'pro' WHERE id = ${pro.account.tenantId}`
        const proResponses: Array<TestResponse> = []
        for (let i = 0; i <= proLimit; i++) proResponses.push(yield* call(pro, "chat", "session"))
        assert.deepStrictEqual(statuses(proResponses), [...Array(proLimit).fill(200), 429])
        assert.strictEqual(proResponses.at(-1)!.body.limit, proLimit)
        assert.strictEqual(proResponses.at(-1)!.body.plan, "pro")
        const business = yield* tenant
        yield* sql`UPDATE tenants SET plan = 'business' WHERE id = ${business.account.tenantId}`
        for (let i = 0; i <= proLimit; i++) {
          const response = yield* call(business, "chat", "session")
          assert.strictEqual(response.status, 200, response.text)
          assert.isNull(response.headers.get("ratelimit-limit"))
        }
      })
    )
  })

  describe("what is not counted", () => {
    it.effect("the dashboard's reads stay uncounted", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const t = yield* tenant
        const auth = TestServer.bearer(t.account.token)
        const started = yield* call(t, "execute", "session")
        const run = yield* call(t, "run", "session")
        assert.strictEqual(yield* usedToday(t), 2)
        const reads = [
          "/api/agents",
          `/api/agents/${t.agentId}`,
          `/api/agents/${t.agentId}/conversations`,
          "/api/orchestrations",
          `/api/orchestrations/${t.orchestrationId}`,
          "/api/executions",
          `/api/executions/${started.body.executionId}`,
          "/api/teams",
          `/api/teams/${t.teamId}/runs`,
          `/api/teams/${t.teamId}/runs/${run.body.runId}`,
          "/api/knowledge",
          "/api/keys",
          "/api/billing",
          "/api/billing/usage"
        ]
        for (let round = 0; round < 2; round++) {
          for (const path of reads) {
            const response = yield* client.request("GET", path, { headers: auth })
            assert.strictEqual(response.status, 200, `${path}: ${response.text}`)
            assert.isNull(response.headers.get("ratelimit-limit"), path)
          }
        }
        assert.strictEqual(yield* usedToday(t), 2)
      })
    )
  })

  describe("knowledge", () => {
    it.effect(
      "uploads, rechunks and searches count against the daily limit and are refused with the same 429 past it",
      () =>
        Effect.gen(function* () {
          const client = yield* TestClient
          const t = yield* tenant
          const auth = TestServer.bearer(t.account.token)
          const base = yield* client.request("POST", "/api/knowledge", { headers: auth, body: { name: "Docs" } })
          assert.strictEqual(base.status, 201, base.text)
          const uploaded = yield* client.request("POST", `/api/knowledge/${base.body.id}/upload`, {
            headers: auth,
            body: { filename: "a.txt", content: "Lanterns light the harbour." }
          })
          assert.strictEqual(uploaded.headers.get("ratelimit-remaining"), String(freeLimit - 1), uploaded.text)
          const documentId = (uploaded.status === 201 ? uploaded.body : uploaded.body.data[0]).id as string
          yield* eventually(
            Effect.flatMap(
              client.request("GET", `/api/knowledge/${base.body.id}/documents/${documentId}`, { headers: auth }),
              (got) =>
                got.body.status === "processing"
                  ? Effect.die(new Error("the document is still processing"))
                  : Effect.void
            )
          )
          const rechunked = yield* client.request(
            "POST",
            `/api/knowledge/${base.body.id}/documents/${documentId}/rechunk`,
            {
              headers: auth,
              body: { chunkSize: 128 }
            }
          )
          assert.strictEqual(rechunked.status, 200, rechunked.text)
          assert.strictEqual(rechunked.headers.get("ratelimit-remaining"), String(freeLimit - 2))
          const searches: Array<TestResponse> = []
          for (let i = 0; i < 4; i++) {
            searches.push(
              yield* client.request("POST", `/api/knowledge/${base.body.id}/search`, {
                headers: auth,
                body: { query: "harbour" }
              })
            )
          }
          assert.deepStrictEqual(statuses(searches), [200, 200, 200, 429])
          assert.strictEqual(searches[0]!.body.data.length, 1)
          const refused = searches.at(-1)!
          assert.deepInclude(refusal(refused), {
            type: "urn:agent-host:problem:daily-limit-reached",
            plan: "free",
            limit: freeLimit
          })
          assert.deepStrictEqual(refusal(refused).headers, {
            limit: String(freeLimit),
            remaining: "0",
            retryAfter: "set"
          })
          const refusedUpload = yield* client.request("POST", `/api/knowledge/${base.body.id}/upload`, {
            headers: auth,
            body: { filename: "b.txt", content: "Past the limit." }
          })
          assert.strictEqual(refusedUpload.status, 429)
          assert.strictEqual(refusedUpload.body.type, "urn:agent-host:problem:daily-limit-reached")
          // Nothing of the refused upload was stored; reads of the base are not counted.
          const documents = yield* client.request("GET", `/api/knowledge/${base.body.id}/documents`, { headers: auth })
          assert.strictEqual(documents.status, 200)
          assert.strictEqual(documents.body.total, 1)
          assert.strictEqual(yield* usedToday(t), freeLimit)
        })
    )
  })
})

// The daily token budget: a session chat is refused when the key chat would be.
layer(TestServer.layer({ freeDailyTokens: 40, authAttemptsPerAddress: 10_000 }), { excludeTestServices: true })(
  "session twins and the token budget",
  (it) => {
    it.effect("session and key chats spend one budget and are refused at the same point with the same problem", () =>
      Effect.gen(function* () {
        const sessionFirst = yield* tenant
        const keyFirst = yield* tenant
        const until429 = (t: Tenant, via: Credential) =>
          Effect.gen(function* () {
            for (let i = 0; i < 50; i++) {
              const response = yield* call(t, "chat", via)
              if (response.status !== 200) return { accepted: i, response }
            }
            return assert.fail("the token budget was never spent")
          })
        const bySession = yield* until429(sessionFirst, "session")
        const byKey = yield* until429(keyFirst, "key")
        assert.strictEqual(bySession.accepted, byKey.accepted)
        for (const { response } of [bySession, byKey]) {
          assert.strictEqual(response.status, 429, response.text)
          assert.strictEqual(response.body.type, "urn:agent-host:problem:token-budget-spent")
        }
        // Spent by sessions, the budget refuses the key too, and the other way round.
        assert.strictEqual(
          (yield* call(sessionFirst, "chat", "key")).body.type,
          "urn:agent-host:problem:token-budget-spent"
        )
        assert.strictEqual(
          (yield* call(keyFirst, "chat", "session")).body.type,
          "urn:agent-host:problem:token-budget-spent"
        )
      })
    )
  }
)
