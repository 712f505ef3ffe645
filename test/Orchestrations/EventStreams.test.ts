import { assert, describe, layer } from "@effect/vitest"
import { Duration, Effect, Layer, Option, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import type { AppSettings } from "../../src/Config.ts"
import { newId } from "../../src/Domain/Ids.ts"
import { eventually } from "../support/Eventually.ts"
import { FakeOpenAi, openaiKey } from "../support/FakeOpenAi.ts"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"

const withFake = (settings: Partial<AppSettings>) =>
  Layer.unwrap(
    Effect.gen(function* () {
      const openai = yield* FakeOpenAi.make({ apiKey: openaiKey })
      // Every model call hangs: executions stay running until cancelled or timed out.
      openai.setDefault({ hang: true })
      return TestServer.layer({
        openaiBaseUrl: openai.url,
        openaiApiKey: Option.some(Redacted.make(openaiKey)),
        modelTimeout: Duration.seconds(60),
        modelMaxRetries: 0,
        ...settings
      }).pipe(Layer.merge(Layer.succeed(FakeOpenAi, openai)))
    })
  )

/** A tenant with a running execution (its one step waits on the hanging model). */
const running = Effect.gen(function* () {
  const client = yield* TestClient
  const account = yield* TestServer.signUp()
  const key = yield* TestServer.createKey(account, ["execute", "read"])
  const agent = yield* TestServer.createAgent(account, { model: "openai/gpt-4o-mini" })
  const created = yield* client.request("POST", "/api/orchestrations", {
    headers: TestServer.bearer(account.token),
    body: { name: "Slow", steps: [{ id: "s", agentId: agent.id, prompt: "{{input}}" }], timeoutMs: 600_000 }
  })
  assert.strictEqual(created.status, 201, created.text)
  const started = yield* client.request("POST", `/api/v1/orchestrations/${created.body.id}/execute`, {
    headers: TestServer.bearer(key.key),
    body: { input: "wait" }
  })
  assert.strictEqual(started.status, 202, started.text)
  const executionId = started.body.executionId as string
  const cancel = client.request("POST", `/api/v1/executions/${executionId}/cancel`, {
    headers: TestServer.bearer(key.key)
  })
  return { account, key: key.key, orchestrationId: created.body.id as string, executionId, cancel }
})

/** Opens the event stream; resolves with the response once its headers are in. */
const open = (baseUrl: string, key: string, executionId: string) =>
  Effect.promise(async () => {
    const controller = new AbortController()
    const response = await fetch(`${baseUrl}/api/v1/executions/${executionId}/events`, {
      headers: { authorization: `Bearer ${key}` },
      signal: controller.signal
    })
    return { response, close: () => controller.abort() }
  })

/** The whole stream, parsed into events; the server must end it. */
const readAll = (baseUrl: string, key: string, executionId: string) =>
  Effect.promise(async () => {
    const response = await fetch(`${baseUrl}/api/v1/executions/${executionId}/events`, {
      headers: { authorization: `Bearer ${key}` }
    })
    const text = await response.text()
    return {
      status: response.status,
      events: text
        .trim()
        .split("\n\n")
        .map((block) => {
          const lines = Object.fromEntries(
            block.split("\n").map((line) => [line.slice(0, line.indexOf(":")), line.slice(line.indexOf(":") + 2)])
          )
          return { id: lines.id, event: lines.event!, data: JSON.parse(lines.data!) }
        })
    }
  })

layer(withFake({ maxEventStreamsPerTenant: 2, eventStreamMaxDuration: Duration.seconds(60) }), {
  excludeTestServices: true
})("event streams per tenant", (it) => {
  it.effect(
    "beyond MAX_EVENT_STREAMS_PER_TENANT open streams the answer is a 429 problem; a closed stream frees its place",
    () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const { account, cancel, executionId, key } = yield* running
        const first = yield* open(client.baseUrl, key, executionId)
        const second = yield* open(client.baseUrl, key, executionId)
        assert.strictEqual(first.response.status, 200)
        assert.strictEqual(second.response.status, 200)

        const third = yield* client.request("GET", `/api/v1/executions/${executionId}/events`, {
          headers: TestServer.bearer(key)
        })
        assert.strictEqual(third.status, 429, third.text)
        assert.match(third.headers.get("content-type") ?? "", /^application\/problem\+json/)
        assert.strictEqual(third.body.type, "urn:agent-host:problem:too-many-streams")
        assert.strictEqual(third.body.limit, 2)

        // The cap counts every kind of stream: a team run's events are refused as well.
        const member = yield* TestServer.createAgent(account, { model: "openai/gpt-4o-mini" })
        const team = yield* client.request("POST", "/api/teams", {
          headers: TestServer.bearer(account.token),
          body: { name: "Streams", members: [{ agentId: member.id }] }
        })
        assert.strictEqual(team.status, 201, team.text)
        const teamKey = yield* TestServer.createKey(account, ["teams"])
        const run = yield* client.request("POST", `/api/v1/teams/${team.body.id}/run`, {
          headers: TestServer.bearer(teamKey.key),
          body: { mission: "wait" }
        })
        assert.strictEqual(run.status, 202, run.text)
        const runPath = `/api/v1/teams/${team.body.id}/runs/${run.body.data.runId}`
        const teamStream = yield* client.request("GET", `${runPath}/events`, {
          headers: TestServer.bearer(teamKey.key)
        })
        assert.strictEqual(teamStream.status, 429, teamStream.text)
        assert.strictEqual(teamStream.body.type, "urn:agent-host:problem:too-many-streams")
        const cancelled = yield* client.request("POST", `${runPath}/cancel`, {
          headers: TestServer.bearer(teamKey.key)
        })
        assert.strictEqual(cancelled.status, 202, cancelled.text)

        // The cap is per tenant: another tenant still gets its streams.
        const other = yield* running
        const theirs = yield* open(client.baseUrl, other.key, other.executionId)
        assert.strictEqual(theirs.response.status, 200)
        theirs.close()

        // Once a client goes away its place is given back (the server notices the close).
        first.close()
        const refusedWith: Array<number> = []
        const reopened = yield* eventually(
          Effect.flatMap(open(client.baseUrl, key, executionId), (candidate) => {
            if (candidate.response.status === 200) return Effect.succeed(candidate)
            refusedWith.push(candidate.response.status)
            return Effect.die(new Error(`the stream is refused with ${candidate.response.status}`))
          })
        )
        // Until the place is given back, the stream is refused as over the cap, never otherwise.
        for (const status of refusedWith) assert.strictEqual(status, 429)
        assert.isDefined(reopened)
        reopened.close()
        second.close()
        yield* cancel
        yield* other.cancel
      })
  )
})

