import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Crypto from "node:crypto"
import {
  awaitFinal,
  linesWith,
  orchestrationSetup,
  requestJson,
  shardsSettled,
  startNodes
} from "../support/Cluster.ts"
import { defined, eventually } from "../support/Eventually.ts"
import { FakeOpenAi } from "../support/FakeOpenAi.ts"
import { FakeOtlp, type ReceivedSpan } from "../support/FakeOtlp.ts"
import { TestDatabaseUrl } from "../support/TestServer.ts"

const apiKey = "sk-tracing"
const SERVER = 2 // OTLP SpanKind
const CLIENT = 3

describe("OpenTelemetry traces across nodes", () => {
  it.live(
    "one execute request on node A: spans on A and on the node that ran its steps, one trace, correct parents, gen_ai attributes",
    () =>
      Effect.gen(function* () {
        const databaseUrl = yield* TestDatabaseUrl
        const fake = yield* FakeOpenAi.make({ apiKey })
        const otlp = yield* FakeOtlp.make
        const nodes = yield* startNodes(2, {
          DATABASE_URL: databaseUrl,
          OPENAI_BASE_URL: fake.url,
          OPENAI_API_KEY: apiKey,
          ENFORCE_DAILY_LIMITS: "false",
          OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url,
          OTEL_SERVICE_NAME: "agent-host-test",
          OTEL_RESOURCE_ATTRIBUTES: "deployment.environment=test"
        })
        const [a, b] = nodes as [(typeof nodes)[0], (typeof nodes)[0]]
        yield* shardsSettled(nodes)

        const setup = yield* Effect.promise(async () => {
          const tenant = await orchestrationSetup(a.baseUrl, "tracing@example.com", "openai/gpt-4o-mini", [
            { id: "only", prompt: "Summarise {{input}}" }
          ])
          const me = await requestJson(`${a.baseUrl}/api/auth/me`, { headers: tenant.session })
          return { ...tenant, tenantId: me.tenant.id as string }
        })

        // Execute on A, with a caller's traceparent, until one execution's step ran on B.
        const chosen = yield* Effect.promise(async () => {
          for (let attempt = 0; attempt < 20; attempt++) {
            const traceId = Crypto.randomBytes(16).toString("hex")
            const callerSpanId = Crypto.randomBytes(8).toString("hex")
            const input = `secret-input-${attempt}`
            const started = await requestJson(`${a.baseUrl}/api/v1/orchestrations/${setup.orchestrationId}/execute`, {
              method: "POST",
              headers: { ...setup.bearer, traceparent: `00-${traceId}-${callerSpanId}-01` },
              body: { input }
            })
            await awaitFinal([a.baseUrl], setup.bearer, [started.executionId], 30_000)
            const stepOf = ({ line }: { line: Record<string, any> }) =>
              line.annotations.executionId === started.executionId
            // The step's log line, on whichever node ran it, once that node's batch is out.
            await eventually(() => defined("the step's log line", linesWith([a, b], "Step completed").find(stepOf)))
            const ranOnB = linesWith([b], "Step completed").some(stepOf)
            if (ranOnB) return { traceId, callerSpanId, input, executionId: started.executionId as string }
          }
          throw new Error("no execution ran on node B")
        })

        // Spans leave each node in batches, every second: wait for every span the checks
        // below look for, and for the parent of each span received, from both nodes' batches.
        const traceSpans = () => otlp.spans().filter((span) => span.traceId === chosen.traceId)
        const isModelCall = (span: ReceivedSpan) => span.attributes["gen_ai.request.model"] !== undefined
        const spans = yield* Effect.promise(() =>
          eventually(() => {
            const spans = traceSpans()
            const ids = new Set(spans.map((span) => span.spanId))
            const whole =
              spans.some(isModelCall) &&
              spans.some((span) => span.kind === SERVER) &&
              spans.some((span) => span.name === "Executions.start") &&
              spans.some((span) => span.name === "ExecutionWorkflow.run") &&
              spans.some((span) => span.attributes["db.system.name"] === "postgresql") &&
              spans.every((span) => span.parentSpanId === chosen.callerSpanId || ids.has(span.parentSpanId!))
            if (!whole) throw new Error(`spans of the trace: ${JSON.stringify(spans.map((span) => span.name))}`)
            return spans
          })
        )

        // Both nodes took part, under the configured resource.
        const instances = new Set(spans.map((span) => span.resource["service.instance.id"]))
        assert.isTrue(instances.has(a.runnerAddress), "no span from node A")
        assert.isTrue(instances.has(b.runnerAddress), "no span from node B")
        for (const span of spans) {
          assert.strictEqual(span.resource["service.name"], "agent-host-test")
          assert.strictEqual(span.resource["deployment.environment"], "test")
        }

        // The HTTP request's span on A continues the caller's trace.
        const server = spans.find(
          (span) => span.kind === SERVER && span.resource["service.instance.id"] === a.runnerAddress
        )!
        assert.isDefined(server)
        assert.strictEqual(server.parentSpanId, chosen.callerSpanId)
        assert.strictEqual(server.name, "POST /api/v1/orchestrations/:id/execute")
        assert.strictEqual(server.attributes["http.route"], "/api/v1/orchestrations/:id/execute")
        assert.strictEqual(server.attributes["http.response.status_code"], 202)
        assert.strictEqual(server.attributes["tenant.id"], setup.tenantId)
        // The functions on the way are spans of their own while spans are exported.
        const start = spans.find((span) => span.name === "Executions.start")
        assert.isDefined(start, "no Executions.start span")
        assert.strictEqual(start!.resource["service.instance.id"], a.runnerAddress)

        // Every span hangs off another span of the trace, or off the caller's.
        const ids = new Set(spans.map((span) => span.spanId))
        for (const span of spans) {
          assert.isTrue(
            span.parentSpanId === chosen.callerSpanId || ids.has(span.parentSpanId!),
            `span "${span.name}" on ${span.resource["service.instance.id"]} has an unknown parent`
          )
        }

        // The run's span on B is found by the id the API returned.
        const run = spans.find((span) => span.name === "ExecutionWorkflow.run")
        assert.strictEqual(run?.attributes["execution.id"], chosen.executionId)
        assert.strictEqual(run?.resource["service.instance.id"], b.runnerAddress)

        // The model call ran on B, as a client span with the gen_ai attributes.
        const model = spans.find(isModelCall)!
        assert.strictEqual(model.resource["service.instance.id"], b.runnerAddress)
        assert.strictEqual(model.kind, CLIENT)
        assert.strictEqual(model.name, "chat gpt-4o-mini")
        assert.strictEqual(model.attributes["gen_ai.provider.name"], "openai")
        assert.strictEqual(model.attributes["gen_ai.operation.name"], "chat")
        assert.strictEqual(model.attributes["gen_ai.request.model"], "gpt-4o-mini")
        assert.isAbove(model.attributes["gen_ai.usage.input_tokens"] as number, 0)
        assert.isAbove(model.attributes["gen_ai.usage.output_tokens"] as number, 0)

        // SQL statements are traced too.
        assert.isTrue(
          spans.some((span) => span.attributes["db.system.name"] === "postgresql"),
          "no SQL span"
        )

        // The outgoing call to the provider carried the trace (W3C traceparent).
        const providerCall = fake.requests.find((r) => JSON.stringify(r.body).includes(chosen.input))!
        assert.match(providerCall.headers.traceparent ?? "", new RegExp(`^00-${chosen.traceId}-[0-9a-f]{16}-01$`))

        // Neither the API key nor the execution's input appears in any span.
        const everything = JSON.stringify(spans)
        assert.notInclude(everything, setup.key)
        assert.notInclude(everything, chosen.input)

        // A's access log line for the request, and B's log line for the step, carry the trace id.
        const accessLine = linesWith([a], "request").find(
          ({ line }) =>
            line.annotations.route === "/api/v1/orchestrations/:id/execute" && line.traceId === chosen.traceId
        )
        assert.isDefined(accessLine, "no access log line with the trace id")
        const logged = linesWith([b], "Step completed").find(
          ({ line }) => line.annotations.executionId === chosen.executionId
        )!
        assert.strictEqual(logged.line.traceId, chosen.traceId)
      }),
    120_000
  )
})
