import { assert, describe, it, layer } from "@effect/vitest"
import { PgClient } from "@effect/sql-pg"
import { ConfigProvider, Duration, Effect, Option, Redacted, Result } from "effect"
import * as Crypto from "node:crypto"
import { settingsConfig } from "../../src/Config.ts"
import { TenantId } from "../../src/Domain/Ids.ts"
import * as Guard from "../../src/Webhooks/Guard.ts"
import { Webhooks } from "../../src/Webhooks/Webhooks.ts"
import { eventually } from "../support/Eventually.ts"
import * as FakeDns from "../support/FakeDns.ts"
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
      "[::1]",
      // ECS task credentials, EKS Pod Identity (v4 and v6).
      "169.254.170.2",
      "169.254.170.23",
      "fd00:ec2::23",
      // RFC 8215's local-use NAT64 prefix: 127.0.0.1 and 169.254.169.254 in its /48 layout, 8.8.8.8 too.
      "64:ff9b:1:7f00:0:100:808:808",
      "64:ff9b:1:a9fe:a9:fe00:808:808",
      "64:ff9b:1:808:8:800::"
    ]
    for (const address of refused) assert.isString(Guard.refusal(address, false), address)
    for (const address of ["93.184.215.14", "8.8.8.8", "2606:4700:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808"]) {
      assert.isUndefined(Guard.refusal(address, false), address)
    }
  })

  it("WEBHOOK_ALLOW_PRIVATE opens private, loopback and link-local addresses, never 169.254/16, fd00:ec2::/32 or local NAT64", () => {
    for (const address of ["127.0.0.1", "10.0.0.1", "192.168.1.1", "::1", "fd12::1", "::ffff:127.0.0.1", "fe80::1"]) {
      assert.isUndefined(Guard.refusal(address, true), address)
    }
    for (const address of [
      "169.254.169.254",
      "::ffff:169.254.169.254",
      "fd00:ec2::254",
      "100.100.100.200",
      "224.0.0.1",
      "0.0.0.0",
      "169.254.1.1",
      "169.254.170.2",
      "169.254.170.23",
      "::ffff:169.254.170.2",
      "64:ff9b::a9fe:aa02",
      "fd00:ec2::23",
      "fd00:ec2:ffff::1"
    ]) {
      assert.match(Guard.refusal(address, true) ?? "", /metadata|multicast|unspecified/, address)
    }
    assert.match(Guard.refusal("64:ff9b:1:7f00:0:100:808:808", true) ?? "", /local-use NAT64/)
    assert.isTrue(Result.isFailure(Guard.parseUrl("http://metadata.google.internal/computeMetadata/v1/")))
  })

  it.effect("a delivery connects to the checked address, whatever the name would resolve to now", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const receiver = yield* FakeReceiver.make
        // `.invalid` never resolves: the request can only have gone to the pinned address.
        const url = new URL(`http://pinned.invalid:${receiver.port}/path?q=1`)
        const answer = yield* Guard.post({
          url,
          address: "127.0.0.1",
          headers: { "content-type": "application/json" },
          body: '{"a":1}',
          timeout: Duration.seconds(5),
          maxBody: 1024
        })
        assert.strictEqual(answer.status, 200)
        assert.strictEqual(receiver.requests[0]!.headers.host, `pinned.invalid:${receiver.port}`)
        assert.strictEqual(receiver.requests[0]!.path, "/path?q=1")
        assert.strictEqual(receiver.requests[0]!.body, '{"a":1}')
        // At most 1 KB of an answer is kept.
        receiver.script({ body: "x".repeat(100_000) })
        const long = yield* Guard.post({
          url,
          address: "127.0.0.1",
          headers: {},
          body: "",
          timeout: Duration.seconds(5),
          maxBody: 1024
        })
        assert.strictEqual(long.body.length, 1024)
      })
    )
  )
})