layer(withFake({ maxEventStreamsPerTenant: 10, eventStreamMaxDuration: Duration.seconds(1) }), {
  excludeTestServices: true
})("event streams in time", (it) => {
  describe("a stream ends cleanly", () => {
    it.effect("at EVENT_STREAM_MAX_DURATION, with a stream.end event, while the execution runs on", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const { cancel, executionId, key } = yield* running
        const stream = yield* readAll(client.baseUrl, key, executionId)
        assert.strictEqual(stream.status, 200)
        const last = stream.events[stream.events.length - 1]!
        assert.strictEqual(last.event, "stream.end")
        assert.isUndefined(last.id)
        assert.deepStrictEqual(last.data, { type: "stream.end", reason: "maxDuration" })
        assert.strictEqual(stream.events[0]!.event, "execution.running")
        const execution = yield* client.request("GET", `/api/v1/executions/${executionId}`, {
          headers: TestServer.bearer(key)
        })
        assert.strictEqual(execution.body.status, "running")
        yield* cancel
      })
    )

    it.effect("never past the execution's own timeout: a run stuck past it gets what happened, then stream.end", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const sql = yield* SqlClient.SqlClient
        const { account, key, orchestrationId } = yield* running
        // A run left `running` long after its 1 s timeout, as a lost workflow would leave it.
        const id = newId()
        yield* sql`INSERT INTO executions (id, tenant_id, orchestration_id, status, input, variables, steps, timeout_ms,
                                           created_at, started_at)
                   VALUES (${id}, ${account.tenantId}, ${orchestrationId}, 'running', 'x', '{}', '[]', 1000,
                           now() - interval '10 minutes', now() - interval '10 minutes')`
        yield* sql`INSERT INTO execution_events (execution_id, type) VALUES (${id}, 'execution.running')`
        const stream = yield* readAll(client.baseUrl, key, id)
        assert.deepStrictEqual(
          stream.events.map((event) => event.event),
          ["execution.running", "stream.end"]
        )
        assert.deepStrictEqual(stream.events[1]!.data, { type: "stream.end", reason: "executionTimeout" })
        yield* sql`DELETE FROM executions WHERE id = ${id}`
      })
    )

    it.effect("a finished execution's stream still ends with its final event, not stream.end", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const { cancel, executionId, key } = yield* running
        yield* cancel
        const stream = yield* readAll(client.baseUrl, key, executionId)
        // (A step that was just starting may log step.started after the cancel.)
        assert.isTrue(stream.events.some((event) => event.event === "execution.cancelled"))
        assert.isFalse(stream.events.some((event) => event.event === "stream.end"))
      })
    )
  })
})
