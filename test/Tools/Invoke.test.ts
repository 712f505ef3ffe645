import { assert, describe, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { AgentsRepo } from "../../src/Agents/Repo.ts"
import { TenantId } from "../../src/Domain/Ids.ts"
import { KnowledgeSearch } from "../../src/Knowledge/Search.ts"
import { Secrets } from "../../src/Secrets/Secrets.ts"
import type { HttpExchange } from "../../src/Tools/Call.ts"
import { type CallContext, maxResponseBytes, ToolInvoker } from "../../src/Tools/Invoke.ts"
import { McpStdio } from "../../src/Tools/McpStdio.ts"
import { McpOAuth } from "../../src/Tools/McpOAuth.ts"
import type { Tool } from "../../src/Tools/Tool.ts"
import * as Guard from "../../src/Webhooks/Guard.ts"
import * as FakeDns from "../support/FakeDns.ts"
import * as FakeReceiver from "../support/FakeReceiver.ts"
import { seedKnowledge } from "../support/Knowledge.ts"
import * as TestServer from "../support/TestServer.ts"
import { type Account, TestClient } from "../support/TestServer.ts"

// One tool call (src/Tools/Invoke.ts) against a real loopback receiver, on a
// real server and database with WEBHOOK_ALLOW_PRIVATE on (so tools may be
// saved with loopback urls). The invoker is built with a guard of the test's
// own: private targets allowed or not, and a fake name server.

const token = "tok_9f8e7d6c5b4a3210ZYXW"

const allowing = { allowPrivate: true, allowedPorts: [80, 443] }
const refusing = { allowPrivate: false, allowedPorts: [80, 443] }

/** The invoker with a guard under `policy`, resolving names at `servers`. */
const invokerLayer = (policy: Guard.Policy, servers?: ReadonlyArray<string>) =>
  Layer.effect(ToolInvoker, ToolInvoker.make).pipe(
    Layer.provide([
      Secrets.layer,
      KnowledgeSearch.layer,
      AgentsRepo.layer,
      McpStdio.layer,
      McpOAuth.layer,
      Layer.effect(Guard.EgressGuard, Guard.make({ policy, concurrency: 4, servers }))
    ])
  )

const context = (account: Account, overrides: Partial<CallContext> = {}): CallContext => ({
  tenantId: TenantId.make(account.tenantId),
  runId: "run-1",
  callId: "call-1",
  agentChain: [],
  ...overrides
})

const invoke = (
  tool: Tool,
  args: unknown,
  ctx: CallContext,
  policy: Guard.Policy = allowing,
  servers?: Array<string>
) =>
  Effect.gen(function* () {
    const invoker = yield* ToolInvoker
    return yield* invoker.invoke(tool, args, ctx)
  }).pipe(Effect.provide(invokerLayer(policy, servers)))

const createTool = (account: Account, body: Record<string, unknown>) =>
  Effect.gen(function* () {
    const client = yield* TestClient
    const created = yield* client.request("POST", "/api/tools", {
      headers: TestServer.bearer(account.token),
      body: { description: "A tool under test.", ...body }
    })
    assert.strictEqual(created.status, 201, created.text)
    return created.body as unknown as Tool
  }).pipe(Effect.map((tool) => ({ ...tool, updatedAt: new Date(tool.updatedAt) }) as Tool))

const createSecret = (account: Account, name: string, value: string) =>
  Effect.gen(function* () {
    const client = yield* TestClient
    const created = yield* client.request("POST", "/api/secrets", {
      headers: TestServer.bearer(account.token),
      body: { name, value }
    })
    assert.strictEqual(created.status, 201, created.text)
  })

const orderParameters = {
  type: "object",
  properties: { id: { type: "string" }, status: { type: "string" }, count: { type: "integer" } },
  required: ["id"],
  additionalProperties: false
}

/** An http tool of the account calling the receiver. */
const httpTool = (
  account: Account,
  receiver: FakeReceiver.FakeReceiver,
  settings: Record<string, unknown> = {},
  extra: Record<string, unknown> = {}
) =>
  createTool(account, {
    name: `http_${Math.random().toString(36).slice(2, 10)}`,
    parameters: orderParameters,
    settings: {
      kind: "http",
      method: "POST",
      url: `http://127.0.0.1:${receiver.port}/orders/{{args.id}}?status={{args.status}}`,
      headers: { Authorization: "Bearer {{secrets.SHOP_TOKEN}}", "X-Shop": "main" },
      allowedHosts: ["127.0.0.1"],
      ...settings
    },
    ...extra
  })

/** The tool with other settings, as if it had been saved so (what the guard refuses at save time cannot be). */
const withSettings = (tool: Tool, settings: Record<string, unknown>): Tool =>
  ({ ...tool, settings: { ...tool.settings, ...settings } }) as Tool

const requestsOf = (exchange: unknown) => (exchange as HttpExchange).requests

layer(TestServer.layer({ webhookAllowPrivate: true }), { excludeTestServices: true })("tool calls", (it) => {
  describe("http", () => {
    it.effect(
      "arguments fill the url URL-encoded, the secret reaches the receiver and nowhere else, with the service's headers",
      () =>
        Effect.scoped(
          Effect.gen(function* () {
            const receiver = yield* FakeReceiver.make
            const account = yield* TestServer.signUp()
            yield* createSecret(account, "SHOP_TOKEN", token)
            const tool = yield* httpTool(account, receiver)
            // The receiver echoes the secret back, raw, base64-encoded and URL-encoded.
            const echo = `{"seen":"${token}","basic":"${Buffer.from(token).toString("base64")}","q":"${encodeURIComponent(`${token} x`)}"}`
            receiver.script({ status: 201, body: echo })

            const outcome = yield* invoke(tool, { id: "a/b c?#é", status: "new&x=1" }, context(account))
            assert.isTrue(outcome.ok, outcome.output)
            assert.isUndefined(outcome.errorKind)

            const [received] = receiver.requests
            assert.strictEqual(received?.method, "POST")
            assert.strictEqual(received?.path, "/orders/a%2Fb%20c%3F%23%C3%A9?status=new%26x%3D1")
            assert.strictEqual(received?.headers.authorization, `Bearer ${token}`)
            assert.strictEqual(received?.headers["x-shop"], "main")
            assert.strictEqual(received?.headers["idempotency-key"], "run-1:call-1")
            assert.match(received?.headers.traceparent ?? "", /^00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]$/)
            assert.strictEqual(received?.headers["user-agent"], "agent-host-tools/1.0")
            assert.strictEqual(received?.headers["content-type"], "application/json")
            // No body template: the arguments as a JSON object.
            assert.deepStrictEqual(JSON.parse(received!.body), { id: "a/b c?#é", status: "new&x=1" })

            const output = JSON.parse(outcome.output)
            assert.strictEqual(output.status, 201)
            assert.strictEqual(output.contentType, "application/json")
            assert.deepStrictEqual(JSON.parse(output.body), {
              seen: "[secret SHOP_TOKEN]",
              basic: "[secret SHOP_TOKEN]",
              q: "[secret SHOP_TOKEN]%20x"
            })

            const [hop] = requestsOf(outcome.exchange)
            assert.strictEqual(hop?.request.method, "POST")
            assert.strictEqual(hop?.request.url, `${receiver.url("/orders/a%2Fb%20c%3F%23%C3%A9")}?status=new%26x%3D1`)
            assert.strictEqual(hop?.request.headers.authorization, "Bearer [secret SHOP_TOKEN]")
            assert.strictEqual(hop?.request.headers["idempotency-key"], "run-1:call-1")
            assert.strictEqual(hop?.request.headers.traceparent, received?.headers.traceparent)
            assert.strictEqual(hop?.request.headers.host, `127.0.0.1:${receiver.port}`)
            assert.strictEqual(hop?.request.body, received?.body)
            assert.strictEqual(hop?.response?.status, 201)
            assert.strictEqual(hop?.response?.headers["content-type"], "application/json")

            const everything = JSON.stringify(outcome)
            for (const form of [token, Buffer.from(token).toString("base64"), encodeURIComponent(token)]) {
              assert.notInclude(everything, form)
            }
          })
        )
    )

    it.effect("a body template: arguments as JSON, secrets inside JSON strings; a GET sends no body", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const receiver = yield* FakeReceiver.make
          const account = yield* TestServer.signUp()
          const quoted = 'q"uo\\te'
          yield* createSecret(account, "SHOP_TOKEN", quoted)
          const tool = yield* httpTool(account, receiver, {
            method: "PUT",
            body: '{"order": {{args.id}}, "count": {{args.count}}, "missing": {{args.status}}, "key": "{{secrets.SHOP_TOKEN}}"}'
          })
          const outcome = yield* invoke(tool, { id: "A-1", count: 3 }, context(account))
          assert.isTrue(outcome.ok, outcome.output)
          const [put] = receiver.requests
          assert.strictEqual(put?.method, "PUT")
          assert.deepStrictEqual(JSON.parse(put!.body), { order: "A-1", count: 3, missing: null, key: quoted })
          assert.notInclude(JSON.stringify(outcome), JSON.stringify(quoted).slice(1, -1))
          assert.deepStrictEqual(JSON.parse(requestsOf(outcome.exchange)[0]!.request.body!), {
            order: "A-1",
            count: 3,
            missing: null,
            key: "[secret SHOP_TOKEN]"
          })

          const get = yield* httpTool(account, receiver, { method: "GET", headers: {} })
          const got = yield* invoke(get, { id: "A-2" }, context(account, { runId: "run-2", callId: "c7" }))
          assert.isTrue(got.ok, got.output)
          const second = receiver.requests[1]!
          assert.strictEqual(second.method, "GET")
          assert.strictEqual(second.path, "/orders/A-2?status=")
          assert.strictEqual(second.body, "")
          assert.isUndefined(second.headers["content-type"])
          assert.isUndefined(second.headers["content-length"])
          assert.strictEqual(second.headers["idempotency-key"], "run-2:c7")
          assert.isNull(requestsOf(got.exchange)[0]!.request.body)
        })
      )
    )

    it.effect("invalid arguments: each problem named by its path, and nothing sent", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const receiver = yield* FakeReceiver.make
          const account = yield* TestServer.signUp()
          yield* createSecret(account, "SHOP_TOKEN", token)
          const tool = yield* httpTool(account, receiver)
          const ctx = context(account)

          const wrong = yield* invoke(tool, { id: 42, count: "three", extra: true }, ctx)
          assert.isFalse(wrong.ok)
          assert.strictEqual(wrong.errorKind, "invalid_arguments")
          assert.match(wrong.output, new RegExp(`^Invalid arguments for ${tool.name}:`))
          assert.match(wrong.output, /- arguments\.id: must be string/)
          assert.match(wrong.output, /- arguments\.count: must be integer/)
          assert.match(wrong.output, /- arguments: must NOT have additional properties \("extra"\)/)

          const missing = yield* invoke(tool, {}, ctx)
          assert.strictEqual(missing.errorKind, "invalid_arguments")
          assert.match(missing.output, /- arguments: must have required property 'id'/)

          const broken = yield* invoke(tool, '{"id": "A-1"', ctx)
          assert.strictEqual(broken.errorKind, "invalid_arguments")
          assert.match(
            broken.output,
            /^The arguments are not valid JSON: "\{\\"id\\": \\"A-1\\"". Send them as a JSON object/
          )

          const notObject = yield* invoke(tool, [1, 2], ctx)
          assert.strictEqual(notObject.errorKind, "invalid_arguments")
          assert.strictEqual(notObject.output, "The arguments must be a JSON object, not an array.")

          // A path segment an argument would make `..` (or empty) would reach another path.
          const traversal = yield* invoke(tool, { id: ".." }, ctx)
          assert.strictEqual(traversal.errorKind, "invalid_arguments")
          assert.match(traversal.output, /- arguments\.id: Expected a value that does not make the path segment "\.\."/)
          const empty = yield* invoke(tool, { id: "" }, ctx)
          assert.strictEqual(empty.errorKind, "invalid_arguments")

          assert.strictEqual(receiver.requests.length, 0)
          assert.deepStrictEqual(requestsOf(wrong.exchange), [])

          // JSON text that parses to an object is taken as the object.
          const text = yield* invoke(tool, '{"id": "A-1"}', ctx)
          assert.isTrue(text.ok, text.output)
          assert.strictEqual(receiver.requests.length, 1)
        })
      )
    )

    it.effect("a missing secret is an error naming it, and nothing is sent", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const receiver = yield* FakeReceiver.make
          const account = yield* TestServer.signUp()
          const tool = yield* httpTool(account, receiver)
          const outcome = yield* invoke(tool, { id: "A-1" }, context(account))
          assert.isFalse(outcome.ok)
          assert.strictEqual(outcome.errorKind, "error")
          assert.match(outcome.output, /^No secret SHOP_TOKEN: the tool's headers or body name it\. Nothing was sent\./)
          assert.strictEqual(receiver.requests.length, 0)

          // Another tenant's secret of that name is not this tenant's.
          const other = yield* TestServer.signUp()
          yield* createSecret(other, "SHOP_TOKEN", token)
          const still = yield* invoke(tool, { id: "A-1" }, context(account))
          assert.strictEqual(still.errorKind, "error")
          assert.strictEqual(receiver.requests.length, 0)
        })
      )
    )

    it.effect(
      "a status other than 2xx is a tool error the model reads; a slow answer times out; a long one is cut at 1 MiB",
      () =>
        Effect.scoped(
          Effect.gen(function* () {
            const receiver = yield* FakeReceiver.make
            const account = yield* TestServer.signUp()
            yield* createSecret(account, "SHOP_TOKEN", token)
            const tool = yield* httpTool(account, receiver, {}, { policy: { timeoutMs: 300 } })
            const ctx = context(account)

            receiver.script({ status: 404, body: '{"error":"no such order"}' })
            const missing = yield* invoke(tool, { id: "A-1" }, ctx)
            assert.isFalse(missing.ok)
            assert.strictEqual(missing.errorKind, "status")
            assert.deepStrictEqual(JSON.parse(missing.output), {
              status: 404,
              contentType: "application/json",
              body: '{"error":"no such order"}'
            })

            receiver.script({ delayMs: 5_000 })
            const slow = yield* invoke(tool, { id: "A-2" }, ctx)
            assert.isFalse(slow.ok)
            assert.strictEqual(slow.errorKind, "timeout")
            assert.match(slow.output, /^No answer within 300 ms/)
            assert.isBelow(slow.durationMs, 2_000)
            assert.isAtLeast(slow.durationMs, 290)
            // What went out is still shown, with no answer.
            const [hop] = requestsOf(slow.exchange)
            assert.strictEqual(hop?.request.headers.authorization, "Bearer [secret SHOP_TOKEN]")
            assert.isNull(hop?.response)

            const long = "x".repeat(maxResponseBytes + 512 * 1024)
            receiver.script({ body: long })
            const cut = yield* invoke(withSettings(tool, {}), { id: "A-3" }, { ...ctx, callId: "call-3" })
            assert.isTrue(cut.ok, cut.output.slice(0, 200))
            const output = JSON.parse(cut.output)
            assert.strictEqual(output.body.length, maxResponseBytes)
            assert.isTrue(output.truncated)
            assert.isTrue(requestsOf(cut.exchange)[0]!.response!.truncated)
            assert.strictEqual(requestsOf(cut.exchange)[0]!.response!.body.length, maxResponseBytes)
          })
        )
    )

    it.effect(
      "the guard at call time: loopback, metadata, IPv4-mapped loopback and a name resolving to loopback are refused",
      () =>
        Effect.scoped(
          Effect.gen(function* () {
            const receiver = yield* FakeReceiver.make
            const dns = yield* FakeDns.make({ "orders.test": { a: ["127.0.0.1"] } })
            const account = yield* TestServer.signUp()
            yield* createSecret(account, "SHOP_TOKEN", token)
            const tool = yield* httpTool(account, receiver)
            const ctx = context(account)
            const at = (url: string) =>
              withSettings(tool, { url, allowedHosts: [new URL(url).hostname.replace(/\.$/, "")] })

            const cases = [
              [at(`http://127.0.0.1:${receiver.port}/orders/{{args.id}}`), /127\.0\.0\.1 is a loopback address/],
              [at("http://169.254.169.254/latest/{{args.id}}"), /169\.254\.169\.254 is a cloud metadata address/],
              [at(`http://[::ffff:127.0.0.1]:${receiver.port}/orders/{{args.id}}`), /stands for 127\.0\.0\.1/],
              [at(`http://orders.test:${receiver.port}/orders/{{args.id}}`), /127\.0\.0\.1 is a loopback address/]
            ] as const
            for (const [target, why] of cases) {
              const outcome = yield* invoke(target, { id: "A-1" }, ctx, refusing, [dns.address])
              assert.isFalse(outcome.ok, target.settings.kind)
              assert.strictEqual(outcome.errorKind, "refused", outcome.output)
              assert.match(outcome.output, why)
              assert.deepStrictEqual(requestsOf(outcome.exchange), [])
            }
            // Metadata addresses stay refused where private targets are allowed.
            const metadata = yield* invoke(cases[1][0], { id: "A-1" }, ctx, allowing, [dns.address])
            assert.strictEqual(metadata.errorKind, "refused")
            assert.strictEqual(receiver.requests.length, 0)

            // Allowed, the name reaches the address it was checked at, and the request still names the host.
            const named = yield* invoke(cases[3][0], { id: "A-1" }, ctx, allowing, [dns.address])
            assert.isTrue(named.ok, named.output)
            assert.strictEqual(receiver.requests[0]?.headers.host, `orders.test:${receiver.port}`)

            // A host not among allowedHosts is refused before any lookup.
            const elsewhere = yield* invoke(
              withSettings(tool, { allowedHosts: ["api.example.com"] }),
              { id: "A-1" },
              ctx
            )
            assert.strictEqual(elsewhere.errorKind, "refused")
            assert.match(elsewhere.output, /host 127\.0\.0\.1 is not one of the tool's allowedHosts/)
            assert.strictEqual(receiver.requests.length, 1)
          })
        )
    )

    it.effect("redirects: not followed by default, followed within allowedHosts, refused outside them", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const receiver = yield* FakeReceiver.make
          const account = yield* TestServer.signUp()
          yield* createSecret(account, "SHOP_TOKEN", token)
          const tool = yield* httpTool(account, receiver)
          const ctx = context(account)

          receiver.script({ status: 302, location: "/moved" })
          const kept = yield* invoke(tool, { id: "A-1" }, ctx)
          assert.strictEqual(kept.errorKind, "status")
          assert.deepInclude(JSON.parse(kept.output), { status: 302, location: "/moved" })
          assert.strictEqual(receiver.requests.length, 1)

          const following = withSettings(tool, { followRedirects: true })
          receiver.reset()
          receiver.script({ status: 303, location: "/moved?x=1" })
          const followed = yield* invoke(following, { id: "A-1" }, ctx)
          assert.isTrue(followed.ok, followed.output)
          assert.deepStrictEqual(
            receiver.requests.map((request) => `${request.method} ${request.path}`),
            ["POST /orders/A-1?status=", "GET /moved?x=1"]
          )
          // The tool's headers go on to an allowed host; a 303 drops the body.
          assert.strictEqual(receiver.requests[1]?.headers.authorization, `Bearer ${token}`)
          assert.strictEqual(receiver.requests[1]?.headers["idempotency-key"], "run-1:call-1")
          assert.strictEqual(receiver.requests[1]?.body, "")
          assert.deepStrictEqual(
            requestsOf(followed.exchange).map((hop) => [hop.request.method, hop.response?.status]),
            [
              ["POST", 303],
              ["GET", 200]
            ]
          )

          // 307 keeps the method and the body.
          receiver.reset()
          receiver.script({ status: 307, location: receiver.url("/again") })
          assert.isTrue((yield* invoke(following, { id: "A-2" }, ctx)).ok)
          assert.deepStrictEqual(
            receiver.requests.map((request) => `${request.method} ${request.body}`),
            ['POST {"id":"A-2"}', 'POST {"id":"A-2"}']
          )

          // `localhost` is this receiver too, but not among allowedHosts.
          receiver.reset()
          receiver.script({ status: 302, location: `http://localhost:${receiver.port}/elsewhere` })
          const outside = yield* invoke(following, { id: "A-1" }, ctx)
          assert.strictEqual(outside.errorKind, "refused")
          assert.match(outside.output, /the redirect's host localhost is not one of the tool's allowedHosts/)
          assert.strictEqual(receiver.requests.length, 1)

          // An allowed host the guard refuses, redirected to: refused too.
          receiver.reset()
          receiver.script({ status: 302, location: "http://169.254.169.254/latest/meta-data" })
          const metadata = yield* invoke(
            withSettings(following, { allowedHosts: ["127.0.0.1", "169.254.169.254"] }),
            { id: "A-1" },
            ctx
          )
          assert.strictEqual(metadata.errorKind, "refused")
          assert.match(metadata.output, /cloud metadata address/)
          assert.strictEqual(receiver.requests.length, 1)

          // A Location echoing the secret shows it masked, followed or not.
          receiver.reset()
          receiver.script({ status: 302, location: `/echo?k=${token}` }, { status: 302, location: `/echo?k=${token}` })
          const echoed = yield* invoke(tool, { id: "A-1" }, ctx)
          assert.strictEqual(JSON.parse(echoed.output).location, "/echo?k=[secret SHOP_TOKEN]")
          const echoFollowed = yield* invoke(following, { id: "A-1" }, ctx)
          assert.isTrue(echoFollowed.ok, echoFollowed.output)
          assert.strictEqual(receiver.requests[2]?.path, `/echo?k=${token}`)
          assert.strictEqual(
            requestsOf(echoFollowed.exchange)[1]?.request.url,
            receiver.url("/echo?k=[secret SHOP_TOKEN]")
          )
          for (const outcome of [echoed, echoFollowed]) assert.notInclude(JSON.stringify(outcome), token)

          // A loop of redirects ends.
          receiver.reset()
          receiver.script({ status: 302, location: "/loop", times: 10 })
          const loop = yield* invoke(following, { id: "A-1" }, ctx)
          assert.strictEqual(loop.errorKind, "error")
          assert.match(loop.output, /More than 5 redirects/)
          assert.strictEqual(receiver.requests.length, 6)
        })
      )
    )
  })

  describe("knowledge", () => {
    it.effect("answers numbered sources as grounding does, or says there are none; a query is required", () =>
      Effect.gen(function* () {
        const account = yield* TestServer.signUp()
        const { knowledgeId } = yield* seedKnowledge(account, {
          name: "Notes",
          documents: [
            { filename: "harbour.txt", text: "The lantern lights the harbour every night." },
            { filename: "hills.txt", text: "Sheep graze the hills above the lantern tower." }
          ]
        })
        const tool = yield* createTool(account, {
          name: "search_notes",
          parameters: { type: "object", properties: { query: { type: "string" } } },
          settings: { kind: "knowledge", knowledgeIds: [knowledgeId], topK: 3 }
        })
        const ctx = context(account)

        const found = yield* invoke(tool, { query: "harbour lantern" }, ctx)
        assert.isTrue(found.ok, found.output)
        assert.match(found.output, /^\[1\] \(harbour\.txt\)\nThe lantern lights the harbour every night\./)
        assert.match(found.output, /\n\n\[2\] \(hills\.txt\)\nSheep graze/)
        assert.deepStrictEqual(found.exchange, {
          kind: "knowledge",
          knowledgeIds: [knowledgeId],
          query: "harbour lantern",
          topK: 3,
          found: 2
        })

        const none = yield* invoke(tool, { query: "zebra" }, ctx)
        assert.isTrue(none.ok)
        assert.strictEqual(none.output, 'No results for "zebra".')

        const noQuery = yield* invoke(tool, {}, ctx)
        assert.strictEqual(noQuery.errorKind, "invalid_arguments")
        assert.match(noQuery.output, /- arguments\.query: Expected the text to search for: a non-empty string/)

        // Another tenant's search with the same tool finds nothing of this tenant's.
        const other = yield* TestServer.signUp()
        const foreign = yield* invoke(tool, { query: "harbour lantern" }, context(other))
        assert.strictEqual(foreign.output, 'No results for "harbour lantern".')
      })
    )
  })

  describe("agent", () => {
    it.effect("asks through the run's askAgent with the chain; refuses a loop back and a fourth level", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const account = yield* TestServer.signUp()
        const caller = yield* TestServer.createAgent(account, { name: "Caller", model: "local" })
        const expert = yield* TestServer.createAgent(account, { name: "Expert", model: "local" })
        const tool = yield* createTool(account, {
          name: "ask_expert",
          parameters: { type: "object", properties: { message: { type: "string" } }, required: ["message"] },
          settings: { kind: "agent", agentId: expert.id }
        })
        const asked: Array<{ agentId: string; message: string; chain: ReadonlyArray<string> }> = []
        const askAgent = (agentId: string, message: string, chain: ReadonlyArray<string>) =>
          Effect.sync(() => {
            asked.push({ agentId, message, chain })
            return message === "fail" ? undefined : `Expert says: ${message}`
          }).pipe(
            Effect.flatMap((reply) => (reply === undefined ? Effect.fail("the model is out") : Effect.succeed(reply)))
          )
        const ctx = (chain: ReadonlyArray<string>) => context(account, { agentChain: chain, askAgent })

        const answered = yield* invoke(tool, { message: "What is 2+2?" }, ctx([caller.id]))
        assert.isTrue(answered.ok, answered.output)
        assert.strictEqual(answered.output, "Expert says: What is 2+2?")
        assert.deepStrictEqual(asked, [{ agentId: expert.id, message: "What is 2+2?", chain: [caller.id, expert.id] }])
        assert.deepStrictEqual(answered.exchange, {
          kind: "agent",
          agentId: expert.id,
          message: "What is 2+2?",
          chain: [caller.id, expert.id]
        })

        const self = yield* invoke(tool, { message: "Hi" }, ctx([expert.id]))
        assert.strictEqual(self.errorKind, "refused")
        assert.match(self.output, /cannot reach itself through others/)
        const loop = yield* invoke(tool, { message: "Hi" }, ctx([expert.id, caller.id]))
        assert.strictEqual(loop.errorKind, "refused")
        const deep = yield* invoke(tool, { message: "Hi" }, ctx(["a1", "a2", caller.id]))
        assert.strictEqual(deep.errorKind, "refused")
        assert.match(deep.output, /at most 3 levels deep/)
        const twoLevels = yield* invoke(tool, { message: "Hi" }, ctx(["a1", caller.id]))
        assert.isTrue(twoLevels.ok, twoLevels.output)

        const failing = yield* invoke(tool, { message: "fail" }, ctx([caller.id]))
        assert.strictEqual(failing.errorKind, "error")
        assert.match(failing.output, /did not answer: the model is out/)

        const noMessage = yield* invoke(tool, { message: "" }, ctx([caller.id]))
        assert.strictEqual(noMessage.errorKind, "invalid_arguments")

        const outside = yield* invoke(tool, { message: "Hi" }, context(account))
        assert.strictEqual(outside.errorKind, "error")
        assert.match(outside.output, /runs only inside a run/)

        const updated = yield* client.request("PUT", `/api/agents/${expert.id}`, {
          headers: TestServer.bearer(account.token),
          body: { status: "inactive" }
        })
        assert.strictEqual(updated.status, 200, updated.text)
        const inactive = yield* invoke(tool, { message: "Hi" }, ctx([caller.id]))
        assert.strictEqual(inactive.errorKind, "error")
        assert.match(inactive.output, /is inactive/)
        assert.strictEqual(asked.length, 3)
      })
    )
  })
})
