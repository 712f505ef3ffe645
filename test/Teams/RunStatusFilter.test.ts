import { assert, describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import { eventually } from "../support/Eventually.ts"
import * as FakeReceiver from "../support/FakeReceiver.ts"
import { awaitRun, createTeam, startRun } from "../support/Teams.ts"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"
import { lookupTool } from "../support/Tools.ts"

// `?status=` on a team's run list: `waiting` is a running run waiting for an
// approval (stored `running`), `running` one that is not (docs/approvals.md).

layer(TestServer.layer({ webhookAllowPrivate: true }), { excludeTestServices: true })(
  "team run list by status",
  (it) => {
    describe("GET /teams/{id}/runs?status=", () => {
      it.effect("lists only the runs in that status; a bad one is a 400 naming the parameter", () =>
        Effect.scoped(
          Effect.gen(function* () {
            const client = yield* TestClient
            const receiver = yield* FakeReceiver.make
            const account = yield* TestServer.signUp()
            const session = { headers: TestServer.bearer(account.token) }
            const { key } = yield* TestServer.createKey(account, ["teams", "approvals"])
            const auth = { headers: TestServer.bearer(key) }
            const tool = yield* client.request("POST", "/api/tools", {
              ...session,
              body: { ...lookupTool(receiver.url("/orders/{{args.id}}")), policy: { approval: "always" } }
            })
            assert.strictEqual(tool.status, 201, tool.text)
            const a = yield* TestServer.createAgent(account, { name: "A", model: "local", toolIds: [tool.body.id] })
            const b = yield* TestServer.createAgent(account, { name: "B", model: "local" })
            const team = yield* createTeam(account, {
              members: [
                { agentId: a.id, role: "looks things up" },
                { agentId: b.id, role: "sums up" }
              ]
            })

            const completedId = yield* startRun(key, team.id, "Say hello")
            const completed = yield* awaitRun(account, team.id, completedId)
            assert.strictEqual(completed.status, "completed", JSON.stringify(completed))
            const waitingId = yield* startRun(key, team.id, 'Find the order: call lookup_order {"id": "A-1"}')

            type Page = { data: Array<{ runId: string; status: string }>; total: number }
            // The session route answers the page, the key route the page in its envelope.
            const list = (path: "/api" | "/api/v1", query: string) =>
              Effect.map(
                client.request("GET", `${path}/teams/${team.id}/runs${query}`, path === "/api" ? session : auth),
                (response): Page => {
                  assert.strictEqual(response.status, 200, response.text)
                  return path === "/api" ? response.body : response.body.data
                }
              )
            const ids = (page: Page) => page.data.map((run) => run.runId)

            // Polled with the session: key requests count against the plan's daily requests.
            yield* eventually(
              Effect.map(list("/api", "?status=waiting"), (page) => {
                assert.deepStrictEqual(ids(page), [waitingId])
                assert.strictEqual(page.data[0]!.status, "waiting")
                assert.strictEqual(page.total, 1)
              }),
              { timeoutMs: 20_000, intervalMs: 200 }
            )
            assert.deepStrictEqual(ids(yield* list("/api/v1", "?status=waiting")), [waitingId])
            const done = yield* list("/api/v1", "?status=completed")
            assert.deepStrictEqual(ids(done), [completedId])
            assert.strictEqual(done.total, 1)
            assert.deepStrictEqual(ids(yield* list("/api", "?status=completed")), [completedId])
            // The waiting run is `running` underneath, yet not listed as running.
            assert.deepStrictEqual(ids(yield* list("/api/v1", "?status=running")), [])
            assert.deepStrictEqual(ids(yield* list("/api/v1", "?status=failed")), [])
            // Unfiltered, both, newest first.
            assert.deepStrictEqual(ids(yield* list("/api/v1", "")), [waitingId, completedId])

            for (const path of ["/api/v1", "/api"]) {
              const bad = yield* client.request(
                "GET",
                `${path}/teams/${team.id}/runs?status=bogus`,
                path === "/api" ? session : auth
              )
              assert.strictEqual(bad.status, 400, bad.text)
              assert.strictEqual(bad.headers.get("content-type"), "application/problem+json")
              // Named by the schema: the parameter, with the statuses it takes.
              const [error, ...more] = bad.body.errors as Array<{ path: Array<string>; message: string }>
              assert.deepStrictEqual(error!.path, ["query", "status"], bad.text)
              assert.include(error!.message, '"waiting"', bad.text)
              assert.lengthOf(more, 0, bad.text)
            }
          })
        )
      )
    })
  }
)
