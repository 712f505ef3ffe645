import { assert, describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import { ToolId } from "../../src/Domain/Ids.ts"
import { NotFound } from "../../src/Domain/Problems.ts"
import * as FakeReceiver from "../support/FakeReceiver.ts"
import * as TestServer from "../support/TestServer.ts"
import { type Account, TestClient } from "../support/TestServer.ts"

// `POST /api/tools/{id}/test` on a real server, with WEBHOOK_ALLOW_PRIVATE on
// so that a tool may call the loopback receiver.

const token = "sk_test_51Hx9QWERTYUIOPasdfgh"

const session = (account: Account) => ({ headers: TestServer.bearer(account.token) })

const setUp = (receiver: FakeReceiver.FakeReceiver) =>
  Effect.gen(function* () {
    const client = yield* TestClient
    const account = yield* TestServer.signUp()
    const secret = yield* client.request("POST", "/api/secrets", {
      ...session(account),
      body: { name: "SHOP_TOKEN", value: token }
    })
    assert.strictEqual(secret.status, 201, secret.text)
    const created = yield* client.request("POST", "/api/tools", {
      ...session(account),
      body: {
        name: "create_order",
        description: "Creates an order.",
        parameters: {
          type: "object",
          properties: { sku: { type: "string" }, quantity: { type: "integer", minimum: 1 } },
          required: ["sku"]
        },
        settings: {
          kind: "http",
          method: "POST",
          url: `http://127.0.0.1:${receiver.port}/orders`,
          headers: { Authorization: "Bearer {{secrets.SHOP_TOKEN}}" },
          allowedHosts: ["127.0.0.1"]
        }
      }
    })
    assert.strictEqual(created.status, 201, created.text)
    return { account, toolId: created.body.id as string }
  })

layer(TestServer.layer({ webhookAllowPrivate: true }), { excludeTestServices: true })(
  "POST /api/tools/{id}/test",
  (it) => {
    describe("a test call", () => {
      it.effect("shows what was sent and received, every secret value masked, and what the model would read", () =>
        Effect.scoped(
          Effect.gen(function* () {
            const client = yield* TestClient
            const receiver = yield* FakeReceiver.make
            const { account, toolId } = yield* setUp(receiver)
            receiver.script({ status: 201, body: `{"id":"o-1","echo":"${token}"}` })

            const response = yield* client.request("POST", `/api/tools/${toolId}/test`, {
              ...session(account),
              body: { arguments: { sku: "lamp", quantity: 2 } }
            })
            assert.strictEqual(response.status, 200, response.text)
            assert.notInclude(response.text, token)

            const [received] = receiver.requests
            assert.strictEqual(received?.headers.authorization, `Bearer ${token}`)
            assert.match(received?.headers["idempotency-key"] ?? "", /^test-[0-9a-f-]{36}:test$/)
            assert.deepStrictEqual(JSON.parse(received!.body), { sku: "lamp", quantity: 2 })

            const body = response.body
            assert.strictEqual(body.ok, true)
            assert.notProperty(body, "errorKind")
            assert.isNumber(body.durationMs)
            assert.deepStrictEqual(JSON.parse(body.output as string), {
              status: 201,
              contentType: "application/json",
              body: '{"id":"o-1","echo":"[secret SHOP_TOKEN]"}'
            })
            const [hop] = body.exchange.requests
            assert.strictEqual(body.exchange.kind, "http")
            assert.deepInclude(hop.request, {
              method: "POST",
              url: receiver.url("/orders"),
              body: '{"sku":"lamp","quantity":2}'
            })
            assert.deepInclude(hop.request.headers, {
              authorization: "Bearer [secret SHOP_TOKEN]",
              "content-type": "application/json",
              "idempotency-key": received?.headers["idempotency-key"],
              "user-agent": "agent-host-tools/1.0",
              host: `127.0.0.1:${receiver.port}`
            })
            assert.strictEqual(hop.request.headers.traceparent, received?.headers.traceparent)
            assert.deepInclude(hop.response, {
              status: 201,
              body: '{"id":"o-1","echo":"[secret SHOP_TOKEN]"}',
              truncated: false
            })

            // Each test call has an Idempotency-Key of its own.
            const again = yield* client.request("POST", `/api/tools/${toolId}/test`, {
              ...session(account),
              body: { arguments: { sku: "lamp" } }
            })
            assert.strictEqual(again.status, 200, again.text)
            assert.notStrictEqual(
              receiver.requests[1]?.headers["idempotency-key"],
              received?.headers["idempotency-key"]
            )

            // Through the typed client as well.
            const api = yield* TestServer.apiClient(account.token)
            const typed = yield* api.tools.test({
              params: { id: ToolId.make(toolId) },
              payload: { arguments: { sku: "x" } }
            })
            assert.isTrue(typed.ok)
            assert.strictEqual(typed.exchange.kind, "http")
          })
        )
      )

      it.effect(
        "a failing call is a 200 with ok false: invalid arguments (nothing sent), a status other than 2xx",
        () =>
          Effect.scoped(
            Effect.gen(function* () {
              const client = yield* TestClient
              const receiver = yield* FakeReceiver.make
              const { account, toolId } = yield* setUp(receiver)

              const invalid = yield* client.request("POST", `/api/tools/${toolId}/test`, {
                ...session(account),
                body: { arguments: { quantity: 0 } }
              })
              assert.strictEqual(invalid.status, 200, invalid.text)
              assert.deepInclude(invalid.body, {
                ok: false,
                errorKind: "invalid_arguments",
                exchange: { kind: "http", requests: [] }
              })
              assert.match(invalid.body.output, /- arguments: must have required property 'sku'/)
              assert.match(invalid.body.output, /- arguments\.quantity: must be >= 1/)
              // No body at all is no arguments.
              const none = yield* client.request("POST", `/api/tools/${toolId}/test`, { ...session(account), body: {} })
              assert.strictEqual(none.status, 200, none.text)
              assert.strictEqual(none.body.errorKind, "invalid_arguments")
              assert.strictEqual(receiver.requests.length, 0)

              receiver.script({ status: 503, body: "down" })
              const down = yield* client.request("POST", `/api/tools/${toolId}/test`, {
                ...session(account),
                body: { arguments: { sku: "lamp" } }
              })
              assert.strictEqual(down.status, 200, down.text)
              assert.deepInclude(down.body, { ok: false, errorKind: "status" })
              assert.strictEqual(JSON.parse(down.body.output).status, 503)
            })
          )
      )

      it.effect("a body that is not { arguments: {...} } is a 400 problem", () =>
        Effect.scoped(
          Effect.gen(function* () {
            const client = yield* TestClient
            const receiver = yield* FakeReceiver.make
            const { account, toolId } = yield* setUp(receiver)
            for (const body of [{ arguments: "sku=lamp" }, { arguments: [1] }, { arguments: null }, [], "text"]) {
              const response = yield* client.request("POST", `/api/tools/${toolId}/test`, { ...session(account), body })
              assert.strictEqual(response.status, 400, `${JSON.stringify(body)}: ${response.text}`)
              assert.strictEqual(response.headers.get("content-type"), "application/problem+json")
            }
            const raw = yield* client.request("POST", `/api/tools/${toolId}/test`, {
              headers: { ...TestServer.bearer(account.token), "content-type": "application/json" },
              rawBody: '{"arguments": {'
            })
            assert.strictEqual(raw.status, 400, raw.text)
            assert.strictEqual(receiver.requests.length, 0)
          })
        )
      )
    })

    describe("tenant isolation", () => {
      it.effect("another tenant's tool is a 404, and is not called; no session is a 401", () =>
        Effect.scoped(
          Effect.gen(function* () {
            const client = yield* TestClient
            const receiver = yield* FakeReceiver.make
            const { toolId } = yield* setUp(receiver)
            const other = yield* TestServer.signUp()

            const foreign = yield* client.request("POST", `/api/tools/${toolId}/test`, {
              ...session(other),
              body: { arguments: { sku: "lamp" } }
            })
            assert.strictEqual(foreign.status, 404, foreign.text)
            assert.strictEqual(foreign.headers.get("content-type"), "application/problem+json")
            assert.notInclude(foreign.text, token)
            const api = yield* TestServer.apiClient(other.token)
            const flipped = yield* Effect.flip(
              api.tools.test({ params: { id: ToolId.make(toolId) }, payload: { arguments: { sku: "lamp" } } })
            )
            assert.instanceOf(flipped, NotFound)

            const unknown = yield* client.request("POST", "/api/tools/01900000-0000-7000-8000-000000000000/test", {
              ...session(other),
              body: { arguments: {} }
            })
            assert.strictEqual(unknown.status, 404, unknown.text)

            const anonymous = yield* client.request("POST", `/api/tools/${toolId}/test`, {
              body: { arguments: { sku: "lamp" } }
            })
            assert.strictEqual(anonymous.status, 401, anonymous.text)
            assert.strictEqual(receiver.requests.length, 0)
          })
        )
      )
    })
  }
)