describe("ports and targets", () => {
  const policy: Guard.Policy = { allowPrivate: false, allowedPorts: [80, 443, 8080, 8443] }
  const admit = (url: string, addresses: ReadonlyArray<string>, overrides: Partial<Guard.Policy> = {}) =>
    Guard.admit(new URL(url), addresses, { ...policy, ...overrides })

  it("a public address is reached on WEBHOOK_ALLOWED_PORTS only, the scheme's port included", () => {
    for (const url of [
      "http://x.test/",
      "https://x.test/",
      "http://x.test:8080/",
      "https://x.test:8443/",
      "http://x.test:443/"
    ]) {
      assert.isTrue(Result.isSuccess(admit(url, ["93.184.215.14"])), url)
    }
    for (const port of [22, 5432, 34431, 6379, 8081]) {
      const refused = admit(`http://x.test:${port}/`, ["93.184.215.14"])
      assert.isTrue(Result.isFailure(refused), String(port))
      if (Result.isFailure(refused)) {
        assert.strictEqual(
          refused.failure,
          `Refused port: ${port} is not one of 80, 443, 8080, 8443 (WEBHOOK_ALLOWED_PORTS)`
        )
      }
    }
    // The list is the operator's.
    assert.isTrue(Result.isSuccess(admit("http://x.test:9000/", ["93.184.215.14"], { allowedPorts: [9000] })))
    assert.isTrue(Result.isFailure(admit("http://x.test/", ["93.184.215.14"], { allowedPorts: [9000] })))
  })

  it("with private targets allowed, a target all of whose addresses are private may use any port; a public one may not", () => {
    assert.isTrue(Result.isSuccess(admit("http://x.test:34431/", ["127.0.0.1", "::1"], { allowPrivate: true })))
    assert.isTrue(Result.isSuccess(admit("http://x.test:5678/", ["10.1.2.3"], { allowPrivate: true })))
    assert.isTrue(Result.isFailure(admit("http://x.test:22/", ["93.184.215.14"], { allowPrivate: true })))
    // One public address among them: the public rule.
    assert.isTrue(Result.isFailure(admit("http://x.test:22/", ["10.1.2.3", "93.184.215.14"], { allowPrivate: true })))
    // Addresses are judged before the port, so the refusal names the address.
    const loopback = admit("http://x.test:22/", ["127.0.0.1"])
    assert.isTrue(Result.isFailure(loopback) && /loopback/.test(loopback.failure))
  })

  it("only a target whose every address is public has its answer kept in the delivery log", () => {
    const outside = admit("https://x.test/", ["93.184.215.14", "2606:4700:4700::1111"])
    assert.isTrue(Result.isSuccess(outside) && outside.success.public)
    for (const addresses of [["127.0.0.1"], ["10.0.0.1", "93.184.215.14"], ["fd12::1"]]) {
      const inside = admit("https://x.test/", addresses, { allowPrivate: true })
      assert.isTrue(Result.isSuccess(inside) && !inside.success.public, addresses.join(","))
    }
  })
})

describe("name resolution", () => {
  const policy: Guard.Policy = { allowPrivate: false, allowedPorts: [80, 443] }

  it.live("names are resolved with c-ares at the configured servers (A and AAAA), every address checked", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const dns = yield* FakeDns.make({
          "public.test": { a: ["93.184.215.14"], aaaa: ["2606:4700:4700::1111"] },
          "v6only.test": { aaaa: ["2606:4700:4700::1111"] },
          "rebind.test": { a: ["93.184.215.14", "127.0.0.1"] },
          "empty.test": {}
        })
        const guard = yield* Guard.make({ policy, concurrency: 4, servers: [dns.address] })
        assert.deepStrictEqual(yield* guard.check(new URL("https://public.test/hook")), {
          addresses: ["93.184.215.14", "2606:4700:4700::1111"],
          public: true
        })
        assert.deepStrictEqual((yield* guard.check(new URL("http://v6only.test/"))).addresses, ["2606:4700:4700::1111"])
        assert.match(
          yield* Effect.flip(guard.check(new URL("http://rebind.test/"))),
          /^Refused address: 127\.0\.0\.1 is a loopback address/
        )
        assert.match(
          yield* Effect.flip(guard.check(new URL("http://missing.test/"))),
          /^missing\.test could not be resolved \(ENOTFOUND\)/
        )
        assert.match(
          yield* Effect.flip(guard.check(new URL("http://empty.test/"))),
          /^empty\.test could not be resolved \(ENODATA\)/
        )
        assert.deepStrictEqual([...new Set(dns.queries.map((query) => `${query.name} ${query.type}`))].sort(), [
          "empty.test A",
          "empty.test AAAA",
          "missing.test A",
          "missing.test AAAA",
          "public.test A",
          "public.test AAAA",
          "rebind.test A",
          "rebind.test AAAA",
          "v6only.test A",
          "v6only.test AAAA"
        ])
        // Literal addresses and localhost ask no name server.
        const asked = dns.queries.length
        assert.match(
          yield* Effect.flip(guard.check(new URL("http://localhost:80/"))),
          /127\.0\.0\.1 is a loopback address/
        )
        assert.match(yield* Effect.flip(guard.check(new URL("http://api.localhost/"))), /loopback/)
        assert.deepStrictEqual((yield* guard.check(new URL("http://8.8.8.8/"))).addresses, ["8.8.8.8"])
        assert.strictEqual(dns.queries.length, asked)
      })
    )
  )

  it.live("a name server that never answers: each lookup ends within 5 s, and at most `concurrency` run at once", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const names = ["a.test", "b.test", "c.test", "d.test"]
        const dns = yield* FakeDns.make(Object.fromEntries(names.map((name) => [name, "silent" as const])))
        const guard = yield* Guard.make({ policy, concurrency: 2, servers: [dns.address] })
        const started = Date.now()
        const outcomes = yield* Effect.forEach(
          names,
          (name) =>
            guard.check(new URL(`http://${name}/`)).pipe(
              Effect.flip,
              Effect.map((why) => ({ why, at: Date.now() }))
            ),
          { concurrency: "unbounded" }
        )
        for (const outcome of outcomes) assert.match(outcome.why, /could not be resolved/)
        assert.isBelow(Math.max(...outcomes.map((outcome) => outcome.at)) - started, 6_500)
        // Until a lookup had ended, only two names had been asked about.
        const firstEnd = Math.min(...outcomes.map((outcome) => outcome.at))
        assert.strictEqual(
          new Set(dns.queries.filter((query) => query.at < firstEnd).map((query) => query.name)).size,
          2
        )
      })
    )
  )
})

