import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { connectionTarget } from "../../src/Database/Sql.ts"
import { spanUrl } from "../../src/Webhooks/Guard.ts"
import { awaitFinal, orchestrationSetup, request, requestJson, startNodes } from "../support/Cluster.ts"
import { defined, eventually } from "../support/Eventually.ts"
import { FakeAnthropic } from "../support/FakeAnthropic.ts"
import { FakeOpenAi } from "../support/FakeOpenAi.ts"
import { FakeOtlp } from "../support/FakeOtlp.ts"
import * as FakeReceiver from "../support/FakeReceiver.ts"
import { TestDatabaseUrl } from "../support/TestServer.ts"

// What an operator reads in their tracing tool, as the service sends it over
// OTLP: one node, its spans decoded by a collector's receiver on loopback.

const INTERNAL = 1 // OTLP SpanKind
const SERVER = 2
const CLIENT = 3
const ERROR = 2 // OTLP status code

const openAiKey = "sk-trace-attributes"
const anthropicKey = "sk-ant-trace-attributes"

const within = { timeoutMs: 30_000 }

describe("trace attributes", () => {
  it("the database's host, port and name come from its URL, as the client reads it", () => {
    assert.deepStrictEqual(connectionTarget("postgres://app:pw@db.internal:6432/agents"), {
      host: "db.internal",
      port: 6432,
      database: "agents"
    })
    assert.deepStrictEqual(connectionTarget("postgresql://app@[::1]/agents?sslmode=require"), {
      host: "::1",
      database: "agents"
    })
    // Query parameters win, as in the client; no database is the user's.
    assert.deepStrictEqual(connectionTarget("postgres://app@h1:1/a?host=h2&port=2&dbname=b"), {
      host: "h2",
      port: 2,
      database: "b"
    })
    assert.deepStrictEqual(connectionTarget("postgres://ops@db.internal"), { host: "db.internal", database: "ops" })
    assert.deepStrictEqual(connectionTarget("not a url"), {})
  })

  it("a webhook URL on a span shows no query value", () => {
    assert.strictEqual(spanUrl(new URL("https://hooks.example.com/in")), "https://hooks.example.com/in")
    assert.strictEqual(
      spanUrl(new URL("https://hooks.example.com/in?token=abc&team=x")),
      "https://hooks.example.com/in?token=REDACTED&team=REDACTED"
    )
  })

  it.live(
    "runs, model calls, requests, the webhook POST and SQL carry what an operator searches by",
    () =>
      Effect.gen(function* () {
        const databaseUrl = yield* TestDatabaseUrl
        const databaseName = new URL(databaseUrl).pathname.slice(1)
        // The test server's host and port: the embedded server's, or TEST_DATABASE_URL's.
        const databaseHost = new URL(databaseUrl).hostname
        const databasePort = Number(new URL(databaseUrl).port || 5432)
        const openai = yield* FakeOpenAi.make({ apiKey: openAiKey })
        const anthropic = yield* FakeAnthropic.make({ apiKey: anthropicKey })
        // Providers answer with a dated model name, not the alias asked for.
        openai.setDefault({ model: "gpt-4o-mini-2024-07-18" })
        anthropic.setDefault({ model: "claude-3-5-haiku-20241022", text: "FINAL ANSWER: done" })
        const receiver = yield* FakeReceiver.make
        // The first delivery attempt fails; the retry gets through.
        receiver.script({ status: 500 })
        const otlp = yield* FakeOtlp.make
        const [node] = yield* startNodes(1, {
          DATABASE_URL: databaseUrl,
          OPENAI_BASE_URL: openai.url,
          OPENAI_API_KEY: openAiKey,
          ANTHROPIC_BASE_URL: anthropic.url,
          ANTHROPIC_API_KEY: anthropicKey,
          ENFORCE_DAILY_LIMITS: "false",
          WEBHOOK_ALLOW_PRIVATE: "true",
          WEBHOOK_RETRY_SCHEDULE: "100ms",
          OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url
        })
        const base = node!.baseUrl
        const hookUrl = receiver.url("/hook?token=hook-secret-123")

        const ids = yield* Effect.promise(async () => {
          const setup = await orchestrationSetup(base, "trace-attributes@example.com", "openai/gpt-4o-mini", [
            { id: "a", prompt: "A {{input}}" },
            { id: "b", prompt: "B after {{steps.a.output}}", dependsOn: ["a"] }
          ])
          const me = await requestJson(`${base}/api/auth/me`, { headers: setup.session })
          const tenantId = me.tenant.id as string

          // An execution of two steps.
          const started = await requestJson(`${base}/api/v1/orchestrations/${setup.orchestrationId}/execute`, {
            method: "POST",
            headers: setup.bearer,
            body: { input: "x" }
          })
          const executionId = started.executionId as string
          const [execution] = await awaitFinal([base], setup.bearer, [executionId], 30_000)
          assert.strictEqual(execution.status, "completed")

          // A team run on Anthropic whose room posts to a webhook.
          const speaker = await requestJson(`${base}/api/agents`, {
            method: "POST",
            headers: setup.session,
            body: { name: "Speaker", model: "anthropic/claude-3-5-haiku-latest" }
          })
          const team = await requestJson(`${base}/api/teams`, {
            method: "POST",
            headers: setup.session,
            body: {
              name: "Team",
              members: [{ agentId: speaker.id, role: "speaker" }],
              maxTurns: 2,
              room: { outputWebhookUrl: hookUrl }
            }
          })
          const run = await requestJson(`${base}/api/v1/teams/${team.id}/run`, {
            method: "POST",
            headers: setup.bearer,
            body: { mission: "Decide" }
          })
          const runId = run.data.runId as string
          await eventually(
            () => defined("the team run's webhook event, delivered at the second attempt", receiver.requests[1]),
            within
          )

          // An ingestion.
          const knowledge = await requestJson(`${base}/api/knowledge`, {
            method: "POST",
            headers: setup.session,
            body: { name: "Notes" }
          })
          const uploaded = await request(`${base}/api/knowledge/${knowledge.id}/upload`, {
            method: "POST",
            headers: setup.session,
            body: { filename: "notes.txt", content: "The lantern lights the harbour." }
          })
          const documentId =
            uploaded.status === 201 ? (uploaded.body.id as string) : (uploaded.body.data[0].id as string)

          // A streamed chat with the built-in model, and a path no route has.
          const local = await requestJson(`${base}/api/agents`, {
            method: "POST",
            headers: setup.session,
            body: { name: "Local", model: "local" }
          })
          const chat = await fetch(`${base}/api/agents/${local.id}/chat`, {
            method: "POST",
            headers: { ...setup.session, "content-type": "application/json", accept: "text/event-stream" },
            body: JSON.stringify({ message: "Hello there" })
          })
          assert.strictEqual(chat.status, 200)
          await chat.text()
          assert.strictEqual((await request(`${base}/api/nowhere/at/all`)).status, 404)
          return {
            tenantId,
            orchestrationId: setup.orchestrationId,
            executionId,
            teamId: team.id as string,
            runId,
            knowledgeId: knowledge.id as string,
            documentId
          }
        })

        const traceparentOf = (delivery: FakeReceiver.ReceivedRequest) => {
          const traceparent = /^00-([0-9a-f]{32})-([0-9a-f]{16})-01$/.exec(delivery.headers.traceparent ?? "")
          assert.isNotNull(traceparent, `traceparent: ${delivery.headers.traceparent}`)
          return { traceId: traceparent![1]!, spanId: traceparent![2]! }
        }
        const failed = traceparentOf(receiver.requests[0]!)
        const { spanId, traceId } = traceparentOf(receiver.requests[1]!)

        // Spans leave the node in batches, every second.
        const spans = () => otlp.spans()
        const named = (name: string) => spans().filter((span) => span.name === name)
        const withAttribute = (key: string, value: unknown) => spans().filter((span) => span.attributes[key] === value)
        yield* Effect.promise(() =>
          eventually(
            () =>
              defined(
                "the spans of every run",
                named("ExecutionWorkflow.step").length >= 2 &&
                  named("TeamRunWorkflow.turn").length >= 1 &&
                  named("Knowledge.ingest").some((span) => span.attributes["tenant.id"] !== undefined) &&
                  spans().some((span) => span.spanId === spanId) &&
                  spans().some((span) => span.spanId === failed.spanId) &&
                  named("chat local").length >= 1 &&
                  named("GET").some((span) => span.kind === SERVER)
                  ? true
                  : undefined
              ),
            within
          )
        )

        // Runs are found by the ids the API returned, each with its owner and tenant, on the run's span and each step's or turn's.
        const executionRun = named("ExecutionWorkflow.run").find(
          (span) => span.attributes["execution.id"] === ids.executionId
        )
        assert.isDefined(executionRun, "no run span with the execution id")
        const steps = named("ExecutionWorkflow.step")
        assert.deepStrictEqual(steps.map((span) => span.attributes["execution.step.id"]).sort(), ["a", "b"])
        for (const span of [executionRun!, ...steps]) {
          assert.strictEqual(span.attributes["execution.id"], ids.executionId, span.name)
          assert.strictEqual(span.attributes["orchestration.id"], ids.orchestrationId, span.name)
          assert.strictEqual(span.attributes["tenant.id"], ids.tenantId, span.name)
        }
        const teamRun = named("TeamRunWorkflow.run").find((span) => span.attributes["team_run.id"] === ids.runId)
        assert.isDefined(teamRun, "no run span with the team run id")
        const turns = named("TeamRunWorkflow.turn")
        assert.deepStrictEqual(
          turns.map((span) => span.attributes["team_run.turn.index"]).sort(),
          turns.map((_, i) => i)
        )
        for (const span of [teamRun!, ...turns]) {
          assert.strictEqual(span.attributes["team_run.id"], ids.runId, span.name)
          assert.strictEqual(span.attributes["team.id"], ids.teamId, span.name)
          assert.strictEqual(span.attributes["tenant.id"], ids.tenantId, span.name)
        }
        const ingest = named("Knowledge.ingest").find((span) => span.attributes["document.id"] === ids.documentId)
        assert.isDefined(ingest, "no ingestion span with the document id")
        assert.strictEqual(ingest!.attributes["knowledge_base.id"], ids.knowledgeId)
        assert.strictEqual(ingest!.attributes["tenant.id"], ids.tenantId)

        // Model calls after the GenAI conventions: the model as asked of the provider and as it answered, no prefixes.
        const openaiCalls = withAttribute("gen_ai.provider.name", "openai")
        assert.strictEqual(openaiCalls.length, 2)
        for (const call of openaiCalls) {
          assert.strictEqual(call.name, "chat gpt-4o-mini")
          assert.strictEqual(call.kind, CLIENT)
          assert.strictEqual(call.attributes["gen_ai.operation.name"], "chat")
          assert.strictEqual(call.attributes["gen_ai.request.model"], "gpt-4o-mini")
          assert.strictEqual(call.attributes["gen_ai.response.model"], "gpt-4o-mini-2024-07-18")
          assert.match(call.attributes["gen_ai.response.id"] as string, /^chatcmpl-fake\d+$/)
          assert.deepStrictEqual(call.attributes["gen_ai.response.finish_reasons"], ["stop"])
          assert.isAbove(call.attributes["gen_ai.request.max_tokens"] as number, 0)
          assert.isAbove(call.attributes["gen_ai.usage.input_tokens"] as number, 0)
          assert.isAbove(call.attributes["gen_ai.usage.output_tokens"] as number, 0)
          assert.strictEqual(call.attributes["server.address"], "127.0.0.1")
          assert.strictEqual(call.attributes["server.port"], Number(new URL(openai.url).port))
          assert.notProperty(call.attributes, "gen_ai.system")
          assert.notProperty(call.attributes, "gen_ai.request.stream")
        }
        const anthropicCalls = withAttribute("gen_ai.provider.name", "anthropic")
        assert.isAtLeast(anthropicCalls.length, 1)
        for (const call of anthropicCalls) {
          assert.strictEqual(call.name, "chat claude-3-5-haiku-latest")
          assert.strictEqual(call.attributes["gen_ai.request.model"], "claude-3-5-haiku-latest")
          assert.strictEqual(call.attributes["gen_ai.response.model"], "claude-3-5-haiku-20241022")
          assert.match(call.attributes["gen_ai.response.id"] as string, /^msg_fake\d+$/)
          // The provider's own finish reason, not a normalised one.
          assert.deepStrictEqual(call.attributes["gen_ai.response.finish_reasons"], ["end_turn"])
          assert.strictEqual(call.attributes["server.port"], Number(new URL(anthropic.url).port))
        }
        // The built-in model runs in the process: an internal span, the service itself its provider.
        const localCall = named("chat local")[0]!
        assert.strictEqual(localCall.kind, INTERNAL)
        assert.strictEqual(localCall.attributes["gen_ai.provider.name"], "agent_host")
        assert.strictEqual(localCall.attributes["gen_ai.request.model"], "local")
        assert.strictEqual(localCall.attributes["gen_ai.response.model"], "local")
        assert.strictEqual(localCall.attributes["gen_ai.request.stream"], true)
        assert.deepStrictEqual(localCall.attributes["gen_ai.response.finish_reasons"], ["stop"])
        assert.notProperty(localCall.attributes, "server.address")

        // HTTP server spans are named by method and route template; a path no route matches by the method alone.
        const execute = spans().find(
          (span) => span.kind === SERVER && span.name === "POST /api/v1/orchestrations/:id/execute"
        )
        assert.isDefined(
          execute,
          `server spans: ${JSON.stringify(
            spans()
              .filter((s) => s.kind === SERVER)
              .map((s) => s.name)
          )}`
        )
        assert.strictEqual(execute!.attributes["http.route"], "/api/v1/orchestrations/:id/execute")
        const unmatched = spans().find(
          (span) => span.kind === SERVER && span.attributes["url.path"] === "/api/nowhere/at/all"
        )!
        assert.strictEqual(unmatched.name, "GET")
        assert.notProperty(unmatched.attributes, "http.route")
        assert.strictEqual(unmatched.attributes["http.response.status_code"], 404)

        // The webhook POST is a client span under the delivery attempt, and the receiver got its traceparent.
        const post = spans().find((span) => span.spanId === spanId)
        assert.isDefined(post, "no span for the webhook POST")
        assert.strictEqual(post!.traceId, traceId)
        assert.strictEqual(post!.name, "POST")
        assert.strictEqual(post!.kind, CLIENT)
        assert.strictEqual(post!.attributes["http.request.method"], "POST")
        assert.strictEqual(post!.attributes["url.full"], receiver.url("/hook?token=REDACTED"))
        assert.strictEqual(post!.attributes["server.address"], "127.0.0.1")
        assert.strictEqual(post!.attributes["server.port"], receiver.port)
        assert.strictEqual(post!.attributes["http.response.status_code"], 200)
        assert.notStrictEqual(post!.status, ERROR)
        const attempt = spans().find((span) => span.spanId === post!.parentSpanId)
        assert.strictEqual(attempt?.name, "Webhooks.attempt")
        // The delivery belongs to the run's trace.
        assert.strictEqual(teamRun!.traceId, traceId)
        // The failed attempt's POST is a failed span of the same trace, under an attempt of its own.
        const failedPost = spans().find((span) => span.spanId === failed.spanId)!
        assert.strictEqual(failedPost.traceId, traceId)
        assert.strictEqual(failedPost.name, "POST")
        assert.strictEqual(failedPost.attributes["http.response.status_code"], 500)
        assert.strictEqual(failedPost.attributes["error.type"], "500")
        assert.strictEqual(failedPost.status, ERROR)
        assert.notStrictEqual(failedPost.parentSpanId, post!.parentSpanId)
        assert.strictEqual(spans().find((span) => span.spanId === failedPost.parentSpanId)?.name, "Webhooks.attempt")

        // SQL spans name the database DATABASE_URL names, where it is.
        const sql = spans().filter((span) => span.attributes["db.system.name"] === "postgresql")
        assert.isAbove(sql.length, 0)
        for (const span of sql) {
          assert.strictEqual(span.attributes["db.namespace"], databaseName)
          assert.strictEqual(span.attributes["server.address"], databaseHost)
          assert.strictEqual(span.attributes["server.port"], databasePort)
        }

        // No secret reaches a span: not the webhook's query token, not a provider key.
        const everything = JSON.stringify(spans())
        assert.notInclude(everything, "hook-secret-123")
        assert.notInclude(everything, openAiKey)
        assert.notInclude(everything, anthropicKey)
      }),
    120_000
  )
})
