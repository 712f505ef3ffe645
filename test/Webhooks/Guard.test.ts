import { assert, describe, it, layer } from "@effect/vitest"
import { PgClient } from "@effect/sql-pg"
import { ConfigProvider, Duration, Effect, Option, Redacted, Result } from "effect"
import * as Crypto from "node:crypto"
import { settingsConfig } from "../../src/Config.ts"
import { TenantId } from "../../src/Domain/Ids.ts"
import * as Guard from "../../src/Webhooks/Guard.ts"
import { Webhooks } from "../../src/Webhooks/Webhooks.ts"
import * as FakeReceiver from "../support/FakeReceiver.ts"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"

// The guard against server-side request forgery, with WEBHOOK_ALLOW_PRIVATE off.

describe("addresses", () => {
  it("refuses every non-public address, in every IPv6 form that stands for one", () => {
    const refused = [
      "127.0.0.1",
      "127.1.2.3",
      "10.0.0.1",
      "172.16.0.1",
      "172.31.255.255",
      "192.168.1.1",
      "100.64.0.1",
      "169.254.169.254",
      "169.254.1.1",
      "0.0.0.0",
      "0.1.2.3",
      "255.255.255.255",
      "224.0.0.1",
      "192.0.2.1",
      "198.18.0.1",
      "203.0.113.9",
      "240.0.0.1",
      "::1",
      "::",
      "fe80::1",
      "fc00::1",
      "fd00:ec2::254",
      "ff02::1",
      "2001:db8::1",
      "::ffff:127.0.0.1",
      "::ffff:7f00:1",
      "::ffff:10.0.0.1",
      "::ffff:169.254.169.254",
      "::127.0.0.1",
      "64:ff9b::7f00:1",
      "64:ff9b::a9fe:a9fe",
      "2002:7f00:1::1",
      "2002:a00:1::",
      "[::1]"
    ]
    for (const address of refused) assert.isString(Guard.refusal(address, false), address)
    for (const address of ["93.184.215.14", "8.8.8.8", "2606:4700:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808"]) {
      assert.isUndefined(Guard.refusal(address, false), address)
    }
  })

  it("WEBHOOK_ALLOW_PRIVATE opens private, loopback and link-local addresses, never the metadata ones", () => {
    for (const address of ["127.0.0.1", "10.0.0.1", "192.168.1.1", "::1", "fd12::1", "::ffff:127.0.0.1", "169.254.1.1"]) {
      assert.isUndefined(Guard.refusal(address, true), address)
    }
    for (const address of ["169.254.169.254", "::ffff:169.254.169.254", "fd00:ec2::254", "100.100.100.200", "224.0.0.1", "0.0.0.0"]) {
      assert.match(Guard.refusal(address, true) ?? "", /metadata|multicast|unspecified/, address)
    }
    assert.isTrue(Result.isFailure(Guard.parseUrl("http://metadata.google.internal/computeMetadata/v1/")))
  })

  it.effect("a delivery connects to the checked address, whatever the name would resolve to now", () =>
    Effect.scoped(Effect.gen(function*() {
      const receiver = yield* FakeReceiver.make
      // `.invalid` never resolves: the request can only have gone to the pinned address.
      const url = new URL(`http://pinned.invalid:${receiver.port}/path?q=1`)
      const answer = yield* Guard.post({
        url,
        address: "127.0.0.1",
        headers: { "content-type": "application/json" },
        body: "{\"a\":1}",
        timeout: Duration.seconds(5),
        maxBody: 1024
      })
      assert.strictEqual(answer.status, 200)
      assert.strictEqual(receiver.requests[0]!.headers.host, `pinned.invalid:${receiver.port}`)
      assert.strictEqual(receiver.requests[0]!.path, "/path?q=1")
      assert.strictEqual(receiver.requests[0]!.body, "{\"a\":1}")
      // At most 1 KB of an answer is kept.
      receiver.script({ body: "x".repeat(100_000) })
      const long = yield* Guard.post({ url, address: "127.0.0.1", headers: {}, body: "", timeout: Duration.seconds(5), maxBody: 1024 })
      assert.strictEqual(long.body.length, 1024)
    })))
})

describe("settings", () => {
  const read = (env: Record<string, string>) => Effect.result(settingsConfig.parse(ConfigProvider.fromEnv({ env })))

  it.effect("bad webhook settings stop the start with a message naming the variable", () =>
    Effect.gen(function*() {
      const good = yield* read({ WEBHOOK_RETRY_SCHEDULE: "100ms, 2s,5m,1h,1d", WEBHOOK_ALLOW_PRIVATE: "yes" })
      assert.isTrue(Result.isSuccess(good))
      if (Result.isSuccess(good)) {
        assert.deepStrictEqual(good.success.webhookRetrySchedule.map(Duration.toMillis), [100, 2_000, 300_000, 3_600_000, 86_400_000])
        assert.isTrue(good.success.webhookAllowPrivate)
      }
      const defaults = yield* read({})
      if (Result.isSuccess(defaults)) {
        assert.deepStrictEqual(
          defaults.success.webhookRetrySchedule.map(Duration.toSeconds),
          [5, 300, 1800, 7200, 18000, 36000, 36000]
        )
        assert.isFalse(defaults.success.webhookAllowPrivate)
      }
      for (const [name, value] of [
        ["WEBHOOK_RETRY_SCHEDULE", "5s,soon"],
        ["WEBHOOK_ALLOW_PRIVATE", "perhaps"],
        ["WEBHOOK_SECRET_KEY", "c2hvcnQ="],
        ["WEBHOOK_TIMEOUT", "fast"]
      ] as const) {
        const bad = yield* read({ [name]: value })
        assert.isTrue(Result.isFailure(bad), name)
        if (Result.isFailure(bad)) assert.include(String(bad.failure), name)
      }
    }))
})

