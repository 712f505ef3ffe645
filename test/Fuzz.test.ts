import { assert, layer } from "@effect/vitest"
import { Effect, Layer, Option, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import { FakeAnthropic } from "./support/FakeAnthropic.ts"
import { FakeOpenAi } from "./support/FakeOpenAi.ts"
import * as Fuzz from "./support/Fuzz.ts"
import * as TestServer from "./support/TestServer.ts"
import { TestClient } from "./support/TestServer.ts"

// A bounded run inside `npm test`; `npm run fuzz` runs a long one (FUZZ_REQUESTS).
// FUZZ_SEED replays a failing run. Every operation meets every kind of
// credential within 2 x operations x credential kinds requests, the default
// (FUZZ_TEST_REQUESTS sets another number).
const requests = process.env.FUZZ_TEST_REQUESTS === undefined ? undefined : Number(process.env.FUZZ_TEST_REQUESTS)
const stripeSecret = "whsec_fuzz"

/** The service with the providers on loopback fakes (PUTs may move an agent off `local`) and a webhook secret. */
const FuzzServer = Layer.unwrap(
  Effect.gen(function* () {
    const openai = yield* FakeOpenAi.make()
    const anthropic = yield* FakeAnthropic.make()
    return TestServer.layer({
      openaiBaseUrl: openai.url,
      openaiApiKey: Option.some(Redacted.make("sk-fuzz")),
      anthropicBaseUrl: anthropic.url,
      anthropicApiKey: Option.some(Redacted.make("sk-ant-fuzz")),
      modelMaxRetries: 0,
      stripeWebhookSecret: Option.some(Redacted.make(stripeSecret)),
      // The fuzzer logs its accounts in again and again (fresh sessions for
      // logouts) and sends garbage credentials that must reach their lookup;
      // throttling has tests of its own (test/Auth/Throttle.test.ts,
      // test/Auth/FailedCredentials.test.ts).
      authAttemptsPerAccount: 1_000_000,
      authAttemptsPerAddress: 1_000_000,
      credentialFailuresPerAddress: 1_000_000
    })
  })
)

layer(FuzzServer, { excludeTestServices: true })("fuzz", (it) => {
  it.effect(
    "hostile requests to every route with every credential get 4xx problems, never a 5xx",
    () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const sql = yield* SqlClient.SqlClient
        const seed = Fuzz.seedFromEnv()
        const fixtures = yield* Effect.promise(() =>
          Fuzz.prepare(client.baseUrl, {
            stripeSecret,
            promote: (tenantId) =>
              Effect.runPromise(
                sql`UPDATE tenants SET plan = 'business' WHERE id = ${tenantId}`.pipe(Effect.orDie, Effect.asVoid)
              )
          })
        )
        const report = yield* Effect.promise(() =>
          Fuzz.run({ baseUrl: client.baseUrl, seed, requests, concurrency: 6, fixtures })
        )
        const ready = yield* client.request("GET", "/health/ready")
        assert.strictEqual(ready.status, 200, `not ready after the fuzz run (FUZZ_SEED=${seed})`)
        assert.strictEqual(report.failures.length, 0, `${Fuzz.formatFailures(report)}\n${Fuzz.formatCounts(report)}`)
        assert.deepStrictEqual(report.untried, [], "every route was tried with every kind of credential")
        // The run reached past authentication and validation into the handlers.
        const ok = Object.entries(report.byStatus)
          .filter(([status]) => status.startsWith("2"))
          .reduce((n, [, c]) => n + c, 0)
        assert.isAbove(ok, report.requests / 20, Fuzz.formatCounts(report))
      }),
    { timeout: 120_000 }
  )
})

layer(TestServer.layer(), { excludeTestServices: true })("requests Node cannot parse", (it) => {
  const rawCases: ReadonlyArray<readonly [string, string, number]> = [
    ["an unknown method", "FOO /api/agents HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n", 400],
    ["a lower-case method", "get /health/live HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n", 400],
    [
      "a header line without a colon",
      "GET /health/live HTTP/1.1\r\nhost: x\r\nno colon\r\nconnection: close\r\n\r\n",
      400
    ],
    [
      "two different Content-Lengths",
      "POST /api/auth/login HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\ncontent-length: 3\r\nconnection: close\r\n\r\n{}",
      400
    ],
    [
      "Transfer-Encoding with Content-Length",
      "POST /api/auth/login HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\ncontent-length: 2\r\nconnection: close\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
      400
    ],
    [
      "headers over Node's limit",
      `GET /health/live HTTP/1.1\r\nhost: x\r\nx-big: ${"h".repeat(20_000)}\r\nconnection: close\r\n\r\n`,
      431
    ],
    ["an HTTP/1.1 request without Host", "GET /health/live HTTP/1.1\r\nconnection: close\r\n\r\n", 400]
  ]
  for (const [name, raw, status] of rawCases) {
    it.effect(`${name} gets a ${status} problem`, () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const port = Number(new URL(client.baseUrl).port)
        const outcome = yield* Effect.promise(() => Fuzz.sendBytes(port, Buffer.from(raw, "latin1"), 5_000))
        assert.strictEqual(outcome.status, status, outcome.error ?? outcome.body)
        const header = (name: string) => outcome.headers.find(([key]) => key === name)?.[1]
        assert.strictEqual(header("content-type"), "application/problem+json")
        assert.isString(header("x-request-id"))
        const body = JSON.parse(outcome.body)
        assert.strictEqual(body.type, "about:blank")
        assert.strictEqual(body.status, status)
        assert.isString(body.title)
      })
    )
  }

  it.effect("an HTTP/1.0 request without Host is served", () =>
    Effect.gen(function* () {
      const client = yield* TestClient
      const port = Number(new URL(client.baseUrl).port)
      const outcome = yield* Effect.promise(() =>
        Fuzz.sendBytes(port, Buffer.from("GET /health/live HTTP/1.0\r\n\r\n"), 5_000)
      )
      assert.strictEqual(outcome.status, 200, outcome.error ?? outcome.body)
    })
  )
})
