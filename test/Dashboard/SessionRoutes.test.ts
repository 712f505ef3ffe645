import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import { teamOf } from "../support/Teams.ts"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"

// What the dashboard needs with a session: chat (JSON and streamed), execute
// and follow executions, and run a team, each answering as the API-key route
// does, for the session's tenant only, and refusing cookie writes from a
// foreign origin.

layer(TestServer.layer(), { excludeTestServices: true })("session twins of the key routes", (it) => {
  it.effect("chat with a session answers like the key route, as JSON and as server-sent events", () =>
    Effect.gen(function* () {
      const client = yield* TestClient
      const account = yield* TestServer.signUp()
      const session = TestServer.bearer(account.token)
      const agent = yield* TestServer.createAgent(account, { model: "local" })
      const reply = yield* client.request("POST", `/api/agents/${agent.id}/chat`, {
        headers: session,
        body: { message: "hello there" }
      })
      assert.strictEqual(reply.status, 200, reply.text)
      assert.isString(reply.body.reply)
      assert.strictEqual(reply.body.model, "local")
      assert.isString(reply.body.conversationId)

      const streamed = yield* client.request("POST", `/api/agents/${agent.id}/chat`, {
        headers: { ...session, accept: "text/event-stream" },
        body: { message: "and again", conversationId: reply.body.conversationId }
      })
      assert.strictEqual(streamed.status, 200)
      assert.match(streamed.headers.get("content-type") ?? "", /^text\/event-stream/)
      assert.match(streamed.text, /event: delta\ndata: \{"text":/)
      const done = /event: done\ndata: (.*)\n\n/.exec(streamed.text)
      assert.isNotNull(done, streamed.text)
      assert.strictEqual(JSON.parse(done![1]!).conversationId, reply.body.conversationId)

      // Another tenant's agent is a 404; a bad body a 400 naming the field.
      const other = yield* TestServer.signUp()
      const foreign = yield* client.request("POST", `/api/agents/${agent.id}/chat`, {
        headers: TestServer.bearer(other.token),
        body: { message: "hi" }
      })
      assert.strictEqual(foreign.status, 404)
      const empty = yield* client.request("POST", `/api/agents/${agent.id}/chat`, {
        headers: session,
        body: { message: 5 }
      })
      assert.strictEqual(empty.status, 400)
      assert.strictEqual(empty.body.errors[0].path.join("."), "payload.message")
      // A cookie write from another origin is refused.
      const forged = yield* client.request("POST", `/api/agents/${agent.id}/chat`, {
        headers: { cookie: account.cookie, origin: "https://evil.example" },
        body: { message: "hi" }
      })
      assert.strictEqual(forged.status, 403)
    })
  )

  it.effect("a session executes an orchestration, lists, reads, follows and cancels its executions", () =>
    Effect.gen(function* () {
      const client = yield* TestClient
      const { account, orchestrationId } = yield* TestServer.oneStepOrchestration("local")
      const session = TestServer.bearer(account.token)
      const started = yield* client.request("POST", `/api/orchestrations/${orchestrationId}/execute`, {
        headers: { ...session, "idempotency-key": "dashboard-1" },
        body: { input: "hello" }
      })
      assert.strictEqual(started.status, 202, started.text)
      const executionId = started.body.executionId as string
      const again = yield* client.request("POST", `/api/orchestrations/${orchestrationId}/execute`, {
        headers: { ...session, "idempotency-key": "dashboard-1" },
        body: { input: "hello" }
      })
      assert.strictEqual(again.body.executionId, executionId)

      const events = yield* client.request("GET", `/api/executions/${executionId}/events`, { headers: session })
      assert.strictEqual(events.status, 200)
      assert.match(events.text, /event: execution\.completed/)
      const read = yield* client.request("GET", `/api/executions/${executionId}`, { headers: session })
      assert.strictEqual(read.body.status, "completed")
      assert.isString(read.body.output)
      const listed = yield* client.request("GET", `/api/executions?orchestrationId=${orchestrationId}`, {
        headers: session
      })
      assert.deepStrictEqual(
        listed.body.data.map((e: { id: string }) => e.id),
        [executionId]
      )
      const finished = yield* client.request("POST", `/api/executions/${executionId}/cancel`, { headers: session })
      assert.strictEqual(finished.status, 409)

      // Another tenant sees none of it.
      const other = TestServer.bearer((yield* TestServer.signUp()).token)
      assert.strictEqual(
        (yield* client.request("GET", `/api/executions/${executionId}`, { headers: other })).status,
        404
      )
      assert.strictEqual((yield* client.request("GET", "/api/executions", { headers: other })).body.total, 0)
      assert.strictEqual(
        (yield* client.request("POST", `/api/orchestrations/${orchestrationId}/execute`, {
          headers: other,
          body: { input: "x" }
        })).status,
        404
      )
      // An API key is not a session.
      const { key } = yield* TestServer.createKey(account)
      assert.strictEqual(
        (yield* client.request("GET", "/api/executions", { headers: TestServer.bearer(key) })).status,
        401
      )
    })
  )

  it.effect("a session runs a team and follows the run to its end", () =>
    Effect.gen(function* () {
      const client = yield* TestClient
      const account = yield* TestServer.signUp()
      const session = TestServer.bearer(account.token)
      const { team } = yield* teamOf(account, "local", 2)
      const started = yield* client.request("POST", `/api/teams/${team.id}/run`, {
        headers: session,
        body: { mission: "Plan a picnic" }
      })
      assert.strictEqual(started.status, 202, started.text)
      assert.deepStrictEqual(Object.keys(started.body).sort(), ["mode", "runId", "status"])
      const run = yield* TestServer.waitFor(
        "the run to complete",
        Effect.gen(function* () {
          const read = yield* client.request("GET", `/api/teams/${team.id}/runs/${started.body.runId}`, {
            headers: session
          })
          return read.body.status === "completed" ? read.body : undefined
        })
      )
      assert.strictEqual(run.stopReason, "done")
      const bad = yield* client.request("POST", `/api/teams/${team.id}/run`, {
        headers: session,
        body: { mission: "" }
      })
      assert.strictEqual(bad.status, 400)
    })
  )
})
