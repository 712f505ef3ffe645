import { assert, layer } from "@effect/vitest"
import { Duration, Effect } from "effect"
import { AgentId, TeamId } from "../../src/Domain/Ids.ts"
import { BadRequest, Conflict, NotFound } from "../../src/Domain/Problems.ts"
import * as ClusterStarts from "../support/ClusterStarts.ts"
import { awaitRun, teamOf } from "../support/Teams.ts"
import * as TestServer from "../support/TestServer.ts"
import { bearer, createAgent, createKey, signUp, TestClient } from "../support/TestServer.ts"

const xApiKey = (key: string) => ({ "x-api-key": key })

layer(TestServer.layer(), { excludeTestServices: true })("team routes", (it) => {
  it.effect(
    "both credentials on both groups: X-API-Key on /api/public, Bearer on /api/v1, each refused on the other's header",
    () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const account = yield* signUp()
        const { key } = yield* createKey(account, ["teams"])
        const { team } = yield* teamOf(account, "local", 2)
        const id = TeamId.make(team.id)
        const api = yield* TestServer.apiClient(account.token)
        const v1 = (yield* TestServer.apiClient(key)).v1Teams
        const pub = (yield* TestServer.apiClient(key, "x-api-key")).publicTeams

        const v1List = yield* v1.list({ query: {} })
        const pubList = yield* pub.list({ query: {} })
        assert.deepStrictEqual(pubList, v1List)
        assert.strictEqual(v1List.success, true)
        assert.strictEqual(v1List.total, 1)
        assert.strictEqual(v1List.nextCursor, null)
        assert.strictEqual(v1List.data[0]!.id, id)

        // Each header on the other group, and none at all: 401.
        for (const [path, headers] of [
          ["/api/public/teams", bearer(key)],
          ["/api/v1/teams", xApiKey(key)],
          ["/api/public/teams", {}],
          ["/api/v1/teams", {}],
          ["/api/public/teams", xApiKey("ak_not_a_key")]
        ] as const) {
          const refused = yield* client.request("GET", path, { headers })
          assert.strictEqual(refused.status, 401, `${path} ${JSON.stringify(headers)}: ${refused.text}`)
          assert.strictEqual(refused.headers.get("content-type"), "application/problem+json")
        }
        for (const [path, headers] of [
          [`/api/public/teams/${team.id}/run`, bearer(key)],
          [`/api/v1/teams/${team.id}/run`, xApiKey(key)]
        ] as const) {
          const refused = yield* client.request("POST", path, { headers, body: { mission: "m" } })
          assert.strictEqual(refused.status, 401, refused.text)
        }

        // The exact 202 body on both groups, as sent.
        for (const [path, headers] of [
          [`/api/public/teams/${team.id}/run`, xApiKey(key)],
          [`/api/v1/teams/${team.id}/run`, bearer(key)]
        ] as const) {
          const started = yield* client.request("POST", path, { headers, body: { mission: "Plan a picnic" } })
          assert.strictEqual(started.status, 202, started.text)
          assert.deepStrictEqual(Object.keys(started.body), ["success", "data"])
          const runId: string = started.body.data.runId
          assert.isString(runId)
          assert.deepStrictEqual(started.body, { success: true, data: { runId, status: "pending", mode: "chat" } })
          yield* awaitRun(account, team.id, runId)
          const run = yield* api.teams.getRun({ params: { id, runId } })
          assert.strictEqual(run.status, "completed")
          // The run reads the same on every group.
          const viaPublic = yield* pub.getRun({ params: { id, runId } })
          const viaV1 = yield* v1.getRun({ params: { id, runId } })
          assert.deepStrictEqual(viaPublic, { success: true, data: run })
          assert.deepStrictEqual(viaV1, viaPublic)
        }
        const runs = yield* pub.runs({ params: { id }, query: {} })
        assert.strictEqual(runs.success, true)
        assert.strictEqual(runs.data.total, 2)
      })
  )

  it.effect("a key without the teams scope is 403 on both groups; other scopes' routes refuse a teams-only key", () =>
    Effect.gen(function* () {
      const client = yield* TestClient
      const account = yield* signUp()
      const { key } = yield* createKey(account, ["read", "chat", "execute"])
      const { team } = yield* teamOf(account, "local", 1)
      for (const [method, path, headers] of [
        ["GET", "/api/v1/teams", bearer(key)],
        ["GET", "/api/public/teams", xApiKey(key)],
        ["POST", `/api/v1/teams/${team.id}/run`, bearer(key)],
        ["POST", `/api/public/teams/${team.id}/run`, xApiKey(key)],
        ["GET", `/api/public/teams/${team.id}/runs`, xApiKey(key)]
      ] as const) {
        const refused = yield* client.request(method, path, {
          headers,
          body: method === "POST" ? { mission: "m" } : undefined
        })
        assert.strictEqual(refused.status, 403, `${method} ${path}: ${refused.text}`)
        assert.strictEqual(refused.body.requiredScope, "teams")
      }
      const teamsOnly = yield* createKey(account, ["teams"])
      const agents = yield* client.request("GET", "/api/v1/agents", { headers: bearer(teamsOnly.key) })
      assert.strictEqual(agents.status, 403)
    })
  )

  it.effect("another tenant's team and run, an inactive team and an id that cannot exist are 404", () =>
    Effect.gen(function* () {
      const owner = yield* signUp()
      const ownerKey = (yield* createKey(owner, ["teams"])).key
      const ownerApi = yield* TestServer.apiClient(owner.token)
      const ownerV1 = (yield* TestServer.apiClient(ownerKey)).v1Teams
      const { team } = yield* teamOf(owner, "local", 1)
      const id = TeamId.make(team.id)
      const runId = (yield* ownerV1.run({ params: { id }, headers: {}, payload: { mission: "m" } })).data.runId
      yield* awaitRun(owner, team.id, runId)

      const other = yield* signUp()
      const otherKey = (yield* createKey(other, ["teams"])).key
      const otherApi = yield* TestServer.apiClient(other.token)
      const otherV1 = (yield* TestServer.apiClient(otherKey)).v1Teams
      const lists = yield* (yield* TestServer.apiClient(otherKey, "x-api-key")).publicTeams.list({ query: {} })
      assert.deepStrictEqual(lists, { success: true, data: [], total: 0, nextCursor: null })
      // Each route's refusal, flipped into the value to check.
      const refusals = [
        ["run", Effect.flip(otherV1.run({ params: { id }, headers: {}, payload: { mission: "m" } }))],
        ["runs", Effect.flip(otherV1.runs({ params: { id }, query: {} }))],
        ["getRun", Effect.flip(otherV1.getRun({ params: { id, runId } }))],
        ["transcript", Effect.flip(otherV1.transcript({ params: { id, runId }, query: {} }))],
        ["cancel", Effect.flip(otherV1.cancel({ params: { id, runId } }))],
        ["events", Effect.flip(otherV1.events({ params: { id, runId } }))],
        [
          "run of an id that cannot exist",
          Effect.flip(otherV1.run({ params: { id: TeamId.make("not-an-id") }, headers: {}, payload: { mission: "m" } }))
        ],
        ["get", Effect.flip(otherApi.teams.get({ params: { id } }))],
        ["update", Effect.flip(otherApi.teams.update({ params: { id }, payload: { name: "x" } }))],
        ["remove", Effect.flip(otherApi.teams.remove({ params: { id } }))]
      ] as const
      for (const [route, refusal] of refusals) {
        const refused = yield* refusal
        assert.instanceOf(refused, NotFound, route)
        assert.strictEqual(refused.status, 404, route)
      }
      // The owner's run under another of the owner's teams is not found either.
      const second = yield* teamOf(owner, "local", 1)
      const crossed = yield* Effect.flip(ownerV1.getRun({ params: { id: TeamId.make(second.team.id), runId } }))
      assert.instanceOf(crossed, NotFound)

      // Inactive: absent from the key lists, 404 to run, still managed by session.
      const updated = yield* ownerApi.teams.update({ params: { id }, payload: { status: "inactive" } })
      assert.strictEqual(updated.status, "inactive")
      const inactive = yield* Effect.flip(
        (yield* TestServer.apiClient(ownerKey, "x-api-key")).publicTeams.run({
          params: { id },
          headers: {},
          payload: { mission: "m" }
        })
      )
      assert.instanceOf(inactive, NotFound)
      const listed = yield* ownerV1.list({ query: {} })
      assert.deepStrictEqual(
        listed.data.map((t) => t.id),
        [second.team.id]
      )
      const managed = yield* ownerApi.teams.list({ query: {} })
      assert.strictEqual(managed.total, 2)
    })
  )

  it.effect("Idempotency-Key: the same key and body give the same run, another body a 409", () =>
    Effect.gen(function* () {
      const account = yield* signUp()
      const { key } = yield* createKey(account, ["teams"])
      const { team } = yield* teamOf(account, "local", 2)
      const id = TeamId.make(team.id)
      const v1 = (yield* TestServer.apiClient(key)).v1Teams
      const pub = (yield* TestServer.apiClient(key, "x-api-key")).publicTeams
      const send = (mission: string, idempotencyKey: string, group: "v1" | "public" = "v1") => {
        const request = { params: { id }, headers: { "idempotency-key": idempotencyKey }, payload: { mission } }
        return group === "v1" ? v1.run(request) : pub.run(request)
      }
      const first = yield* send("Write a haiku", "key-1")
      const again = yield* send("Write a haiku", "key-1")
      assert.strictEqual(again.data.runId, first.data.runId)
      // The same key through the other group is the same tenant's key.
      const viaPublic = yield* send("Write a haiku", "key-1", "public")
      assert.strictEqual(viaPublic.data.runId, first.data.runId)
      const other = yield* Effect.flip(send("Write a sonnet", "key-1"))
      assert.instanceOf(other, Conflict)
      assert.strictEqual(other.status, 409)
      const fresh = yield* send("Write a haiku", "key-2")
      assert.notStrictEqual(fresh.data.runId, first.data.runId)
      yield* awaitRun(account, team.id, first.data.runId)
      // A replay once the run is done shows it as it is now.
      const done = yield* send("Write a haiku", "key-1")
      assert.deepStrictEqual(done, {
        success: true,
        data: { runId: first.data.runId, status: "completed", mode: "chat" }
      })
      const runs = yield* (yield* TestServer.apiClient(account.token)).teams.runs({ params: { id }, query: {} })
      assert.strictEqual(runs.total, 2)
    })
  )

  it.effect(
    "a run without a key on this node's shard stores its start request with its row, as the cluster's client stores a keyed run's",
    () =>
      Effect.gen(function* () {
        const account = yield* signUp()
        const { key } = yield* createKey(account, ["teams"])
        const { team } = yield* teamOf(account, "local", 2)
        const v1 = (yield* TestServer.apiClient(key)).v1Teams
        yield* ClusterStarts.shardsHeld
        // A typed answer is the declared 202.
        const send = (headers: { readonly "idempotency-key"?: string }) =>
          v1.run({ params: { id: TeamId.make(team.id) }, headers, payload: { mission: "Compare" } })
        const before = yield* ClusterStarts.startsCounted("TeamRun")
        const ours = yield* send({})
        assert.deepStrictEqual(
          yield* ClusterStarts.startsCounted("TeamRun"),
          [before[0]! + 1, before[1]!],
          "stored with its row"
        )
        // A keyed run is claimed in a transaction, and its start sent by the cluster's client.
        const clients = yield* send({ "idempotency-key": "compare-1" })
        assert.deepStrictEqual(
          yield* ClusterStarts.startsCounted("TeamRun"),
          [before[0]! + 1, before[1]! + 1],
          "sent by the cluster's client"
        )
        const ids = [ours.data.runId, clients.data.runId]
        for (const id of ids) yield* awaitRun(account, team.id, id)
        const { own } = yield* ClusterStarts.assertStoredAsClientStores("TeamRun", "runId", ids[0]!, ids[1]!)
        assert.strictEqual(own.processed, true)
      })
  )

  it.effect("validation: 400s name the fields, on the run request and on team definitions", () =>
    Effect.gen(function* () {
      const client = yield* TestClient
      const account = yield* signUp()
      const { key } = yield* createKey(account, ["teams"])
      const { team, agents } = yield* teamOf(account, "local", 2)
      const session = bearer(account.token)
      const api = yield* TestServer.apiClient(account.token)
      const id = TeamId.make(team.id)
      // The fields a 400 names, from a raw body or a typed BadRequest.
      const paths = (errors: BadRequest["errors"]) => (errors ?? []).map((e) => e.path.join("."))

      for (const body of [{}, { mission: "" }, { mission: "   " }, { mission: 42 }, { mission: "x".repeat(32_001) }]) {
        const refused = yield* client.request("POST", `/api/v1/teams/${team.id}/run`, { headers: bearer(key), body })
        assert.strictEqual(refused.status, 400, `${JSON.stringify(body).slice(0, 40)}: ${refused.text}`)
        assert.include(paths(refused.body.errors).join(" "), "mission")
      }

      const other = yield* signUp()
      const foreign = yield* createAgent(other, { name: "Foreign" })
      const cases: ReadonlyArray<readonly [Record<string, unknown>, ReadonlyArray<string>]> = [
        [{ members: [] }, ["payload.members"]],
        [{ members: Array.from({ length: 11 }, () => ({ agentId: agents[0]!.id })) }, ["payload.members"]],
        [{ members: [{ agentId: agents[0]!.id }, { agentId: agents[0]!.id }] }, ["payload.members.1.agentId"]],
        [{ members: [{ agentId: foreign.id }] }, ["payload.members.0.agentId"]],
        [{ members: [{ agentId: agents[0]!.id, role: "r".repeat(201) }] }, ["payload.members.0.role"]],
        [{ members: [{ agentId: agents[0]!.id }], turnTaking: "leader" }, ["payload.leaderAgentId"]],
        [
          { members: [{ agentId: agents[0]!.id }], turnTaking: "leader", leaderAgentId: agents[1]!.id },
          ["payload.leaderAgentId"]
        ],
        [{ members: [{ agentId: agents[0]!.id }], leaderAgentId: agents[0]!.id }, ["payload.leaderAgentId"]],
        [
          { members: [{ agentId: agents[0]!.id }], maxTurns: 51, tokenBudget: 0, timeoutMs: 10 },
          ["payload.maxTurns", "payload.tokenBudget", "payload.timeoutMs"]
        ],
        [
          { members: [{ agentId: agents[0]!.id }], turnTaking: "free_for_all", mode: "debate" },
          ["payload.turnTaking", "payload.mode"]
        ],
        [{ name: "", members: [{ agentId: agents[0]!.id }] }, ["payload.name"]]
      ]
      for (const [body, expected] of cases) {
        const refused = yield* client.request("POST", "/api/teams", { headers: session, body: { name: "T", ...body } })
        assert.strictEqual(refused.status, 400, `${JSON.stringify(body).slice(0, 80)}: ${refused.text}`)
        assert.deepStrictEqual([...paths(refused.body.errors)].sort(), [...expected].sort(), refused.text)
      }
      const update = yield* Effect.flip(api.teams.update({ params: { id }, payload: { turnTaking: "leader" } }))
      assert.instanceOf(update, BadRequest)
      assert.strictEqual(update.status, 400)
      assert.deepStrictEqual(paths(update.errors), ["payload.leaderAgentId"])
      // Nothing changed.
      const unchanged = yield* api.teams.get({ params: { id } })
      assert.strictEqual(unchanged.turnTaking, "round_robin")
    })
  )

  it.effect("management CRUD: defaults, read, partial update, delete; leader teams", () =>
    Effect.gen(function* () {
      const account = yield* signUp()
      const api = yield* TestServer.apiClient(account.token)
      const a = AgentId.make((yield* createAgent(account, { name: "Ann" })).id)
      const b = AgentId.make((yield* createAgent(account, { name: "Bo" })).id)
      const created = yield* api.teams.create({
        payload: { name: "Team", members: [{ agentId: a, role: "writer" }, { agentId: b }] }
      })
      assert.deepStrictEqual(
        { ...created, id: undefined, createdAt: undefined, updatedAt: undefined },
        {
          id: undefined,
          name: "Team",
          description: "",
          mode: "chat",
          status: "active",
          members: [
            { agentId: a, role: "writer" },
            { agentId: b, role: "" }
          ],
          turnTaking: "round_robin",
          leaderAgentId: null,
          maxTurns: 12,
          tokenBudget: 200_000,
          timeoutMs: 600_000,
          resultApproval: { required: false, timeoutMs: 86_400_000, onExpiry: "reject" },
          room: { outputWebhookUrl: null, webhookEnabled: false, webhookDisabledReason: null },
          createdAt: undefined,
          updatedAt: undefined
        }
      )
      const params = { id: created.id }
      const got = yield* api.teams.get({ params })
      assert.deepStrictEqual(got, created)
      const led = yield* api.teams.update({
        params,
        payload: { turnTaking: "leader", leaderAgentId: b, maxTurns: 5, description: "d" }
      })
      assert.strictEqual(led.leaderAgentId, b)
      assert.strictEqual(led.maxTurns, 5)
      assert.strictEqual(led.name, "Team")
      // Back to round robin: the leader goes.
      const back = yield* api.teams.update({ params, payload: { turnTaking: "round_robin" } })
      assert.strictEqual(back.leaderAgentId, null)
      const [, removed] = yield* api.teams.remove({ params, responseMode: "decoded-and-response" })
      assert.strictEqual(removed.status, 204)
      const gone = yield* Effect.flip(api.teams.get({ params }))
      assert.instanceOf(gone, NotFound)
    })
  )

  it.effect("the OpenAPI document has the X-API-Key scheme on the public group and Bearer on v1", () =>
    Effect.gen(function* () {
      const client = yield* TestClient
      const doc = (yield* client.request("GET", "/openapi.json")).body
      const schemes = doc.components.securitySchemes
      const headerScheme = Object.entries(schemes).find(
        ([, s]: [string, any]) => s.type === "apiKey" && s.in === "header"
      )
      assert.isDefined(headerScheme)
      assert.strictEqual((headerScheme![1] as any).name, "X-API-Key")
      const security = (path: string, method: string) =>
        doc.paths[path][method].security.flatMap((s: object) => Object.keys(s))
      assert.deepStrictEqual(security("/api/public/teams", "get"), [headerScheme![0]])
      assert.deepStrictEqual(security("/api/public/teams/{id}/run", "post"), [headerScheme![0]])
      assert.deepStrictEqual(security("/api/v1/teams/{id}/run", "post"), ["apiKeyBearer"])
      assert.isDefined(doc.paths["/api/teams/{id}/runs/{runId}/events"])
    })
  )
})

