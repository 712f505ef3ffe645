import { assert, describe, it, layer } from "@effect/vitest"
import { Duration, Effect, Layer, Metric, Option, Redacted } from "effect"
import { isLocalScrape, isLoopback } from "../../src/Http/MetricsHttp.ts"
import { labelled } from "../../src/Observability/Observability.ts"
import { eventually } from "../support/Eventually.ts"
import { FakeOpenAi, openaiKey } from "../support/FakeOpenAi.ts"
import { sample } from "../support/Prometheus.ts"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"

/** Executes the tenant's one-step orchestration once; the execute response. */
const executeOnce = (setup: { readonly key: string; readonly orchestrationId: string }) =>
  Effect.flatMap(TestClient, (client) =>
    client.request("POST", `/api/v1/orchestrations/${setup.orchestrationId}/execute`, {
      headers: TestServer.bearer(setup.key),
      body: { input: "hello" }
    })
  )

describe("GET /metrics", () => {
  layer(TestServer.layer(), { excludeTestServices: true })((it) => {
    it.effect("serves request counts and latency by route template and status, executions and model tokens", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const setup = yield* TestServer.oneStepOrchestration("local")
        const { account } = setup
        for (let i = 0; i < 3; i++) {
          const listed = yield* client.request("GET", "/api/v1/agents", { headers: TestServer.bearer(setup.key) })
          assert.strictEqual(listed.status, 200)
        }
        const missing = yield* client.request("GET", "/api/agents/00000000-0000-7000-8000-000000000000/conversations", {
          headers: TestServer.bearer(account.token)
        })
        assert.strictEqual(missing.status, 404)
        const started = yield* executeOnce(setup)
        assert.strictEqual(started.status, 202)
        yield* eventually(
          Effect.flatMap(
            client.request("GET", `/api/v1/executions/${started.body.executionId}`, {
              headers: TestServer.bearer(setup.key)
            }),
            (polled) =>
              polled.body.status === "completed"
                ? Effect.void
                : Effect.die(new Error(`the execution is ${polled.body.status}`))
          )
        )

        // The read model says "completed" a moment before the workflow returns and counts itself out:
        // scrape until the execution is counted and no workflow is in flight (bounded).
        const metrics = yield* eventually(
          Effect.flatMap(client.request("GET", "/metrics"), (metrics) => {
            const counted = sample(metrics.text, "executions_total", { status: "completed" })
            const inFlight = sample(metrics.text, "workflows_in_flight", {})
            return counted === 1 && inFlight === 0
              ? Effect.succeed(metrics)
              : Effect.die(new Error(`executions_total{completed} ${counted}, workflows_in_flight ${inFlight}`))
          }),
          { intervalMs: 20 }
        )
        assert.strictEqual(metrics.status, 200)
        assert.match(metrics.headers.get("content-type") ?? "", /^text\/plain/)
        const text = metrics.text
        assert.strictEqual(
          sample(text, "http_requests_total", { method: "GET", route: "/api/v1/agents", status: "200" }),
          3
        )
        assert.strictEqual(
          sample(text, "http_requests_total", { route: "/api/agents/:id/conversations", status: "404" }),
          1
        )
        assert.strictEqual(
          sample(text, "http_request_duration_seconds_count", { route: "/api/v1/agents", status: "200" }),
          3
        )
        assert.isDefined(sample(text, "http_request_duration_seconds_bucket", { route: "/api/v1/agents", le: "0.1" }))
        assert.strictEqual(sample(text, "executions_total", { status: "completed" }), 1)
        assert.strictEqual(sample(text, "workflows_in_flight", {}), 0)
        assert.isAbove(sample(text, "model_tokens_total", { model: "local", direction: "output" }) ?? 0, 0)
        // The workflow's start looked up its interrupt in the read that brought its start message.
        assert.strictEqual(sample(text, "workflow_start_lookups_total", { source: "prefetched" }), 1)
        assert.strictEqual(sample(text, "workflow_start_lookups_total", { source: "database" }) ?? 0, 0)
        // Ids never become labels: the route is the template.
        assert.notInclude(text, setup.agentId)
      })
    )

    it.effect("without METRICS_TOKEN: a loopback scrape is answered, one a proxy forwarded is a 403 problem", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const local = yield* client.request("GET", "/metrics")
        assert.strictEqual(local.status, 200)
        assert.include(local.text, "http_requests_total")
        // A proxy on this host connects from loopback too; its headers say whom it speaks for.
        for (const headers of [
          { "x-forwarded-for": "203.0.113.9" },
          { forwarded: "for=203.0.113.9" },
          { "x-real-ip": "203.0.113.9" }
        ]) {
          const refused = yield* client.request("GET", "/metrics", { headers })
          assert.strictEqual(refused.status, 403, JSON.stringify(headers))
          assert.strictEqual(refused.headers.get("content-type"), "application/problem+json")
          assert.strictEqual(refused.body.status, 403)
          assert.match(refused.body.detail, /METRICS_TOKEN/)
          assert.notInclude(refused.text, "http_requests_total")
        }
      })
    )
  })

  layer(TestServer.layer({ metricsEnabled: false, clusterCallTimeout: Duration.zero }), { excludeTestServices: true })(
    (it) => {
      it.effect(
        "METRICS_ENABLED=false: no /metrics; a cluster that does not take the start in time is a 503 problem",
        () =>
          Effect.gen(function* () {
            const client = yield* TestClient
            const metrics = yield* client.request("GET", "/metrics")
            assert.strictEqual(metrics.status, 404)

            const started = yield* executeOnce(yield* TestServer.oneStepOrchestration("local"))
            assert.strictEqual(started.status, 503)
            assert.strictEqual(started.headers.get("content-type"), "application/problem+json")
            assert.strictEqual(started.body.detail, "The execution is stored and will start shortly")
            assert.isString(started.body.executionId)
          })
      )
    }
  )

  const withFakeOpenAi = (settings: Parameters<typeof TestServer.layer>[0] = {}) =>
    Layer.unwrap(
      Effect.gen(function* () {
        const openai = yield* FakeOpenAi.make({ apiKey: openaiKey })
        return TestServer.layer({
          openaiBaseUrl: openai.url,
          openaiApiKey: Option.some(Redacted.make(openaiKey)),
          ...settings
        })
      })
    )

  layer(withFakeOpenAi(), { excludeTestServices: true })((it) => {
    it.effect("model labels are bounded: a tenant's made-up model name counts as openai/other", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const account = yield* TestServer.signUp()
        const key = yield* TestServer.createKey(account, ["chat"])
        for (const model of ["openai/some-made-up-name", "openai/gpt-4o-mini"]) {
          const agent = yield* TestServer.createAgent(account, { model })
          const chat = yield* client.request("POST", `/api/v1/agents/${agent.id}/chat`, {
            headers: TestServer.bearer(key.key),
            body: { message: "hello there" }
          })
          assert.strictEqual(chat.status, 200)
        }
        const metrics = yield* client.request("GET", "/metrics")
        assert.strictEqual(metrics.status, 200)
        assert.notInclude(metrics.text, "some-made-up-name")
        assert.isAbove(
          sample(metrics.text, "model_tokens_total", { model: "openai/other", direction: "output" }) ?? 0,
          0
        )
        assert.isAbove(
          sample(metrics.text, "model_tokens_total", { model: "openai/gpt-4o-mini", direction: "output" }) ?? 0,
          0
        )
        assert.isDefined(sample(metrics.text, "model_request_duration_seconds_count", { model: "openai/other" }))
      })
    )
  })

  const metricsToken = "metrics-scrape-token-0123456789"
  layer(TestServer.layer({ metricsToken: Option.some(Redacted.make(metricsToken)) }), { excludeTestServices: true })(
    (it) => {
      it.effect("METRICS_TOKEN: /metrics answers 401 problem+json without the bearer token, 200 with it", () =>
        Effect.gen(function* () {
          const client = yield* TestClient
          for (const headers of [
            {},
            TestServer.bearer("wrong"),
            TestServer.bearer(`${metricsToken}x`),
            {
              authorization: `Basic ${metricsToken}`
            }
          ]) {
            const refused = yield* client.request("GET", "/metrics", { headers })
            assert.strictEqual(refused.status, 401)
            assert.strictEqual(refused.headers.get("content-type"), "application/problem+json")
            assert.strictEqual(refused.headers.get("www-authenticate"), "Bearer")
            assert.strictEqual(refused.body.status, 401)
            assert.match(refused.body.detail, /METRICS_TOKEN/)
            assert.notInclude(refused.text, "http_requests_total")
          }
          const scraped = yield* client.request("GET", "/metrics", { headers: TestServer.bearer(metricsToken) })
          assert.strictEqual(scraped.status, 200)
          assert.include(scraped.text, "http_requests_total")
        })
      )
    }
  )
})

