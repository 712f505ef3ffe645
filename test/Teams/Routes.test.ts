import { assert, layer } from "@effect/vitest"
import { Duration, Effect } from "effect"
import * as ClusterStarts from "../support/ClusterStarts.ts"
import { awaitRun, createTeam, teamOf } from "../support/Teams.ts"
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

        const v1 = yield* client.request("GET", "/api/v1/teams", { headers: bearer(key) })
        assert.strictEqual(v1.status, 200, v1.text)
        const pub = yield* client.request("GET", "/api/public/teams", { headers: xApiKey(key) })
        assert.strictEqual(pub.status, 200, pub.text)
        assert.deepStrictEqual(pub.body, v1.body)
        assert.strictEqual(v1.body.success, true)
        assert.strictEqual(v1.body.total, 1)
        assert.strictEqual(v1.body.nextCursor, null)
        assert.strictEqual(v1.body.data[0].id, team.id)

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

        // The exact 202 body on both groups.
        for (const [path, headers] of [
          [`/api/public/teams/${team.id}/run`, xApiKey(key)],
          [`/api/v1/teams/${team.id}/run`, bearer(key)]
        ] as const) {
          const started = yield* client.request("POST", path, { headers, body: { mission: "Plan a picnic" } })
          assert.strictEqual(started.status, 202, started.text)
          assert.deepStrictEqual(Object.keys(started.body), ["success", "data"])
          const runId = started.body.data.runId
          assert.isString(runId)
          assert.deepStrictEqual(started.body, { success: true, data: { runId, status: "pending", mode: "chat" } })
          const run = yield* awaitRun(account, team.id, runId)
          assert.strictEqual(run.status, "completed")
          // The run reads the same on every group.
          const viaPublic = yield* client.request("GET", `/api/public/teams/${team.id}/runs/${runId}`, {
            headers: xApiKey(key)
          })
          const viaV1 = yield* client.request("GET", `/api/v1/teams/${team.id}/runs/${runId}`, { headers: bearer(key) })
          assert.strictEqual(viaPublic.status, 200)
          assert.deepStrictEqual(viaPublic.body, { success: true, data: run })
          assert.deepStrictEqual(viaV1.body, viaPublic.body)
        }
        const runs = yield* client.request("GET", `/api/public/teams/${team.id}/runs`, { headers: xApiKey(key) })
        assert.strictEqual(runs.body.success, true)
        assert.strictEqual(runs.body.data.total, 2)
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
      const client = yield* TestClient
      const owner = yield* signUp()
      const ownerKey = (yield* createKey(owner, ["teams"])).key
      const { team } = yield* teamOf(owner, "local", 1)
      const runId = (yield* client.request("POST", `/api/v1/teams/${team.id}/run`, {
        headers: bearer(ownerKey),
        body: { mission: "m" }
      })).body.data.runId
      yield* awaitRun(owner, team.id, runId)

      const other = yield* signUp()
      const otherKey = (yield* createKey(other, ["teams"])).key
      const lists = yield* client.request("GET", "/api/public/teams", { headers: xApiKey(otherKey) })
      assert.deepStrictEqual(lists.body, { success: true, data: [], total: 0, nextCursor: null })
      for (const [method, path] of [
        ["POST", `/api/v1/teams/${team.id}/run`],
        ["GET", `/api/v1/teams/${team.id}/runs`],
        ["GET", `/api/v1/teams/${team.id}/runs/${runId}`],
        ["GET", `/api/v1/teams/${team.id}/runs/${runId}/transcript`],
        ["POST", `/api/v1/teams/${team.id}/runs/${runId}/cancel`],
        ["GET", `/api/v1/teams/${team.id}/runs/${runId}/events`],
        ["POST", "/api/v1/teams/not-an-id/run"]
      ] as const) {
        const refused = yield* client.request(method, path, {
          headers: bearer(otherKey),
          body: method === "POST" ? { mission: "m" } : undefined
        })
        assert.strictEqual(refused.status, 404, `${method} ${path}: ${refused.text}`)
      }
      for (const method of ["GET", "PUT", "DELETE"]) {
        const refused = yield* client.request(method, `/api/teams/${team.id}`, {
          headers: bearer(other.token),
          body: method === "PUT" ? { name: "x" } : undefined
        })
        assert.strictEqual(refused.status, 404, `${method}: ${refused.text}`)
      }
      // The owner's run under another of the owner's teams is not found either.
      const second = yield* teamOf(owner, "local", 1)
      const crossed = yield* client.request("GET", `/api/v1/teams/${second.team.id}/runs/${runId}`, {
        headers: bearer(ownerKey)
      })
      assert.strictEqual(crossed.status, 404)

      // Inactive: absent from the key lists, 404 to run, still managed by session.
      const updated = yield* client.request("PUT", `/api/teams/${team.id}`, {
        headers: bearer(owner.token),
        body: { status: "inactive" }
      })
      assert.strictEqual(updated.status, 200, updated.text)
      assert.strictEqual(updated.body.status, "inactive")
      const inactive = yield* client.request("POST", `/api/public/teams/${team.id}/run`, {
        headers: xApiKey(ownerKey),
        body: { mission: "m" }
      })
      assert.strictEqual(inactive.status, 404, inactive.text)
      const listed = yield* client.request("GET", "/api/v1/teams", { headers: bearer(ownerKey) })
      assert.deepStrictEqual(
        listed.body.data.map((t: any) => t.id),
        [second.team.id]
      )
      const managed = yield* client.request("GET", "/api/teams", { headers: bearer(owner.token) })
      assert.strictEqual(managed.body.total, 2)
    })
  )

  it.effect("Idempotency-Key: the same key and body give the same run, another body a 409", () =>
    Effect.gen(function* () {
      const client = yield* TestClient
      const account = yield* signUp()
      const { key } = yield* createKey(account, ["teams"])
      const { team } = yield* teamOf(account, "local", 2)
      const send = (
        mission: string,
        idempotencyKey: string,
        headers: Record<string, string> = bearer(key),
        group = "v1"
      ) =>
        client.request("POST", `/api/${group}/teams/${team.id}/run`, {
          headers: { ...headers, "idempotency-key": idempotencyKey },
          body: { mission }
        })
      const first = yield* send("Write a haiku", "key-1")
      assert.strictEqual(first.status, 202)
      const again = yield* send("Write a haiku", "key-1")
      assert.strictEqual(again.status, 202)
      assert.strictEqual(again.body.data.runId, first.body.data.runId)
      // The same key through the other group is the same tenant's key.
      const viaPublic = yield* send("Write a haiku", "key-1", xApiKey(key), "public")
      assert.strictEqual(viaPublic.body.data.runId, first.body.data.runId)
      const other = yield* send("Write a sonnet", "key-1")
      assert.strictEqual(other.status, 409, other.text)
      const fresh = yield* send("Write a haiku", "key-2")
      assert.notStrictEqual(fresh.body.data.runId, first.body.data.runId)
      yield* awaitRun(account, team.id, first.body.data.runId)
      // A replay once the run is done shows it as it is now.
      const done = yield* send("Write a haiku", "key-1")
      assert.deepStrictEqual(done.body, {
        success: true,
        data: { runId: first.body.data.runId, status: "completed", mode: "chat" }
      })
      const runs = yield* client.request("GET", `/api/teams/${team.id}/runs`, { headers: bearer(account.token) })
      assert.strictEqual(runs.body.total, 2)
    })
  )

  it.effect(
    "a run without a key on this node's shard stores its start request with its row, as the cluster's client stores a keyed run's",
    () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const account = yield* signUp()
        const { key } = yield* createKey(account, ["teams"])
        const { team } = yield* teamOf(account, "local", 2)
        yield* ClusterStarts.shardsHeld
        const send = (headers: Record<string, string>) =>
          client.request("POST", `/api/v1/teams/${team.id}/run`, {
            headers: { ...bearer(key), ...headers },
            body: { mission: "Compare" }
          })
        const before = yield* ClusterStarts.startsCounted("TeamRun")
        const ours = yield* send({})
        assert.deepStrictEqual(
          yield* ClusterStarts.startsCounted("TeamRun"),
          [before[0]! + 1, before[1]!],
          "stored with its row"
        )
        // A keyed run is claimed in a transaction, and its start sent by the cluster's client.
        const clients = yield* send({ "idempotency-key": "compare-1" })
        assert.deepStrictEqual([ours.status, clients.status], [202, 202])
        assert.deepStrictEqual(
          yield* ClusterStarts.startsCounted("TeamRun"),
          [before[0]! + 1, before[1]! + 1],
          "sent by the cluster's client"
        )
        const ids = [ours.body.data.runId as string, clients.body.data.runId as string]
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
      const paths = (response: TestServer.TestResponse) => response.body.errors.map((e: any) => e.path.join("."))

      for (const body of [{}, { mission: "" }, { mission: "   " }, { mission: 42 }, { mission: "x".repeat(32_001) }]) {
        const refused = yield* client.request("POST", `/api/v1/teams/${team.id}/run`, { headers: bearer(key), body })
        assert.strictEqual(refused.status, 400, `${JSON.stringify(body).slice(0, 40)}: ${refused.text}`)
        assert.include(paths(refused).join(" "), "mission")
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
        assert.deepStrictEqual([...paths(refused)].sort(), [...expected].sort(), refused.text)
      }
      const update = yield* client.request("PUT", `/api/teams/${team.id}`, {
        headers: session,
        body: { turnTaking: "leader" }
      })
      assert.strictEqual(update.status, 400)
      assert.deepStrictEqual(paths(update), ["payload.leaderAgentId"])
      // Nothing changed.
      const unchanged = yield* client.request("GET", `/api/teams/${team.id}`, { headers: session })
      assert.strictEqual(unchanged.body.turnTaking, "round_robin")
    })
  )

  it.effect("management CRUD: defaults, read, partial update, delete; leader teams", () =>
    Effect.gen(function* () {
      const client = yield* TestClient
      const account = yield* signUp()
      const session = bearer(account.token)
      const a = yield* createAgent(account, { name: "Ann" })
      const b = yield* createAgent(account, { name: "Bo" })
      const created = yield* createTeam(account, { members: [{ agentId: a.id, role: "writer" }, { agentId: b.id }] })
      assert.deepStrictEqual(
        { ...created, id: undefined, createdAt: undefined, updatedAt: undefined },
        {
          id: undefined,
          name: "Team",
          description: "",
          mode: "chat",
          status: "active",
          members: [
            { agentId: a.id, role: "writer" },
            { agentId: b.id, role: "" }
          ],
          turnTaking: "round_robin",
          leaderAgentId: null,
          maxTurns: 12,
          tokenBudget: 200_000,
          timeoutMs: 600_000,
          room: { outputWebhookUrl: null, webhookEnabled: false, webhookDisabledReason: null },
          createdAt: undefined,
          updatedAt: undefined
        }
      )
      const got = yield* client.request("GET", `/api/teams/${created.id}`, { headers: session })
      assert.deepStrictEqual(got.body, created)
      const led = yield* client.request("PUT", `/api/teams/${created.id}`, {
        headers: session,
        body: { turnTaking: "leader", leaderAgentId: b.id, maxTurns: 5, description: "d" }
      })
      assert.strictEqual(led.status, 200, led.text)
      assert.strictEqual(led.body.leaderAgentId, b.id)
      assert.strictEqual(led.body.maxTurns, 5)
      assert.strictEqual(led.body.name, "Team")
      // Back to round robin: the leader goes.
      const back = yield* client.request("PUT", `/api/teams/${created.id}`, {
        headers: session,
        body: { turnTaking: "round_robin" }
      })
      assert.strictEqual(back.body.leaderAgentId, null)
      const removed = yield* client.request("DELETE", `/api/teams/${created.id}`, { headers: session })
      assert.strictEqual(removed.status, 204)
      const gone = yield* client.request("GET", `/api/teams/${created.id}`, { headers: session })
      assert.strictEqual(gone.status, 404)
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
