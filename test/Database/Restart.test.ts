import { assert, describe, it } from "@effect/vitest"
import { PgClient } from "@effect/sql-pg"
import { Duration, Effect, Exit, Fiber, Layer, Option, Redacted, Scope } from "effect"
import { Reactivity } from "effect/reactivity"
import * as Fs from "node:fs/promises"
import * as Os from "node:os"
import * as Path from "node:path"
import * as Embedded from "../../src/Database/Embedded.ts"
import { Executions } from "../../src/Orchestrations/Executions.ts"
import { eventually } from "../support/Eventually.ts"
import { FakeOpenAi, openaiKey } from "../support/FakeOpenAi.ts"
import { freePort } from "../support/Process.ts"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"

/**
 * Waits for `condition` (checked every 100 ms), failing the test past `seconds`
 * with what `state` says of the requests so far.
 */
const waitUntil = (what: string, seconds: number, condition: Effect.Effect<boolean>, state: () => unknown = () => "") =>
  eventually(
    Effect.flatMap(condition, (holds) =>
      holds
        ? Effect.void
        : Effect.die(new Error(`Timed out after ${seconds} s waiting for ${what}: ${JSON.stringify(state())}`))
    ),
    { timeoutMs: seconds * 1000, intervalMs: 100 }
  )

const isFinal = (status: string) => status === "completed" || status === "failed" || status === "cancelled"

