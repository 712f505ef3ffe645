import { assert, describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import { defaultPlanQuotas } from "../../src/Config.ts"
import { AgentId, ToolId } from "../../src/Domain/Ids.ts"
import { Conflict, NotFound } from "../../src/Domain/Problems.ts"
import type { Tool } from "../../src/Tools/Tool.ts"
import * as TestServer from "../support/TestServer.ts"
import { type Account, TestClient, type TestResponse } from "../support/TestServer.ts"

// Tool definitions (docs/tools.md) through the API, on a real server with
// WEBHOOK_ALLOW_PRIVATE off. Public targets are literal addresses, so that
// nothing depends on a name server; names that mean this host are answered
// without one.

const publicHost = "93.184.215.14"

const parameters = {
  type: "object",
  properties: { id: { type: "string", description: "The order's id" }, status: { type: "string" } },
  required: ["id"],
  additionalProperties: false
}

const httpSettings = {
  kind: "http" as const,
  method: "GET" as const,
  url: `https://${publicHost}/orders/{{args.id}}?status={{ args.status }}`,
  headers: { Authorization: "Bearer {{secrets.SHOP_TOKEN}}", Accept: "application/json" },
  allowedHosts: [publicHost]
}

const httpTool = (name = "lookup_order", settings: Record<string, unknown> = {}) => ({
  name,
  description: "Looks an order up by its id.",
  parameters,
  settings: { ...httpSettings, ...settings }
})

const session = (account: Account) => ({ headers: TestServer.bearer(account.token) })

const post = (account: Account, body: unknown) =>
  Effect.flatMap(TestClient, (client) => client.request("POST", "/api/tools", { ...session(account), body }))

/** A 400 problem whose errors name exactly `paths`, each message matching `why` when given. */
const assertRefused = (
  response: TestResponse,
  paths: ReadonlyArray<ReadonlyArray<string | number>>,
  what: string,
  why?: RegExp
) => {
  assert.strictEqual(response.status, 400, `${what}: ${response.text}`)
  assert.strictEqual(response.headers.get("content-type"), "application/problem+json", what)
  const errors = response.body.errors as Array<{ path: Array<string | number>; message: string }>
  assert.deepStrictEqual(
    errors.map((error) => error.path),
    paths.map((path) => [...path]),
    what
  )
  if (why !== undefined) assert.match(errors[0]!.message, why, what)
}

const toolIds = (page: { readonly data: ReadonlyArray<{ readonly id: string }> }) => page.data.map((tool) => tool.id)

layer(TestServer.layer(), { excludeTestServices: true })("tools", (it) => {
  describe("management", () => {
    it.effect("an http tool: created with its defaults, read, listed a page at a time, updated, deleted", () =>
      Effect.gen(function* () {
        const account = yield* TestServer.signUp()
        const api = yield* TestServer.apiClient(account.token)
        const created = yield* api.tools.create({ payload: httpTool() })
        assert.deepInclude(created, {
          name: "lookup_order",
          description: "Looks an order up by its id.",
          kind: "http",
          status: "active",
          policy: { timeoutMs: 10_000, maxOutputBytes: 16_384, maxCallsPerRun: 10 }
        })
        assert.deepStrictEqual(created.parameters, parameters)
        assert.deepStrictEqual(created.settings, { ...httpSettings, followRedirects: false })
        const params = { id: created.id }
        assert.deepStrictEqual(yield* api.tools.get({ params }), created)

        // The policy's bounds sent change; the others stay.
        const updated = yield* api.tools.update({
          params,
          payload: { policy: { timeoutMs: 2_500 }, status: "inactive", description: "Finds an order." }
        })
        assert.deepStrictEqual(updated.policy, { timeoutMs: 2_500, maxOutputBytes: 16_384, maxCallsPerRun: 10 })
        assert.strictEqual(updated.status, "inactive")
        assert.strictEqual(updated.description, "Finds an order.")
        assert.deepStrictEqual(updated.settings, created.settings)
        assert.isTrue(updated.updatedAt >= created.updatedAt)

        // The settings are replaced whole, and may change kind.
        const posted = yield* api.tools.update({
          params,
          payload: {
            settings: {
              kind: "http",
              method: "POST",
              url: `http://${publicHost.toUpperCase()}:8080/orders`,
              body: '{"order": {{args.id}}, "token": "{{secrets.SHOP_TOKEN}}"}',
              allowedHosts: [publicHost, "API.Example.com."],
              followRedirects: true
            }
          }
        })
        assert.deepStrictEqual(posted.settings, {
          kind: "http",
          method: "POST",
          url: `http://${publicHost.toUpperCase()}:8080/orders`,
          headers: {},
          body: '{"order": {{args.id}}, "token": "{{secrets.SHOP_TOKEN}}"}',
          allowedHosts: [publicHost, "api.example.com"],
          followRedirects: true
        })

        // Pages in creation order.
        const second = yield* api.tools.create({ payload: httpTool("second") })
        const third = yield* api.tools.create({ payload: httpTool("third") })
        const first = yield* api.tools.list({ query: { limit: 2 } })
        assert.deepStrictEqual(toolIds(first), [created.id, second.id])
        assert.strictEqual(first.total, 3)
        assert.isString(first.nextCursor)
        const next = yield* api.tools.list({ query: { limit: 2, cursor: first.nextCursor! } })
        assert.deepStrictEqual(next, { data: [third], total: 3, nextCursor: null })

        yield* api.tools.remove({ params })
        assert.instanceOf(yield* Effect.flip(api.tools.get({ params })), NotFound)
        assert.deepStrictEqual(toolIds(yield* api.tools.list({ query: {} })), [second.id, third.id])
      })
    )

    it.effect("a knowledge tool and an agent tool: created, read, updated, listed and deleted", () =>
      Effect.gen(function* () {
        const account = yield* TestServer.signUp()
        const api = yield* TestServer.apiClient(account.token)
        const docs = yield* api.knowledge.create({ payload: { name: "Docs" } })
        const faq = yield* api.knowledge.create({ payload: { name: "FAQ" } })
        const query = { type: "object", properties: { query: { type: "string" } }, required: ["query"] }
        const search = yield* api.tools.create({
          payload: {
            name: "search_docs",
            description: "Searches the product documentation.",
            parameters: query,
            settings: { kind: "knowledge", knowledgeIds: [docs.id, docs.id] },
            policy: { maxCallsPerRun: 3, maxOutputBytes: 4_096 }
          }
        })
        assert.strictEqual(search.kind, "knowledge")
        // Once each; topK from KNOWLEDGE_TOP_K.
        assert.deepStrictEqual(search.settings, { kind: "knowledge", knowledgeIds: [docs.id], topK: 5 })
        assert.deepStrictEqual(search.policy, { timeoutMs: 10_000, maxOutputBytes: 4_096, maxCallsPerRun: 3 })
        const widened = yield* api.tools.update({
          params: { id: search.id },
          payload: { settings: { kind: "knowledge", knowledgeIds: [docs.id, faq.id], topK: 8 } }
        })
        assert.deepStrictEqual(widened.settings, { kind: "knowledge", knowledgeIds: [docs.id, faq.id], topK: 8 })

        const expert = yield* TestServer.createAgent(account, { name: "Expert", model: "local" })
        const ask = yield* api.tools.create({
          payload: {
            name: "ask-expert",
            description: "Asks the expert agent.",
            parameters: { type: "object", properties: { message: { type: "string" } } },
            settings: { kind: "agent", agentId: AgentId.make(expert.id) }
          }
        })
        assert.strictEqual(ask.kind, "agent")
        assert.deepStrictEqual(ask.settings, { kind: "agent", agentId: expert.id })
        assert.deepStrictEqual(yield* api.tools.get({ params: { id: ask.id } }), ask)
        assert.deepStrictEqual(yield* api.tools.list({ query: {} }), {
          data: [widened, ask],
          total: 2,
          nextCursor: null
        })
        // An agent tool may become a knowledge tool.
        const changed = yield* api.tools.update({
          params: { id: ask.id },
          payload: { settings: { kind: "knowledge", knowledgeIds: [faq.id] } }
        })
        assert.strictEqual(changed.kind, "knowledge")
        yield* api.tools.remove({ params: { id: ask.id } })
        yield* api.tools.remove({ params: { id: search.id } })
        assert.strictEqual((yield* api.tools.list({ query: {} })).total, 0)
      })
    )
  })

  describe("what is checked when a tool is saved", () => {
    it.effect("the name: its form, and unique within the tenant (409 naming it), on create and on update", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const account = yield* TestServer.signUp()
        for (const name of ["", "has space", "dot.ted", "x".repeat(65), "é", 42]) {
          assertRefused(yield* post(account, httpTool(name as string)), [["payload", "name"]], JSON.stringify(name))
        }
        const first = yield* post(account, httpTool("Lookup-Order_2"))
        assert.strictEqual(first.status, 201, first.text)
        const again = yield* post(account, httpTool("Lookup-Order_2"))
        assert.strictEqual(again.status, 409, again.text)
        assert.strictEqual(again.headers.get("content-type"), "application/problem+json")
        assert.strictEqual(again.body.type, "urn:agent-host:problem:conflict")
        assert.include(again.body.detail, '"Lookup-Order_2"')
        // Names are unique per tenant only.
        const other = yield* TestServer.signUp()
        assert.strictEqual((yield* post(other, httpTool("Lookup-Order_2"))).status, 201)

        const second = yield* post(account, httpTool("other"))
        const api = yield* TestServer.apiClient(account.token)
        const renamed = yield* Effect.flip(
          api.tools.update({ params: { id: ToolId.make(second.body.id) }, payload: { name: "Lookup-Order_2" } })
        )
        assert.instanceOf(renamed, Conflict)
        const bad = yield* client.request("PUT", `/api/tools/${second.body.id}`, {
          ...session(account),
          body: { name: "no spaces please" }
        })
        assertRefused(bad, [["payload", "name"]], "rename")
        assert.strictEqual((yield* api.tools.list({ query: {} })).total, 2)
      })
    )

    it.effect("the description, the kind and the policy's bounds", () =>
      Effect.gen(function* () {
        const account = yield* TestServer.signUp()
        const cases: ReadonlyArray<readonly [Record<string, unknown>, ReadonlyArray<string | number>]> = [
          [{ description: "" }, ["payload", "description"]],
          [{ description: "x".repeat(4_001) }, ["payload", "description"]],
          [{ policy: { timeoutMs: 99 } }, ["payload", "policy", "timeoutMs"]],
          [{ policy: { timeoutMs: 120_001 } }, ["payload", "policy", "timeoutMs"]],
          [{ policy: { maxOutputBytes: 1_048_577 } }, ["payload", "policy", "maxOutputBytes"]],
          [{ policy: { maxCallsPerRun: 0 } }, ["payload", "policy", "maxCallsPerRun"]],
          [{ status: "archived" }, ["payload", "status"]]
        ]
        for (const [change, path] of cases) {
          assertRefused(yield* post(account, { ...httpTool(), ...change }), [path], JSON.stringify(change))
        }
        const { description: _, ...undescribed } = httpTool()
        assertRefused(yield* post(account, undescribed), [["payload", "description"]], "no description")
        const unknownKind = yield* post(account, { ...httpTool(), settings: { kind: "shell", command: "ls" } })
        assert.strictEqual(unknownKind.status, 400, unknownKind.text)
        assert.deepStrictEqual(unknownKind.body.errors[0].path.slice(0, 2), ["payload", "settings"])
        const api = yield* TestServer.apiClient(account.token)
        assert.strictEqual((yield* api.tools.list({ query: {} })).total, 0)
      })
    )

    it.effect("parameters: a JSON Schema of an object, bounded, each problem named by its path", () =>
      Effect.gen(function* () {
        const account = yield* TestServer.signUp()
        let deep: Record<string, unknown> = { type: "string" }
        for (let i = 0; i < 20; i++) deep = { type: "object", properties: { a: deep } }
        const cases: ReadonlyArray<readonly [unknown, ReadonlyArray<string | number>, RegExp]> = [
          ["object", ["payload", "parameters"], /object/],
          [[{ type: "object" }], ["payload", "parameters"], /object/],
          [{ type: "objekt" }, ["payload", "parameters", "type"], /allowed values/],
          [
            { type: "object", properties: { id: { type: 3 } } },
            ["payload", "parameters", "properties", "id", "type"],
            /./
          ],
          [{ type: "object", required: "id" }, ["payload", "parameters", "required"], /array/],
          [{ type: "array", items: { type: "string" } }, ["payload", "parameters", "type"], /"type": "object"/],
          [{ properties: {} }, ["payload", "parameters", "type"], /"type": "object"/],
          [
            { type: "object", properties: { id: { type: "string", requried: true } } },
            ["payload", "parameters", "properties", "id", "requried"],
            /Unknown keyword "requried"/
          ],
          [
            { type: "object", properties: { id: { $ref: "https://schemas.example/id.json" } } },
            ["payload", "parameters", "properties", "id", "$ref"],
            /nothing is fetched/
          ],
          [
            { type: "object", properties: { id: { type: "string", pattern: "^(a)\\1$" } } },
            ["payload", "parameters", "properties", "id", "pattern"],
            /linear time/
          ],
          [
            { $schema: "https://json-schema.org/draft/2020-12/schema", type: "object" },
            ["payload", "parameters", "$schema"],
            /draft-07/
          ],
          [
            { type: "object", properties: { "\u0000": { type: "string" } } },
            ["payload", "parameters", "properties", "\u0000"],
            /NUL/
          ],
          [deep, ["payload", "parameters", ...Array.from({ length: 16 }, () => ["properties", "a"]).flat()], /nesting/],
          [{ type: "object", description: "x".repeat(33_000) }, ["payload", "parameters"], /characters of JSON/]
        ]
        for (const [schema, path, why] of cases) {
          assertRefused(
            yield* post(account, { ...httpTool(), parameters: schema }),
            [path],
            JSON.stringify(schema).slice(0, 80),
            why
          )
        }
        // Draft-07 by name, `$defs` and references within the schema are fine.
        const fine = yield* post(account, {
          ...httpTool(),
          parameters: {
            $schema: "http://json-schema.org/draft-07/schema#",
            type: "object",
            $defs: { id: { type: "string", pattern: "^[A-Z]{2}-\\d+$", format: "uuid" } },
            properties: { id: { $ref: "#/$defs/id" }, status: { enum: ["open", "closed"] } },
            required: ["id"]
          }
        })
        assert.strictEqual(fine.status, 201, fine.text)
      })
    )

    it.effect("an http tool's url, headers and body: placeholders, form and hosts", () =>
      Effect.gen(function* () {
        const account = yield* TestServer.signUp()
        const url = ["payload", "settings", "url"]
        const cases: ReadonlyArray<readonly [Record<string, unknown>, ReadonlyArray<string | number>, RegExp]> = [
          [{ url: `https://${publicHost}/{{input}}` }, url, /only `\{\{args.NAME\}\}` may appear in the url/],
          [{ url: `https://${publicHost}/?t={{secrets.TOKEN}}` }, url, /may not be used here/],
          [{ url: `https://${publicHost}/{{args.a.b}}` }, url, /argument's name/],
          [{ url: `https://${publicHost}/{{args.missing}}` }, url, /\{\{args.missing\}\} names no property/],
          [{ url: "https://{{args.id}}.example.com/x" }, url, /host is fixed/],
          [{ url: `https://${publicHost}{{args.id}}/x` }, url, /host is fixed/],
          [{ url: "https://api.example.com/orders" }, url, /not one of `allowedHosts`/],
          [{ url: `ftp://${publicHost}/x` }, url, /http or https/],
          [{ url: `https://user:pw@${publicHost}/x` }, url, /user name or password/],
          [{ url: "orders/{{args.id}}" }, url, /absolute/],
          [{ url: `https://${publicHost}:22/x` }, url, /Refused port: 22/],
          [{ url: "" }, url, /URL/],
          [{ allowedHosts: [] }, ["payload", "settings", "allowedHosts"], /at least one host/],
          [{ allowedHosts: ["https://api.example.com"] }, ["payload", "settings", "allowedHosts", 0], /host name/],
          [{ allowedHosts: ["api.example.com:443"] }, ["payload", "settings", "allowedHosts", 0], /host name/],
          [{ headers: { Host: "api.example.com" } }, ["payload", "settings", "headers", "Host"], /set by the service/],
          [{ headers: { "Idempotency-Key": "x" } }, ["payload", "settings", "headers", "Idempotency-Key"], /set by/],
          [{ headers: { "Bad Name": "x" } }, ["payload", "settings", "headers", "Bad Name"], /header name/],
          [{ headers: { "X-A": "a", "x-a": "b" } }, ["payload", "settings", "headers", "x-a"], /twice/],
          [{ headers: { "X-Id": "{{args.id}}" } }, ["payload", "settings", "headers", "X-Id"], /secrets.NAME/],
          [{ headers: { "X-A": "line\r\nInjected: yes" } }, ["payload", "settings", "headers", "X-A"], /control/],
          [{ headers: { "X-A": "{{secrets.9lives}}" } }, ["payload", "settings", "headers", "X-A"], /secret's name/],
          [{ body: "{}" }, ["payload", "settings", "body"], /GET sends no body/],
          [{ method: "POST", body: '{"q": {{args.nope}}}' }, ["payload", "settings", "body"], /args.nope/],
          [{ method: "POST", body: "{{steps.a.output}}" }, ["payload", "settings", "body"], /placeholders are/],
          [{ method: "TRACE" }, ["payload", "settings", "method"], /./]
        ]
        for (const [change, path, why] of cases) {
          assertRefused(yield* post(account, httpTool("t", change)), [path], JSON.stringify(change), why)
        }
        // Every problem of form at once.
        assertRefused(
          yield* post(account, httpTool("t", { body: "{}", headers: { Host: "x" } })),
          [
            ["payload", "settings", "headers", "Host"],
            ["payload", "settings", "body"]
          ],
          "two at once"
        )
        const api = yield* TestServer.apiClient(account.token)
        assert.strictEqual((yield* api.tools.list({ query: {} })).total, 0)
      })
    )

    it.effect("the url's host is refused as webhook URLs are: private, loopback, link-local, metadata (400)", () =>
      Effect.gen(function* () {
        const account = yield* TestServer.signUp()
        const refusedUrls: ReadonlyArray<readonly [string, string, RegExp]> = [
          ["http://127.0.0.1:8080/x", "127.0.0.1", /loopback/],
          ["http://10.0.0.1/x", "10.0.0.1", /private/],
          ["http://169.254.169.254/latest/meta-data/", "169.254.169.254", /metadata/],
          ["http://[::ffff:127.0.0.1]:8080/x", "[::ffff:127.0.0.1]", /127\.0\.0\.1.*loopback/],
          ["http://[::1]/x", "[::1]", /loopback/],
          // Names that resolve to this host.
          ["http://localhost:8080/x", "localhost", /loopback/],
          ["https://api.localhost/x", "api.localhost", /loopback/],
          ["http://metadata.google.internal/x", "metadata.google.internal", /metadata/]
        ]
        for (const [url, host, why] of refusedUrls) {
          assertRefused(
            yield* post(account, httpTool("t", { url, allowedHosts: [host] })),
            [["payload", "settings", "url"]],
            url,
            why
          )
        }
        // On update too, and nothing changes.
        const api = yield* TestServer.apiClient(account.token)
        const tool = yield* api.tools.create({ payload: httpTool() })
        const client = yield* TestClient
        const moved = yield* client.request("PUT", `/api/tools/${tool.id}`, {
          ...session(account),
          body: {
            settings: { ...httpSettings, url: "http://192.168.0.10/orders/{{args.id}}", allowedHosts: ["192.168.0.10"] }
          }
        })
        assertRefused(moved, [["payload", "settings", "url"]], "update", /private/)
        assert.deepStrictEqual(yield* api.tools.get({ params: { id: tool.id } }), tool)
      })
    )

    it.effect("settings and parameters are checked together on update, whichever is sent", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const account = yield* TestServer.signUp()
        const api = yield* TestServer.apiClient(account.token)
        const tool = yield* api.tools.create({ payload: httpTool() })
        const put = (body: unknown) => client.request("PUT", `/api/tools/${tool.id}`, { ...session(account), body })
        // The url names `status`, which these parameters no longer have.
        assertRefused(
          yield* put({ parameters: { type: "object", properties: { id: { type: "string" } } } }),
          [["payload", "settings", "url"]],
          "parameters without an argument the url names",
          /args.status/
        )
        assertRefused(
          yield* put({ parameters: { type: "object", properties: { id: { type: 1 } } } }),
          [["payload", "parameters", "properties", "id", "type"]],
          "bad parameters alone"
        )
        const renamedArgument = yield* put({
          parameters: { type: "object", properties: { orderId: { type: "string" } } },
          settings: { ...httpSettings, url: `https://${publicHost}/orders/{{args.orderId}}` }
        })
        assert.strictEqual(renamedArgument.status, 200, renamedArgument.text)
        assert.strictEqual(renamedArgument.body.settings.url, `https://${publicHost}/orders/{{args.orderId}}`)
      })
    )

    it.effect("a knowledge base or an agent of another tenant, or none, is a 400 naming it", () =>
      Effect.gen(function* () {
        const owner = yield* TestServer.signUp()
        const stranger = yield* TestServer.signUp()
        const ownerApi = yield* TestServer.apiClient(owner.token)
        const strangerApi = yield* TestServer.apiClient(stranger.token)
        const mine = yield* strangerApi.knowledge.create({ payload: { name: "Mine" } })
        const theirs = yield* ownerApi.knowledge.create({ payload: { name: "Theirs" } })
        const theirAgent = yield* TestServer.createAgent(owner)
        const knowledge = (knowledgeIds: ReadonlyArray<string>) => ({
          name: "search",
          description: "Searches.",
          parameters: { type: "object" },
          settings: { kind: "knowledge", knowledgeIds }
        })
        assertRefused(
          yield* post(stranger, knowledge([mine.id, theirs.id, "0190c1a8-0000-7000-8000-000000000000"])),
          [
            ["payload", "settings", "knowledgeIds", 1],
            ["payload", "settings", "knowledgeIds", 2]
          ],
          "knowledge bases",
          new RegExp(theirs.id)
        )
        assertRefused(
          yield* post(stranger, knowledge(Array.from({ length: 9 }, () => mine.id))),
          [["payload", "settings", "knowledgeIds"]],
          "nine bases",
          /at most 8/
        )
        assertRefused(yield* post(stranger, knowledge([])), [["payload", "settings", "knowledgeIds"]], "none")
        assertRefused(
          yield* post(stranger, { ...knowledge([mine.id]), settings: { kind: "agent", agentId: theirAgent.id } }),
          [["payload", "settings", "agentId"]],
          "another tenant's agent",
          new RegExp(theirAgent.id)
        )
        assert.strictEqual((yield* strangerApi.tools.list({ query: {} })).total, 0)
        assert.strictEqual((yield* post(stranger, knowledge([mine.id]))).status, 201)
      })
    )
  })

  describe("tenants", () => {
    it.effect("another tenant's tool is a 404 on every route, and absent from lists", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const owner = yield* TestServer.signUp()
        const stranger = yield* TestServer.signUp()
        const ownerApi = yield* TestServer.apiClient(owner.token)
        const strangerApi = yield* TestServer.apiClient(stranger.token)
        const tool = yield* ownerApi.tools.create({ payload: httpTool() })
        const params = { id: tool.id }
        const missing = yield* client.request(
          "GET",
          "/api/tools/0190c1a8-0000-7000-8000-000000000000",
          session(stranger)
        )
        const read = yield* client.request("GET", `/api/tools/${tool.id}`, session(stranger))
        assert.strictEqual(read.status, 404)
        assert.strictEqual(read.headers.get("content-type"), "application/problem+json")
        assert.deepStrictEqual({ ...read.body, detail: undefined }, { ...missing.body, detail: undefined })
        assert.instanceOf(yield* Effect.flip(strangerApi.tools.get({ params })), NotFound)
        assert.instanceOf(yield* Effect.flip(strangerApi.tools.update({ params, payload: { name: "mine" } })), NotFound)
        assert.instanceOf(yield* Effect.flip(strangerApi.tools.remove({ params })), NotFound)
        assert.strictEqual((yield* strangerApi.tools.list({ query: {} })).total, 0)
        assert.instanceOf(
          yield* Effect.flip(strangerApi.tools.get({ params: { id: ToolId.make("not-a-uuid") } })),
          NotFound
        )
        // Untouched.
        assert.deepStrictEqual(yield* ownerApi.tools.get({ params }), tool)
      })
    )
  })

  describe("agents' tools", () => {
    it.effect("toolIds: the tenant's active tools, at most 32, each refusal naming its index", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const owner = yield* TestServer.signUp()
        const stranger = yield* TestServer.signUp()
        const api = yield* TestServer.apiClient(owner.token)
        const tool = yield* api.tools.create({ payload: httpTool() })
        const idle = yield* api.tools.create({ payload: { ...httpTool("idle"), status: "inactive" } })
        const theirs = yield* (yield* TestServer.apiClient(stranger.token)).tools.create({ payload: httpTool() })

        const agent = yield* api.agents.create({
          payload: { name: "Clerk", model: "local", toolIds: [tool.id, tool.id] }
        })
        assert.deepStrictEqual(agent.toolIds, [tool.id])
        assert.deepStrictEqual((yield* api.agents.create({ payload: { name: "Plain", model: "local" } })).toolIds, [])
        // The key-authenticated list keeps the reference's fields.
        const keyApi = yield* TestServer.apiClient((yield* TestServer.createKey(owner)).key)
        const [, v1] = yield* keyApi.v1Agents.list({ query: {}, responseMode: "decoded-and-response" })
        for (const listed of ((yield* v1.json) as { data: Array<object> }).data) {
          assert.deepStrictEqual(Object.keys(listed).sort(), [
            "createdAt",
            "description",
            "id",
            "memoryEnabled",
            "model",
            "name",
            "status"
          ])
        }

        const auth = session(owner)
        const refusedIds: ReadonlyArray<
          readonly [ReadonlyArray<string>, ReadonlyArray<ReadonlyArray<string | number>>]
        > = [
          [[tool.id, theirs.id], [["payload", "toolIds", 1]]],
          [[idle.id], [["payload", "toolIds", 0]]],
          [
            ["0190c1a8-0000-7000-8000-000000000000", tool.id, "nope"],
            [
              ["payload", "toolIds", 0],
              ["payload", "toolIds", 2]
            ]
          ],
          [Array.from({ length: 33 }, () => tool.id), [["payload", "toolIds"]]]
        ]
        for (const [ids, paths] of refusedIds) {
          assertRefused(
            yield* client.request("POST", "/api/agents", { ...auth, body: { name: "x", toolIds: ids } }),
            paths,
            `create ${ids.length}`
          )
          assertRefused(
            yield* client.request("PUT", `/api/agents/${agent.id}`, { ...auth, body: { toolIds: ids } }),
            paths,
            `update ${ids.length}`
          )
        }
        assert.deepStrictEqual((yield* api.agents.get({ params: { id: agent.id } })).toolIds, [tool.id])
        assert.strictEqual((yield* api.agents.list({ query: {} })).total, 2)

        // A tool agents have is not deleted: the 409 names them.
        const inUse = yield* client.request("DELETE", `/api/tools/${tool.id}`, auth)
        assert.strictEqual(inUse.status, 409, inUse.text)
        assert.strictEqual(inUse.headers.get("content-type"), "application/problem+json")
        assert.include(inUse.body.detail, '"Clerk"')
        assert.include(inUse.body.detail, agent.id)
        yield* api.agents.update({ params: { id: AgentId.make(agent.id) }, payload: { toolIds: [] } })
        yield* api.tools.remove({ params: { id: tool.id } })
      })
    )
  })
})