layer(TestServer.layer({ freeDailyLimit: 3 }), { excludeTestServices: true })(
  "team routes under the plan's daily limit",
  (it) => {
    it.effect("key requests on both groups count against the plan; past it the answer is 429, X-API-Key included", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const account = yield* signUp()
        const { key } = yield* createKey(account, ["teams"])
        const statuses: Array<number> = []
        for (const [path, headers] of [
          ["/api/v1/teams", bearer(key)],
          ["/api/public/teams", xApiKey(key)],
          ["/api/v1/teams", bearer(key)],
          ["/api/public/teams", xApiKey(key)],
          ["/api/v1/teams", bearer(key)]
        ] as const) {
          statuses.push((yield* client.request("GET", path, { headers })).status)
        }
        assert.deepStrictEqual(statuses, [200, 200, 200, 429, 429])
        const refused = yield* client.request("GET", "/api/public/teams", { headers: xApiKey(key) })
        assert.strictEqual(refused.headers.get("ratelimit-limit"), "3")
        assert.isNotNull(refused.headers.get("retry-after"))
      })
    )
  }
)

layer(TestServer.layer({ clusterCallTimeout: Duration.zero }), { excludeTestServices: true })(
  "a run whose start is not confirmed in time",
  (it) => {
    it.effect("answers 503 with Retry-After and the stored run's id, which then completes", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const account = yield* signUp()
        const { key } = yield* createKey(account, ["teams"])
        const { team } = yield* teamOf(account, "local", 2)
        const started = yield* client.request("POST", `/api/public/teams/${team.id}/run`, {
          headers: xApiKey(key),
          body: { mission: "m" }
        })
        assert.strictEqual(started.status, 503, started.text)
        assert.strictEqual(started.headers.get("content-type"), "application/problem+json")
        assert.isNotNull(started.headers.get("retry-after"))
        const runId = started.body.runId as string
        assert.isString(runId)
        assert.strictEqual((yield* awaitRun(account, team.id, runId)).status, "completed")
      })
    )
  }
)