describe("who may scrape without METRICS_TOKEN", () => {
  it("loopback peers only, in every notation the socket may report; no peer is no scrape", () => {
    for (const address of ["127.0.0.1", "127.10.20.30", "::1", "::ffff:127.0.0.1", "[::1]", "0:0:0:0:0:0:0:1"]) {
      assert.isTrue(isLoopback(address), address)
      assert.isTrue(isLocalScrape(Option.some(address), {}), address)
    }
    for (const address of ["192.0.2.2", "10.0.0.1", "::ffff:10.0.0.1", "fe80::1", "::", "0.0.0.0", "localhost", ""]) {
      assert.isFalse(isLoopback(address), address)
      assert.isFalse(isLocalScrape(Option.some(address), {}), address)
    }
    assert.isFalse(isLocalScrape(Option.none(), {}))
    assert.isFalse(isLocalScrape(Option.some("127.0.0.1"), { "x-forwarded-for": "10.0.0.1" }))
    assert.isTrue(isLocalScrape(Option.some("127.0.0.1"), { accept: "text/plain" }))
  })
})

describe("labelled metrics", () => {
  it.effect("one metric per set of label values, made once, each counting its own series in the registry", () =>
    Effect.gen(function* () {
      const made: Array<Record<string, string>> = []
      const tokens = labelled(["model", "direction"], (attributes) => {
        made.push(attributes)
        return Metric.counter("labelled_test_tokens_total", { description: "test", incremental: true, attributes })
      })
      assert.strictEqual(tokens("local", "input"), tokens("local", "input"))
      assert.notStrictEqual(tokens("local", "input"), tokens("local", "output"))
      assert.notStrictEqual(tokens("local", "input"), tokens("openai/gpt-4o", "input"))
      assert.deepStrictEqual(made, [
        { model: "local", direction: "input" },
        { model: "local", direction: "output" },
        { model: "openai/gpt-4o", direction: "input" }
      ])
      // Updates that go from one series to another each count in their own.
      for (let i = 0; i < 3; i++) {
        yield* Metric.update(tokens("local", "input"), 10)
        yield* Metric.update(tokens("local", "output"), 2)
      }
      const snapshot = yield* Metric.snapshot
      const series = snapshot.filter((entry) => entry.id === "labelled_test_tokens_total")
      const count = (direction: string) =>
        series.find((entry) => entry.attributes?.direction === direction && entry.attributes?.model === "local")
      assert.strictEqual(series.length, 2)
      assert.deepStrictEqual((count("input")!.state as { count: number }).count, 30)
      assert.deepStrictEqual((count("output")!.state as { count: number }).count, 6)
    })
  )
})