const key = Option.some(Redacted.make(Crypto.randomBytes(32).toString("base64")))

layer(TestServer.layer({
  webhookAllowPrivate: false,
  webhookRetrySchedule: [Duration.millis(100), Duration.millis(100)],
  webhookSecretKey: key
}), { excludeTestServices: true })("webhook URLs with WEBHOOK_ALLOW_PRIVATE off", (it) => {
  it.effect("a URL that is not public http(s) is a 400 naming the field, on create and on update", () =>
    Effect.gen(function*() {
      const client = yield* TestClient
      const account = yield* TestServer.signUp()
      const agent = yield* TestServer.createAgent(account, { model: "local" })
      const session = TestServer.bearer(account.token)
      const steps = [{ id: "s", agentId: agent.id, prompt: "Say {{input}}" }]
      const refusedUrls: ReadonlyArray<readonly [string, RegExp]> = [
        ["http://127.0.0.1:8080/hook", /loopback/],
        ["http://10.0.0.1/hook", /private/],
        ["http://169.254.169.254/latest/meta-data/", /metadata/],
        ["http://[::ffff:127.0.0.1]:8080/hook", /127\.0\.0\.1.*loopback/],
        ["http://localhost:8080/hook", /loopback/],
        ["http://2130706433/hook", /loopback/],
        ["http://0x7f.1/hook", /loopback/],
        ["http://[fd00:ec2::254]/", /metadata/],
        ["http://[::1]/hook", /loopback/],
        ["http://0.0.0.0/", /unspecified/],
        ["http://metadata.google.internal/", /metadata/],
        ["ftp://example.com/hook", /http or https/],
        ["https://user:secret@example.com/hook", /user name or password/],
        ["not a url", /absolute http\(s\) URL/]
      ]
      for (const [url, why] of refusedUrls) {
        const created = yield* client.request("POST", "/api/orchestrations", {
          headers: session,
          body: { name: "Flow", steps, outputWebhookUrl: url }
        })
        assert.strictEqual(created.status, 400, `${url}: ${created.text}`)
        assert.strictEqual(created.headers.get("content-type"), "application/problem+json")
        assert.deepStrictEqual(created.body.errors.map((error: any) => error.path), [["payload", "outputWebhookUrl"]], url)
        assert.match(created.body.errors[0].message, why, url)
        // A new secret must never leak through a refusal.
        assert.notInclude(created.text, "whsec_", url)
      }
      // A refused create leaves nothing behind.
      const listed = yield* client.request("GET", "/api/orchestrations", { headers: session })
      assert.strictEqual(listed.body.total, 0)

      const created = yield* client.request("POST", "/api/orchestrations", { headers: session, body: { name: "Flow", steps } })
      assert.strictEqual(created.status, 201, created.text)
      const updated = yield* client.request("PUT", `/api/orchestrations/${created.body.id}`, {
        headers: session,
        body: { name: "Renamed", outputWebhookUrl: "http://192.168.0.10/hook" }
      })
      assert.strictEqual(updated.status, 400, updated.text)
      assert.deepStrictEqual(updated.body.errors.map((error: any) => error.path), [["payload", "outputWebhookUrl"]])
      // Refused: nothing else changed either.
      const got = yield* client.request("GET", `/api/orchestrations/${created.body.id}`, { headers: session })
      assert.deepStrictEqual([got.body.name, got.body.outputWebhookUrl], ["Flow", null])
    }))

  it.effect("an address refused at delivery (the name now resolves elsewhere) is a logged, retried failure; nothing is sent", () =>
    Effect.scoped(Effect.gen(function*() {
      const client = yield* TestClient
      const webhooks = yield* Webhooks
      const sql = yield* PgClient.PgClient
      const receiver = yield* FakeReceiver.make
      const flow = yield* TestServer.oneStepOrchestration("local")
      const session = TestServer.bearer(flow.account.token)
      const owner = { kind: "orchestration" as const, id: flow.orchestrationId }
      // A public address passes when the URL is set...
      const set = yield* webhooks.configure(
        TenantId.make(flow.account.tenantId),
        owner,
        { url: "http://93.184.215.14/hook" },
        ["payload", "outputWebhookUrl"]
      )
      assert.isString(set.signingSecret)
      // ...then its host comes to mean loopback, as a rebinding name would.
      yield* sql`UPDATE webhook_endpoints SET url = ${receiver.url()} WHERE owner_id = ${flow.orchestrationId}`
      const started = yield* client.request("POST", `/api/v1/orchestrations/${flow.orchestrationId}/execute`, {
        headers: TestServer.bearer(flow.key),
        body: { input: "hi" }
      })
      assert.strictEqual(started.status, 202, started.text)
      let log: any
      const deadline = Date.now() + 15_000
      while (Date.now() < deadline) {
        log = (yield* client.request("GET", `/api/orchestrations/${flow.orchestrationId}/deliveries`, { headers: session })).body
        if (log.total >= 3) break
        yield* Effect.sleep("50 millis")
      }
      assert.strictEqual(log.total, 3, JSON.stringify(log))
      for (const attempt of log.data) {
        assert.isNull(attempt.httpStatus)
        assert.match(attempt.error, /Refused address: 127\.0\.0\.1 is a loopback address/)
      }
      assert.deepStrictEqual(log.data.map((attempt: any) => attempt.attempt), [3, 2, 1])
      assert.strictEqual(receiver.requests.length, 0)
    })))
})