describe("settings", () => {
  const read = (env: Record<string, string>) => Effect.result(settingsConfig.parse(ConfigProvider.fromEnv({ env })))

  it.effect("bad webhook settings stop the start with a message naming the variable", () =>
    Effect.gen(function* () {
      const good = yield* read({ WEBHOOK_RETRY_SCHEDULE: "100ms, 2s,5m,1h,1d", WEBHOOK_ALLOW_PRIVATE: "yes" })
      assert.isTrue(Result.isSuccess(good))
      if (Result.isSuccess(good)) {
        assert.deepStrictEqual(
          good.success.webhookRetrySchedule.map(Duration.toMillis),
          [100, 2_000, 300_000, 3_600_000, 86_400_000]
        )
        assert.isTrue(good.success.webhookAllowPrivate)
      }
      const defaults = yield* read({})
      if (Result.isSuccess(defaults)) {
        assert.deepStrictEqual(
          defaults.success.webhookRetrySchedule.map(Duration.toSeconds),
          [5, 300, 1800, 7200, 18000, 36000, 36000]
        )
        assert.isFalse(defaults.success.webhookAllowPrivate)
        assert.deepStrictEqual(defaults.success.webhookAllowedPorts, [80, 443, 8080, 8443])
        assert.strictEqual(defaults.success.webhookDnsConcurrency, 16)
      }
      const ports = yield* read({ WEBHOOK_ALLOWED_PORTS: "443, 9443" })
      assert.deepStrictEqual(Result.isSuccess(ports) ? ports.success.webhookAllowedPorts : undefined, [443, 9443])
      for (const [name, value] of [
        ["WEBHOOK_RETRY_SCHEDULE", "5s,soon"],
        ["WEBHOOK_ALLOW_PRIVATE", "perhaps"],
        ["WEBHOOK_SECRET_KEY", "c2hvcnQ="],
        ["WEBHOOK_TIMEOUT", "fast"],
        ["WEBHOOK_ALLOWED_PORTS", "443,ssh"],
        ["WEBHOOK_ALLOWED_PORTS", "0"],
        ["WEBHOOK_ALLOWED_PORTS", "70000"],
        ["WEBHOOK_DNS_CONCURRENCY", "0"]
      ] as const) {
        const bad = yield* read({ [name]: value })
        assert.isTrue(Result.isFailure(bad), name)
        if (Result.isFailure(bad)) assert.include(String(bad.failure), name)
      }
    })
  )
})

const key = Option.some(Redacted.make(Crypto.randomBytes(32).toString("base64")))

