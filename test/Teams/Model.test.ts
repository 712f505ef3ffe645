import { assert, layer } from "@effect/vitest"
import { Effect, Schema } from "effect"
import { Team } from "../../src/Teams/Api.ts"
import { createTeam } from "../support/Teams.ts"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"

// The team is declared once (src/Teams/Api.ts) and read, written and listed
// through the one tenant-scoped repository (src/Database/TenantRepo.ts):
// every route shows the same fields in the same order, its room with them,
// and an update keeps what it does not carry.

const fields = [
  "id",
  "name",
  "description",
  "mode",
  "status",
  "members",
  "turnTaking",
  "leaderAgentId",
  "maxTurns",
  "tokenBudget",
  "timeoutMs",
  "resultApproval",
  "room",
  "createdAt",
  "updatedAt"
]

const setUp = Effect.gen(function* () {
  const account = yield* TestServer.signUp()
  const first = yield* TestServer.createAgent(account, { name: "First" })
  const second = yield* TestServer.createAgent(account, { name: "Second" })
  return { account, first, second, auth: { headers: TestServer.bearer(account.token) } }
})

layer(TestServer.layer(), { excludeTestServices: true })("the team model", (it) => {
  it.effect("every route shows the same fields in the same order, with the room", () =>
    Effect.gen(function* () {
      const client = yield* TestClient
      const { account, auth, first } = yield* setUp
      const { key } = yield* TestServer.createKey(account)
      const created = yield* client.request("POST", "/api/teams", {
        ...auth,
        body: { name: "Fields", members: [{ agentId: first.id }] }
      })
      assert.strictEqual(created.status, 201)
      const id = created.body.id as string
      const read = yield* client.request("GET", `/api/teams/${id}`, auth)
      const updated = yield* client.request("PUT", `/api/teams/${id}`, { ...auth, body: { name: "Fields 2" } })
      const listed = yield* client.request("GET", "/api/teams", auth)
      const v1 = yield* client.request("GET", "/api/v1/teams", { headers: TestServer.bearer(key) })
      const publicList = yield* client.request("GET", "/api/public/teams", { headers: { "x-api-key": key } })
      for (const [route, body] of [
        ["create", created.body],
        ["get", read.body],
        ["update", updated.body],
        ["list", listed.body.data[0]],
        ["v1 list", v1.body.data[0]],
        ["public list", publicList.body.data[0]]
      ]) {
        assert.deepStrictEqual(Object.keys(body), fields, route)
      }
      assert.deepStrictEqual(Object.keys(v1.body), ["success", "data", "total", "nextCursor"])
      assert.deepStrictEqual(publicList.body, v1.body)
      assert.deepInclude(created.body, {
        description: "",
        mode: "chat",
        status: "active",
        members: [{ agentId: first.id, role: "" }],
        turnTaking: "round_robin",
        leaderAgentId: null,
        maxTurns: 12,
        tokenBudget: 200_000,
        timeoutMs: 600_000,
        room: { outputWebhookUrl: null, webhookEnabled: false, webhookDisabledReason: null }
      })
    })
  )

  it.effect("an update keeps what it does not carry; leaving `leader` drops the leader unless one is sent", () =>
    Effect.gen(function* () {
      const client = yield* TestClient
      const { account, auth, first, second } = yield* setUp
      const team = yield* createTeam(account, {
        name: "Full",
        description: "All set",
        status: "inactive",
        members: [
          { agentId: first.id, role: "writes" },
          { agentId: second.id, role: "checks" }
        ],
        turnTaking: "leader",
        leaderAgentId: second.id,
        maxTurns: 4,
        tokenBudget: 5_000,
        timeoutMs: 30_000
      })
      const id = team.id
      // As the routes send it, to compare with their raw bodies.
      const created = Schema.encodeSync(Schema.toCodecJson(Team.json))(team) as Record<string, unknown>
      const same = yield* client.request("PUT", `/api/teams/${id}`, { ...auth, body: {} })
      assert.strictEqual(same.status, 200)
      assert.deepStrictEqual({ ...same.body, updatedAt: undefined }, { ...created, updatedAt: undefined })
      const one = yield* client.request("PUT", `/api/teams/${id}`, { ...auth, body: { description: "" } })
      assert.strictEqual(one.status, 200)
      assert.deepStrictEqual(
        { ...one.body, updatedAt: undefined },
        { ...created, description: "", updatedAt: undefined }
      )
      const roundRobin = yield* client.request("PUT", `/api/teams/${id}`, {
        ...auth,
        body: { turnTaking: "round_robin" }
      })
      assert.strictEqual(roundRobin.status, 200)
      assert.deepStrictEqual(
        { ...roundRobin.body, updatedAt: undefined },
        { ...one.body, turnTaking: "round_robin", leaderAgentId: null, updatedAt: undefined }
      )
      const read = yield* client.request("GET", `/api/teams/${id}`, auth)
      assert.deepStrictEqual(read.body, roundRobin.body)
    })
  )

  it.effect("a cursor of one tenant's list shows another tenant nothing of it", () =>
    Effect.gen(function* () {
      const client = yield* TestClient
      const { account, auth, first } = yield* setUp
      const stranger = yield* TestServer.signUp()
      for (let i = 0; i < 3; i++) yield* createTeam(account, { name: `Owned ${i}`, members: [{ agentId: first.id }] })
      const page = yield* client.request("GET", "/api/teams?limit=1", auth)
      assert.isString(page.body.nextCursor)
      const foreign = yield* client.request("GET", `/api/teams?limit=1&cursor=${page.body.nextCursor}`, {
        headers: TestServer.bearer(stranger.token)
      })
      assert.strictEqual(foreign.status, 200)
      assert.deepStrictEqual(foreign.body, { data: [], total: 0, nextCursor: null })
    })
  )
})