const toolQuota = 2

layer(
  TestServer.layer({
    planQuotas: { ...defaultPlanQuotas, free: { ...defaultPlanQuotas.free, tools: toolQuota } }
  }),
  { excludeTestServices: true }
)("the plan's tools", (it) => {
  it.effect("past MAX_TOOLS a create is a 429 naming the quota, and leaves nothing behind", () =>
    Effect.gen(function* () {
      const account = yield* TestServer.signUp()
      const api = yield* TestServer.apiClient(account.token)
      const made: Array<typeof Tool.json.Type> = []
      for (let i = 0; i < toolQuota; i++) made.push(yield* api.tools.create({ payload: httpTool(`tool_${i}`) }))
      const refused = yield* post(account, httpTool("one_more"))
      assert.strictEqual(refused.status, 429, refused.text)
      assert.deepInclude(refused.body, {
        type: "urn:agent-host:problem:quota-reached",
        quota: "tools",
        setting: "FREE_MAX_TOOLS",
        plan: "free",
        limit: toolQuota,
        used: toolQuota,
        requested: 1
      })
      assert.strictEqual((yield* api.tools.list({ query: {} })).total, toolQuota)
      // A place given back is a place to take.
      yield* api.tools.remove({ params: { id: made[0]!.id } })
      assert.strictEqual((yield* post(account, httpTool("one_more"))).status, 201)
    })
  )
})
