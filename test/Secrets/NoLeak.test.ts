import { assert, describe, it } from "@effect/vitest"
import { PgClient } from "@effect/sql-pg"
import { Effect, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import * as Crypto from "node:crypto"
import * as Http from "node:http"
import type * as Net from "node:net"
import { defined, eventually } from "../support/Eventually.ts"
import { FakeOtlp } from "../support/FakeOtlp.ts"
import * as FakeReceiver from "../support/FakeReceiver.ts"
import { spawnService, waitReady } from "../support/Process.ts"
import { TestDatabaseUrl } from "../support/TestServer.ts"

// Issue 36's search: two secrets go out through an http tool to a receiver
// that echoes them back in every way it can (body, headers, a redirect's
// Location, base64 and URL-encoded), over every path a call takes (an
// execution with its webhook, chat, the tool test route, a team run). Then
// no answer, webhook payload, log line, span or stored byte may hold either
// value in any of its forms, while the receiver shows it got the real ones.

const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
const randomText = (length: number) =>
  Array.from(Crypto.randomBytes(length), (byte) => alphabet[byte % alphabet.length]).join("")

/** 40 random characters, with a `/` and a `+` so that the URL-encoded form differs from the value. */
const newValue = () => `${randomText(20)}/${randomText(10)}+${randomText(8)}`

/** The forms a value may travel in; each one searched for, named for the report. */
const formsOf = (value: string): ReadonlyArray<readonly [string, string]> => {
  const bytes = Buffer.from(value, "utf8")
  return [
    ["as is", value],
    ["its first half", value.slice(0, 20)],
    ["its last half", value.slice(-20)],
    ["JSON-escaped", JSON.stringify(value).slice(1, -1)],
    ["URL-encoded", encodeURIComponent(value)],
    ["base64", bytes.toString("base64").replace(/=+$/, "")],
    ["base64url", bytes.toString("base64url")],
    // How Postgres prints bytea.
    ["hex", bytes.toString("hex")]
  ]
}

interface Echoed {
  readonly method: string
  readonly path: string
  readonly headers: Readonly<Record<string, string>>
  readonly body: string
}

/**
 * The tool's target: echoes the secrets it got (the `x-api-key` header and
 * the body's `token`) as they are, base64 and URL-encoded, in its body and
 * its headers. `/t/echo` answers 200; `/t/fail` 418; `/t/redirect` a 307 to
 * `/landed/<key>?token=<key>` (which echoes, as 200); `/t/away` a redirect to
 * a URL with the key as its password (refused, never sent).
 */
const echoReceiver = Effect.acquireRelease(
  Effect.promise(
    () =>
      new Promise<{ server: Http.Server; url: string; requests: Array<Echoed> }>((resolve) => {
        const requests: Array<Echoed> = []
        const server = Http.createServer((request, response) => {
          const chunks: Array<Buffer> = []
          request.on("data", (chunk: Buffer) => chunks.push(chunk))
          request.on("end", () => {
            const body = Buffer.concat(chunks).toString("utf8")
            const headers = Object.fromEntries(
              Object.entries(request.headers).map(([name, value]) => [name, String(value)])
            )
            const path = request.url ?? ""
            requests.push({ method: request.method ?? "", path, headers, body })
            const key = headers["x-api-key"] ?? ""
            let token = ""
            try {
              token = String(JSON.parse(body).token ?? "")
            } catch {
              // No JSON body: nothing to echo of it.
            }
            const base64 = (text: string) => Buffer.from(text).toString("base64")
            const echoHeaders = {
              "content-type": "application/json",
              "x-echo-key": key,
              "x-echo-token": token,
              "x-echo-key-base64": base64(key),
              "x-echo-authorization": headers.authorization ?? ""
            }
            const host = `127.0.0.1:${(server.address() as Net.AddressInfo).port}`
            if (path === "/t/redirect") {
              const location = `/landed/${encodeURIComponent(key)}?token=${encodeURIComponent(key)}`
              response.writeHead(307, { ...echoHeaders, location }).end(JSON.stringify({ location }))
              return
            }
            if (path === "/t/away") {
              const location = `http://user:${encodeURIComponent(key)}@${host}/landed`
              response.writeHead(302, { ...echoHeaders, location }).end(JSON.stringify({ location }))
              return
            }
            response.writeHead(path === "/t/fail" ? 418 : 200, echoHeaders).end(
              JSON.stringify({
                path,
                key,
                keyBase64: base64(key),
                keyUrl: encodeURIComponent(key),
                authorization: headers.authorization ?? null,
                body,
                token,
                tokenBase64: base64(token),
                tokenBase64Url: Buffer.from(token).toString("base64url"),
                tokenUrl: encodeURIComponent(token)
              })
            )
          })
        })
        server.listen(0, "127.0.0.1", () => {
          const port = (server.address() as Net.AddressInfo).port
          resolve({ server, url: `http://127.0.0.1:${port}`, requests })
        })
      })
  ),
  ({ server }) =>
    Effect.promise(
      () =>
        new Promise<void>((resolve) => {
          server.closeAllConnections()
          server.close(() => resolve())
        })
    )
)

interface Collected {
  readonly where: string
  readonly text: string
}

const modes = ["echo", "redirect", "fail", "away"] as const
/** The phrase that makes the local model call the tool once in each mode (docs/tools.md, the local model's tool rule). */
const callPhrase = modes.map((mode) => `call echo_secrets {"mode": "${mode}"}`).join(" and ")
/** Requests the four calls send: one each, and the redirect's second (`away`'s redirect is refused, never sent). */
const requestsPerRun = 5

describe("no secret value leaks", () => {
  it.live(
    "an http tool sends two secrets to a receiver that echoes them: no answer, webhook, log line, span or stored byte holds one",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          const databaseUrl = yield* TestDatabaseUrl
          const otlp = yield* FakeOtlp.make
          const target = yield* echoReceiver
          const hooks = yield* FakeReceiver.make
          const service = yield* spawnService({
            DATABASE_URL: databaseUrl,
            WEBHOOK_SECRET_KEY: Crypto.randomBytes(32).toString("base64"),
            SECRETS_KEY: Crypto.randomBytes(32).toString("base64"),
            WEBHOOK_ALLOW_PRIVATE: "true",
            ENFORCE_DAILY_LIMITS: "false",
            LOG_LEVEL: "all",
            OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url,
            DASHBOARD_ENABLED: "false"
          })
          yield* waitReady(service)
          const secretA = newValue()
          const secretB = newValue()
          const collected: Array<Collected> = []

          const outcome = yield* Effect.promise(async () => {
            /** Every answer is kept, headers and body, for the search. */
            const call = async (
              method: string,
              path: string,
              token: string | undefined,
              body?: unknown,
              headers: Record<string, string> = {}
            ) => {
              const response = await fetch(service.baseUrl + path, {
                method,
                headers: {
                  ...(token === undefined ? {} : { authorization: `Bearer ${token}` }),
                  ...(body === undefined ? {} : { "content-type": "application/json" }),
                  ...headers
                },
                body: body === undefined ? null : JSON.stringify(body)
              })
              const text = await response.text()
              collected.push({
                where: `${method} ${path}`,
                text: `${[...response.headers].map(([name, value]) => `${name}: ${value}`).join("\n")}\n\n${text}`
              })
              let json: any
              try {
                json = JSON.parse(text)
              } catch {
                json = undefined
              }
              return { status: response.status, text, body: json }
            }
            const expect = (response: { status: number; text: string }, status: number, what: string) =>
              assert.strictEqual(response.status, status, `${what}: ${response.text}`)

            const email = `no-leak-${randomText(8)}@example.com`
            const password = "correct horse battery staple"
            expect(
              await call("POST", "/api/auth/register", undefined, { email, password, name: "Vault" }),
              201,
              "register"
            )
            const session = (await call("POST", "/api/auth/login", undefined, { email, password })).body.token as string
            const key = (await call("POST", "/api/keys", session, { name: "all" })).body.key as string

            const madeA = await call("POST", "/api/secrets", session, { name: "A", value: secretA })
            expect(madeA, 201, "secret A")
            expect(await call("POST", "/api/secrets", session, { name: "B", value: secretB }), 201, "secret B")
            expect(await call("GET", "/api/secrets", session), 200, "list secrets")
            expect(await call("GET", `/api/secrets/${madeA.body.id}`, session), 200, "get secret")

            const tool = await call("POST", "/api/tools", session, {
              name: "echo_secrets",
              description: "Sends the credentials to the echo service.",
              parameters: {
                type: "object",
                properties: { mode: { type: "string", enum: [...modes] } },
                required: ["mode"],
                additionalProperties: false
              },
              settings: {
                kind: "http",
                method: "POST",
                url: `${target.url}/t/{{args.mode}}`,
                headers: { "X-Api-Key": "{{secrets.A}}", Authorization: "Bearer {{secrets.A}}" },
                body: '{"mode": {{args.mode}}, "token": "{{secrets.B}}"}',
                allowedHosts: ["127.0.0.1"],
                followRedirects: true
              }
            })
            expect(tool, 201, "tool")
            const toolId = tool.body.id as string
            expect(await call("GET", `/api/tools/${toolId}`, session), 200, "get tool")

            // The tool test route, once per mode: its exchange shows every request and answer, masked.
            const tests = []
            for (const mode of modes) {
              const tested = await call("POST", `/api/tools/${toolId}/test`, session, { arguments: { mode } })
              expect(tested, 200, `test ${mode}`)
              tests.push(tested.body)
            }

            const agent = await call("POST", "/api/agents", session, {
              name: "Echoer",
              model: "local",
              toolIds: [toolId],
              memoryEnabled: true
            })
            expect(agent, 201, "agent")
            const agentId = agent.body.id as string

            // An execution, with the orchestration's webhook.
            const orchestration = await call("POST", "/api/orchestrations", session, {
              name: "Echo",
              steps: [{ id: "s", agentId, prompt: `Check the credentials: ${callPhrase}` }],
              outputWebhookUrl: hooks.url("/execution")
            })
            expect(orchestration, 201, "orchestration")
            const started = await call("POST", `/api/v1/orchestrations/${orchestration.body.id}/execute`, key, {
              input: "go"
            })
            expect(started, 202, "execute")
            const executionId = started.body.executionId as string
            const execution = await eventually(
              async () => {
                const got = await call("GET", `/api/v1/executions/${executionId}`, key)
                if (!["completed", "failed", "cancelled"].includes(got.body?.status))
                  throw new Error(`execution not final: ${got.text}`)
                return got.body
              },
              { timeoutMs: 30_000, intervalMs: 100 }
            )
            assert.strictEqual(execution.status, "completed", JSON.stringify(execution))
            const calls = await call("GET", `/api/v1/executions/${executionId}/tool-calls`, key)
            expect(calls, 200, "tool calls")
            assert.strictEqual(calls.body.data.length, modes.length, calls.text)
            const fullResults = []
            for (const record of calls.body.data) {
              const one = await call(
                "GET",
                `/api/v1/executions/${executionId}/steps/s/tool-calls/${record.callId}`,
                key
              )
              expect(one, 200, `call ${record.callId}`)
              fullResults.push(one.body)
            }
            expect(await call("GET", `/api/v1/executions/${executionId}/events`, key), 200, "execution events")
            expect(await call("GET", `/api/executions/${executionId}`, session), 200, "execution (session)")
            expect(await call("GET", `/api/executions/${executionId}/tool-calls`, session), 200, "tool calls (session)")

            // Chat: a plain turn, kept in the conversation, and a streamed one.
            const chat = await call("POST", `/api/v1/agents/${agentId}/chat`, key, {
              message: `Check the credentials: ${callPhrase}`,
              conversationId: "c-1"
            })
            expect(chat, 200, "chat")
            assert.strictEqual(chat.body.toolCalls?.length, modes.length, chat.text)
            const streamed = await call(
              "POST",
              `/api/v1/agents/${agentId}/chat`,
              key,
              { message: `Again: ${callPhrase}` },
              { accept: "text/event-stream" }
            )
            expect(streamed, 200, "streamed chat")
            assert.include(streamed.text, "event: tool.succeeded")
            expect(await call("GET", `/api/agents/${agentId}/conversations/c-1/messages`, session), 200, "conversation")

            // A team run whose first member has the tool; its room posts to a webhook.
            const summariser = await call("POST", "/api/agents", session, { name: "Summariser", model: "local" })
            expect(summariser, 201, "second agent")
            const team = await call("POST", "/api/teams", session, {
              name: "Echo team",
              members: [
                { agentId, role: "checks the credentials" },
                { agentId: summariser.body.id, role: "sums up" }
              ],
              room: { outputWebhookUrl: hooks.url("/team") }
            })
            expect(team, 201, "team")
            const teamId = team.body.id as string
            const run = await call("POST", `/api/v1/teams/${teamId}/run`, key, {
              mission: `Check the credentials: ${callPhrase}`
            })
            expect(run, 202, "team run")
            const runId = run.body.data.runId as string
            const finished = await eventually(
              async () => {
                const got = await call("GET", `/api/teams/${teamId}/runs/${runId}`, session)
                if (!["completed", "failed", "cancelled"].includes(got.body?.status))
                  throw new Error(`run not final: ${got.text}`)
                return got.body
              },
              { timeoutMs: 30_000, intervalMs: 100 }
            )
            assert.strictEqual(finished.status, "completed", JSON.stringify(finished))
            assert.strictEqual(finished.transcript.data[0].toolCalls?.length, modes.length, JSON.stringify(finished))
            expect(await call("GET", `/api/v1/teams/${teamId}/runs/${runId}`, key), 200, "run (key)")
            expect(await call("GET", `/api/v1/teams/${teamId}/runs/${runId}/transcript`, key), 200, "transcript")
            expect(await call("GET", `/api/teams/${teamId}/runs/${runId}/events`, session), 200, "run events")

            // Both webhooks arrive.
            await eventually(
              () => {
                const paths = hooks.requests.map((request) => request.path).sort()
                assert.deepStrictEqual(paths, ["/execution", "/team"])
              },
              { timeoutMs: 30_000 }
            )
            expect(
              await call("GET", `/api/orchestrations/${orchestration.body.id}/deliveries`, session),
              200,
              "deliveries"
            )
            expect(await call("GET", `/api/teams/${teamId}/deliveries`, session), 200, "team deliveries")
            expect(await call("GET", "/api/secrets", session), 200, "list secrets again")
            return { tests, fullResults, execution }
          })

          // The values were used: the target got the real ones, on every path.
          const runs = 5 // the test route, the execution, two chat turns, the team run
          assert.strictEqual(target.requests.length, runs * requestsPerRun)
          for (const request of target.requests) {
            assert.strictEqual(request.headers["x-api-key"], secretA, request.path)
            assert.strictEqual(request.headers.authorization, `Bearer ${secretA}`, request.path)
            assert.strictEqual(JSON.parse(request.body).token, secretB, request.path)
          }
          const landed = target.requests.filter((request) => request.path.startsWith("/landed/"))
          assert.strictEqual(landed.length, runs)
          for (const request of landed) assert.include(request.path, encodeURIComponent(secretA))
          // And the echoes came back, scrubbed to their names.
          const echoed = outcome.tests[0]
          assert.isTrue(echoed.ok, JSON.stringify(echoed))
          assert.strictEqual(echoed.exchange.requests[0].request.headers["x-api-key"], "[secret A]")
          assert.strictEqual(echoed.exchange.requests[0].response.headers["x-echo-token"], "[secret B]")
          const echoedBody = JSON.parse(echoed.exchange.requests[0].response.body)
          assert.deepInclude(echoedBody, {
            key: "[secret A]",
            keyBase64: "[secret A]",
            keyUrl: "[secret A]",
            token: "[secret B]",
            tokenBase64: "[secret B]",
            tokenBase64Url: "[secret B]",
            tokenUrl: "[secret B]"
          })
          assert.deepStrictEqual(
            outcome.tests.map((test: { ok: boolean; errorKind?: string }) => test.errorKind ?? "ok"),
            ["ok", "ok", "status", "refused"]
          )
          const fullEcho = defined(
            "the execution's echo call",
            outcome.fullResults.find((record: { fullResult?: string }) => record.fullResult?.includes("/t/echo"))
          )
          assert.include(fullEcho.fullResult, "[secret A]")
          assert.include(fullEcho.fullResult, "[secret B]")

          // Every span of the tool calls has reached the collector: each call's, and its requests'.
          yield* Effect.promise(() =>
            eventually(
              () => {
                const spans = otlp.spans()
                const tools = new Set(
                  spans.filter((span) => span.name === "execute_tool echo_secrets").map((span) => span.spanId)
                )
                assert.strictEqual(tools.size, runs * modes.length, "execute_tool spans")
                const requests = spans.filter(
                  (span) => span.parentSpanId !== undefined && tools.has(span.parentSpanId) && span.kind === 3
                )
                assert.strictEqual(requests.length, runs * requestsPerRun, "request spans")
              },
              { timeoutMs: 30_000 }
            )
          )

          // Every stored byte: each row of each table, in every schema the service writes.
          const stored = yield* Effect.gen(function* () {
            const sql = yield* SqlClient.SqlClient
            const tables = yield* sql<{ schema: string; name: string }>`
              SELECT table_schema AS schema, table_name AS name FROM information_schema.tables
              WHERE table_type = 'BASE TABLE' AND table_schema NOT IN ('pg_catalog', 'information_schema')`
            const rows: Array<Collected> = []
            for (const table of tables) {
              const lines = yield* sql.unsafe<{ line: string }>(
                `SELECT t::text AS line FROM "${table.schema}"."${table.name}" t`
              )
              for (const { line } of lines) rows.push({ where: `table ${table.schema}.${table.name}`, text: line })
            }
            return { tables: tables.map((table) => table.name), rows }
          }).pipe(Effect.provide(PgClient.layer({ url: Redacted.make(databaseUrl) })), Effect.orDie)
          for (const table of ["tenant_secrets", "tool_calls", "executions", "cluster_messages"]) {
            assert.include(stored.tables, table)
          }
          assert.isTrue(
            stored.rows.some((row) => row.where === "table public.tool_calls" && row.text.includes("[secret A]")),
            "the tool calls are stored, scrubbed"
          )

          const everything: Array<Collected> = [
            ...collected,
            ...hooks.requests.map((request) => ({
              where: `webhook ${request.path}`,
              text: `${JSON.stringify(request.headers)}\n\n${request.body}`
            })),
            { where: "stdout", text: service.stdout() },
            { where: "stderr", text: service.stderr() },
            ...otlp.spans().map((span) => ({ where: `span ${span.name}`, text: JSON.stringify(span) })),
            ...stored.rows
          ]
          assert.include(service.stdout() + service.stderr(), "/api/tools", "the service's log is captured")
          const leaks: Array<string> = []
          for (const [name, value] of [
            ["A", secretA],
            ["B", secretB]
          ] as const) {
            for (const [form, text] of formsOf(value)) {
              for (const place of everything) {
                const at = place.text.indexOf(text)
                if (at === -1) continue
                const around = place.text
                  .slice(Math.max(0, at - 120), at + text.length + 60)
                  .replaceAll(text, `<${name}>`)
                leaks.push(`secret ${name} ${form} in ${place.where}: …${around}…`)
              }
            }
          }
          assert.deepStrictEqual(leaks, [])
        })
      ),
    180_000
  )
})