describe("a Postgres restart under load", () => {
  it.live(
    "every accepted execution finishes, no completed step is asked again, nothing answers 500",
    () =>
      Effect.gen(function* () {
        // A private PostgreSQL of this test, stopped and started again on the same data and port.
        const root = yield* Effect.promise(() => Fs.mkdtemp(Path.join(Os.tmpdir(), "agent-host-restart-")))
        yield* Effect.addFinalizer(() => Effect.promise(() => Fs.rm(root, { recursive: true, force: true })))
        yield* Effect.promise(() => Fs.chmod(root, 0o755))
        const options = {
          dataDir: Path.join(root, "postgres"),
          port: yield* freePort,
          osUser: process.env.EMBEDDED_POSTGRES_USER ?? "postgres"
        }
        const startPostgres = Effect.gen(function* () {
          const scope = yield* Scope.make()
          const server = yield* Embedded.start(options).pipe(Scope.provide(scope), Effect.orDie)
          return { scope, url: server.url }
        })
        let postgres = yield* startPostgres
        let down = false
        yield* Effect.addFinalizer(() => Scope.close(postgres.scope, Exit.void))

        const fake = yield* FakeOpenAi.make({ apiKey: openaiKey })
        // Every model call takes a while, so steps and chats are in flight when Postgres goes.
        fake.setDefault({ delayMs: 700 })

        const server = Executions.sweeper.pipe(
          Layer.provide(Executions.layer),
          Layer.provideMerge(
            TestServer.layer({
              databaseUrl: Option.some(postgres.url),
              openaiBaseUrl: fake.url,
              openaiApiKey: Option.some(Redacted.make(openaiKey)),
              modelTimeout: Duration.seconds(20),
              modelMaxRetries: 0,
              enforceDailyLimits: false,
              databaseStatementTimeout: Duration.seconds(5),
              databaseConnectTimeout: Duration.seconds(2),
              clusterCallTimeout: Duration.seconds(5)
            })
          )
        )

        yield* Effect.gen(function* () {
          const client = yield* TestClient
          const account = yield* TestServer.signUp()
          const { key } = yield* TestServer.createKey(account, ["execute", "read", "chat"])
          const agent = yield* TestServer.createAgent(account, { model: "openai/gpt-4o-mini" })
          const created = yield* client.request("POST", "/api/orchestrations", {
            headers: TestServer.bearer(account.token),
            body: {
              name: "Two",
              steps: [
                { id: "a", agentId: agent.id, prompt: "A {{input}}" },
                { id: "b", agentId: agent.id, prompt: "B {{input}}", dependsOn: ["a"] }
              ]
            }
          })
          assert.strictEqual(created.status, 201, created.text)

          // Plain HTTP with a bound (above the chat's own bound, the longest the
          // service may take): a request that hangs is recorded as status 0.
          const statuses: Array<{
            readonly what: string
            readonly status: number
            readonly at: number
            readonly ms: number
            readonly error?: string
          }> = []
          // Requests sent and not yet answered, for the report of a wait that timed out.
          const inFlight = new Map<number, { readonly what: string; readonly path: string; readonly sentAt: number }>()
          let sent = 0
          const state = () => ({
            now: Date.now(),
            inFlight: [...inFlight.values()].map((entry) => ({ ...entry, waitedMs: Date.now() - entry.sentAt })),
            answered: statuses.slice(-30)
          })
          const send = (what: string, method: string, path: string, body?: unknown) =>
            Effect.promise(async () => {
              const number = sent++
              let status = 0
              let json: any
              let error: string | undefined
              const sentAt = Date.now()
              inFlight.set(number, { what, path, sentAt })
              try {
                const response = await fetch(client.baseUrl + path, {
                  method,
                  headers: {
                    authorization: `Bearer ${key}`,
                    ...(body === undefined ? {} : { "content-type": "application/json" })
                  },
                  body: body === undefined ? null : JSON.stringify(body),
                  signal: AbortSignal.timeout(60_000)
                })
                status = response.status
                const text = await response.text()
                json = text === "" ? undefined : JSON.parse(text)
              } catch (cause) {
                error = `${String(cause)} after ${Date.now() - sentAt} ms (status ${status})`
                status = 0
              }
              inFlight.delete(number)
              statuses.push({
                what,
                status,
                at: Date.now(),
                ms: Date.now() - sentAt,
                ...(error === undefined ? {} : { error })
              })
              return { status, body: json }
            })

          const accepted = new Set<string>()
          let sequence = 0
          const execute = Effect.gen(function* () {
            const input = `run-${sequence++}`
            const response = yield* send("execute", "POST", `/api/v1/orchestrations/${created.body.id}/execute`, {
              input
            })
            // A 503 that names the execution stored it: it counts as accepted.
            if (typeof response.body?.executionId === "string") accepted.add(response.body.executionId)
            return response.status
          })
          const chat = send("chat", "POST", `/api/v1/agents/${agent.id}/chat`, {
            message: `chat-${sequence++}`,
            conversationId: `c-${sequence % 5}`
          })
          const poll = Effect.suspend(() => {
            const ids = [...accepted]
            return ids.length === 0
              ? Effect.void
              : send("poll", "GET", `/api/v1/executions/${ids[sequence % ids.length]}`)
          })

          // Steady load: executes, chats and polls, each kind in its own loop so
          // that a chat in flight when Postgres goes (it may take the chat's
          // whole bound) holds up no other request, until told to stop.
          let loading = true
          // About as often as a chat takes (a model call is 700 ms).
          const load = yield* Effect.forEach(
            [execute, chat, poll],
            (request) =>
              Effect.gen(function* () {
                while (loading) {
                  yield* request
                  yield* Effect.sleep(request === chat ? "100 millis" : "800 millis")
                }
              }),
            { concurrency: "unbounded", discard: true }
          ).pipe(Effect.forkChild)

          yield* Effect.forEach(Array.from({ length: 10 }), () => execute, { concurrency: "unbounded", discard: true })
          // Some steps settled a while ago (they must not be asked again), others in flight.
          const firstSql = yield* PgClient.make({ url: postgres.url, maxConnections: 1 }).pipe(
            Effect.provide(Reactivity.layer)
          )
          yield* waitUntil(
            "steps settled before the stop",
            60,
            Effect.map(
              firstSql<{ count: number }>`SELECT count(*)::int AS count FROM execution_events
              WHERE type = 'step.completed' AND created_at < now() - interval '3 seconds'`.pipe(Effect.orDie),
              (rows) => rows[0]!.count >= 5
            ),
            state
          )

          // Postgres goes away...
          const stoppedAt = Date.now()
          down = true
          yield* Scope.close(postgres.scope, Exit.void)
          const ready = send("ready", "GET", "/health/ready").pipe(Effect.map((response) => response.status))
          yield* waitUntil(
            "/health/ready to say 503",
            30,
            Effect.map(ready, (status) => status === 503),
            state
          )
          yield* waitUntil(
            "requests answered while Postgres is down",
            60,
            Effect.sync(() => statuses.filter((entry) => entry.at > stoppedAt && entry.what !== "ready").length >= 6),
            state
          )

          // ...and comes back on the same data and port.
          const firstUrl = Redacted.value(postgres.url)
          const restarted = yield* startPostgres
          postgres = restarted
          down = false
          assert.strictEqual(Redacted.value(restarted.url), firstUrl)
          const restartedAt = Date.now()
          yield* waitUntil(
            "/health/ready to say 200 again",
            60,
            Effect.map(ready, (status) => status === 200),
            state
          )
          yield* waitUntil(
            "executions accepted again",
            60,
            Effect.sync(
              () =>
                statuses.filter((entry) => entry.at > restartedAt && entry.what === "execute" && entry.status === 202)
                  .length >= 3
            ),
            state
          )
          loading = false
          yield* Fiber.join(load)

          // Every accepted execution reaches a final state, and so does every stored one.
          const finals = new Map<string, any>()
          yield* waitUntil(
            "every accepted execution to finish",
            240,
            Effect.gen(function* () {
              for (const id of accepted) {
                if (finals.has(id)) continue
                const polled = yield* client.request("GET", `/api/v1/executions/${id}`, {
                  headers: TestServer.bearer(key)
                })
                if (polled.status === 200 && isFinal(polled.body.status)) finals.set(id, polled.body)
              }
              return finals.size === accepted.size
            })
          )
          const sql = yield* PgClient.make({ url: restarted.url, maxConnections: 1 }).pipe(
            Effect.provide(Reactivity.layer)
          )
          yield* waitUntil(
            "no stored execution left unfinished",
            240,
            Effect.map(
              sql<{
                count: number
              }>`SELECT count(*)::int AS count FROM executions WHERE status IN ('pending', 'running')`.pipe(
                Effect.orDie
              ),
              (rows) => rows[0]!.count === 0
            )
          )

          // No step completed well before the stop is asked again (one in flight at the stop may be).
          const calls = new Map<string, number>()
          for (const request of fake.requests) {
            const prompt: string = request.body.messages.at(-1).content
            calls.set(prompt, (calls.get(prompt) ?? 0) + 1)
          }
          const completedSteps = yield* sql<{ prompt: string; completedAt: Date }>`
            SELECT upper(ev.step_id) || ' ' || e.input AS prompt, min(ev.created_at) AS "completedAt"
            FROM execution_events ev JOIN executions e ON e.id = ev.execution_id
            WHERE ev.type = 'step.completed' GROUP BY 1`.pipe(Effect.orDie)
          const settledBeforeStop = completedSteps.filter((step) => step.completedAt.getTime() < stoppedAt - 2_000)
          const askedAgain = settledBeforeStop.filter((step) => (calls.get(step.prompt) ?? 0) !== 1)

          const executionStatuses = [...finals.values()].map((execution) => execution.status as string)
          const count = (what: string, predicate: (status: number) => boolean) =>
            statuses.filter((entry) => entry.what === what && predicate(entry.status)).length
          const report = {
            accepted: accepted.size,
            completed: executionStatuses.filter((status) => status === "completed").length,
            failed: executionStatuses.filter((status) => status === "failed").length,
            failedErrors: [...new Set([...finals.values()].filter((e) => e.status === "failed").map((e) => e.error))],
            http503: statuses.filter((entry) => entry.status === 503).length,
            http500: statuses.filter((entry) => entry.status >= 500 && entry.status !== 503).length,
            hung: statuses.filter((entry) => entry.status === 0).length,
            executes: { ok: count("execute", (s) => s === 202), unavailable: count("execute", (s) => s === 503) },
            chats: { ok: count("chat", (s) => s === 200), unavailable: count("chat", (s) => s === 503) },
            stepCalls: [...calls.entries()]
              .filter(([prompt]) => /^[AB] run-/.test(prompt))
              .reduce((n, [, c]) => n + c, 0),
            stepsAskedTwice: [...calls.entries()].filter(([prompt, c]) => /^[AB] run-/.test(prompt) && c > 1).length,
            stepsCompletedBeforeStop: settledBeforeStop.length,
            slowestMs: Object.fromEntries(
              ["execute", "chat", "poll", "ready"].map((what) => [
                what,
                Math.max(0, ...statuses.filter((entry) => entry.what === what).map((entry) => entry.ms))
              ])
            ),
            otherStatuses: [...new Set(statuses.map((entry) => `${entry.what} ${entry.status}`))].sort()
          }
          console.log(`Postgres restart: ${JSON.stringify(report)}`)

          assert.deepStrictEqual(
            statuses.filter((entry) => entry.status >= 500 && entry.status !== 503),
            []
          )
          assert.deepStrictEqual(
            statuses.filter((entry) => entry.status === 0),
            []
          )
          assert.isAbove(settledBeforeStop.length, 0)
          assert.deepStrictEqual(askedAgain, [])
          assert.isAbove(report.completed, 0)
        }).pipe(
          // A test that failed while Postgres was down brings it back before the
          // service stops, so the failure is reported at once, not after the
          // service's shutdown has waited out its database.
          Effect.onExit(() =>
            down
              ? Effect.map(startPostgres, (restarted) => {
                  postgres = restarted
                  down = false
                })
              : Effect.void
          ),
          Effect.provide(server)
        )
      }).pipe(Effect.scoped),
    { timeout: 600_000 }
  )
})