layer(
  TestServer.layer({
    webhookAllowPrivate: false,
    webhookRetrySchedule: [Duration.millis(100), Duration.millis(100)],
    webhookSecretKey: key
  }),
  { excludeTestServices: true }
)("webhook URLs with WEBHOOK_ALLOW_PRIVATE off", (it) => {
  it.effect("a URL that is not public http(s) is a 400 naming the field, on create and on update", () =>
    Effect.gen(function* () {
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
        ["http://93.184.215.14:22/hook", /Refused port: 22 is not one of 80, 443, 8080, 8443/],
        ["http://93.184.215.14:5432/hook", /Refused port: 5432/],
        ["http://[2606:4700:4700::1111]:34431/hook", /Refused port: 34431/],
        ["http://[64:ff9b:1:7f00:0:100:808:808]/hook", /local-use NAT64/],
        ["http://169.254.170.2/v2/credentials", /169\.254\.0\.0\/16/],
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
        assert.deepStrictEqual(
          created.body.errors.map((error: any) => error.path),
          [["payload", "outputWebhookUrl"]],
          url
        )
        assert.match(created.body.errors[0].message, why, url)
        // A new secret must never leak through a refusal.
        assert.notInclude(created.text, "whsec_", url)
      }
      // A refused create leaves nothing behind.
      const listed = yield* client.request("GET", "/api/orchestrations", { headers: session })
      assert.strictEqual(listed.body.total, 0)

      const created = yield* client.request("POST", "/api/orchestrations", {
        headers: session,
        body: { name: "Flow", steps }
      })
      assert.strictEqual(created.status, 201, created.text)
      const updated = yield* client.request("PUT", `/api/orchestrations/${created.body.id}`, {
        headers: session,
        body: { name: "Renamed", outputWebhookUrl: "http://192.168.0.10/hook" }
      })
      assert.strictEqual(updated.status, 400, updated.text)
      assert.deepStrictEqual(
        updated.body.errors.map((error: any) => error.path),
        [["payload", "outputWebhookUrl"]]
      )
      // Refused: nothing else changed either.
      const got = yield* client.request("GET", `/api/orchestrations/${created.body.id}`, { headers: session })
      assert.deepStrictEqual([got.body.name, got.body.outputWebhookUrl], ["Flow", null])
    })
  )

  it.effect(
    "an address refused at delivery (the name now resolves elsewhere) is a logged, retried failure; nothing is sent",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
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
          const log = yield* eventually(
            Effect.map(
              client.request("GET", `/api/orchestrations/${flow.orchestrationId}/deliveries`, { headers: session }),
              (got) => {
                assert.isAtLeast(got.body.total, 3, "attempts logged")
                return got.body
              }
            )
          )
          assert.strictEqual(log.total, 3, JSON.stringify(log))
          for (const attempt of log.data) {
            assert.isNull(attempt.httpStatus)
            assert.match(attempt.error, /Refused address: 127\.0\.0\.1 is a loopback address/)
          }
          assert.deepStrictEqual(
            log.data.map((attempt: any) => attempt.attempt),
            [3, 2, 1]
          )
          assert.strictEqual(receiver.requests.length, 0)
        })
      )
  )
})

layer(
  TestServer.layer({
    webhookAllowPrivate: true,
    webhookRetrySchedule: [Duration.millis(100)],
    webhookSecretKey: key
  }),
  { excludeTestServices: true }
)("webhook URLs with WEBHOOK_ALLOW_PRIVATE on", (it) => {
  it.effect("a private target's answers stay out of the delivery log; 169.254/16 stays refused", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const client = yield* TestClient
        const webhooks = yield* Webhooks
        const receiver = yield* FakeReceiver.make
        const flow = yield* TestServer.oneStepOrchestration("local")
        const session = TestServer.bearer(flow.account.token)
        const tenantId = TenantId.make(flow.account.tenantId)
        const owner = { kind: "orchestration" as const, id: flow.orchestrationId }
        const field = ["payload", "outputWebhookUrl"]
        for (const url of ["http://169.254.170.2/v2/credentials", "http://[fd00:ec2::23]/"]) {
          const refused = yield* Effect.flip(webhooks.configure(tenantId, owner, { url }, field))
          const message = refused._tag === "BadRequestProblem" ? refused.errors?.[0]?.message : undefined
          assert.match(message ?? "", /where cloud metadata and credential services answer/, url)
        }
        // Loopback on the receiver's ephemeral port: private targets may use any port.
        yield* webhooks.configure(tenantId, owner, { url: receiver.url() }, field)
        receiver.script({ status: 500, body: "internal secret" }, { status: 200, body: '{"internal":"secret"}' })
        const started = yield* client.request("POST", `/api/v1/orchestrations/${flow.orchestrationId}/execute`, {
          headers: TestServer.bearer(flow.key),
          body: { input: "hi" }
        })
        assert.strictEqual(started.status, 202, started.text)
        const log = yield* eventually(
          Effect.map(
            client.request("GET", `/api/orchestrations/${flow.orchestrationId}/deliveries`, { headers: session }),
            (got) => {
              assert.isAtLeast(got.body.total, 2, "attempts logged")
              return got.body
            }
          )
        )
        assert.deepStrictEqual(
          log.data.map((attempt: any) => [attempt.attempt, attempt.httpStatus, attempt.response]),
          [
            [2, 200, null],
            [1, 500, null]
          ]
        )
        assert.strictEqual(receiver.requests.length, 2)
        assert.notInclude(JSON.stringify(log), "secret")
      })
    )
  )
})
