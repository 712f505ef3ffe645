import { assert, describe, it, layer } from "@effect/vitest"
import { ConfigProvider, Effect, Result, SchemaAST } from "effect"
import { Api } from "../../src/Api.ts"
import { settingsConfig } from "../../src/Config.ts"
import * as TestServer from "../support/TestServer.ts"
import { type TestResponse, TestClient } from "../support/TestServer.ts"

const nul = "\u0000"
const lone = "\ud800"
const missingId = "0190c1a8-0000-7000-8000-000000000000"
const cursorOf = (key: string) => Buffer.from(key, "utf8").toString("base64url")

/** A 400 problem whose `errors` name exactly `paths`, one entry each, in any order. */
const assertBad = (response: TestResponse, paths: ReadonlyArray<ReadonlyArray<string | number>>, what: string) => {
  assert.strictEqual(response.status, 400, `${what}: ${response.text}`)
  assert.strictEqual(response.headers.get("content-type"), "application/problem+json", what)
  assert.strictEqual(response.body.status, 400, what)
  const named = response.body.errors as Array<{ path: Array<string | number>; message: string }>
  assert.deepStrictEqual(
    named.map((error) => JSON.stringify(error.path)).sort(),
    paths.map((path) => JSON.stringify(path)).sort(),
    what
  )
  for (const error of named) assert.isString(error.message, what)
}

const setUp = Effect.gen(function* () {
  const account = yield* TestServer.signUp()
  const key = yield* TestServer.createKey(account)
  const agent = yield* TestServer.createAgent(account, { instructions: "Secret system prompt", memoryEnabled: true })
  const client = yield* TestClient
  const orchestration = yield* client.request("POST", "/api/orchestrations", {
    headers: TestServer.bearer(account.token),
    body: { name: "Flow", steps: [{ id: "s", agentId: agent.id, prompt: "Secret prompt: {{input}}" }] }
  })
  assert.strictEqual(orchestration.status, 201, orchestration.text)
  return {
    account,
    key: key.key,
    agentId: agent.id,
    orchestrationId: orchestration.body.id as string,
    session: { headers: TestServer.bearer(account.token) },
    apiKey: { headers: TestServer.bearer(key.key) }
  }
})

const usedToday = (account: TestServer.Account) =>
  Effect.flatMap(TestClient, (client) =>
    client.request("GET", "/api/billing", { headers: TestServer.bearer(account.token) })
  ).pipe(Effect.map((response) => response.body.usedToday as number))

layer(TestServer.layer(), { excludeTestServices: true })("hostile input", (it) => {
  describe("NUL and lone surrogates are a 400 naming the field", () => {
    it.effect("login and register, unauthenticated", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        assertBad(
          yield* client.request("POST", "/api/auth/login", { body: { email: `a${nul}@example.com`, password: "x" } }),
          [["payload", "email"]],
          "login e-mail with NUL"
        )
        assertBad(
          yield* client.request("POST", "/api/auth/login", { body: { email: "a@example.com", password: `pw${lone}` } }),
          [["payload", "password"]],
          "login password with a lone surrogate"
        )
        assertBad(
          yield* client.request("POST", "/api/auth/register", {
            body: { email: `a${nul}@example.com`, password: "long enough password", name: `Ada${lone}` }
          }),
          [
            ["payload", "email"],
            ["payload", "name"]
          ],
          "register"
        )
      })
    )

    it.effect("path parameters", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const { agentId, apiKey, session } = yield* setUp
        assertBad(yield* client.request("GET", "/api/agents/%00", session), [["params", "id"]], "agent id")
        assertBad(
          yield* client.request("PUT", "/api/agents/a%00", { ...session, body: { name: "x" } }),
          [["params", "id"]],
          "agent id on update"
        )
        assertBad(yield* client.request("DELETE", "/api/keys/%00", session), [["params", "id"]], "key id")
        assertBad(
          yield* client.request("GET", "/api/orchestrations/%00", session),
          [["params", "id"]],
          "orchestration id"
        )
        assertBad(yield* client.request("GET", "/api/v1/executions/%00", apiKey), [["params", "id"]], "execution id")
        assertBad(yield* client.request("POST", "/api/v1/executions/%00/cancel", apiKey), [["params", "id"]], "cancel")
        assertBad(
          yield* client.request("GET", `/api/agents/${agentId}/conversations/c%00/messages`, session),
          [["params", "conversationId"]],
          "conversation id"
        )
        // Still a plain 404 for an id that is merely not ours.
        assert.strictEqual((yield* client.request("GET", "/api/agents/not-a-uuid", session)).status, 404)
      })
    )

    it.effect("query parameters, and every bad parameter at once", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const { apiKey } = yield* setUp
        assertBad(
          yield* client.request("GET", "/api/v1/executions?orchestrationId=%00", apiKey),
          [["query", "orchestrationId"]],
          "orchestrationId"
        )
        assertBad(
          yield* client.request("GET", "/api/v1/executions?orchestrationId=%00&status=lost&limit=0", apiKey),
          [
            ["query", "orchestrationId"],
            ["query", "status"],
            ["query", "limit"]
          ],
          "three query parameters"
        )
      })
    )

    it.effect("agent fields, and every bad field of a body at once", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const { agentId, session } = yield* setUp
        assertBad(
          yield* client.request("POST", "/api/agents", {
            ...session,
            body: { name: `a${nul}`, description: `d${lone}`, instructions: `i${nul}` }
          }),
          [
            ["payload", "name"],
            ["payload", "description"],
            ["payload", "instructions"]
          ],
          "create"
        )
        assertBad(
          yield* client.request("PUT", `/api/agents/${agentId}`, { ...session, body: { instructions: lone } }),
          [["payload", "instructions"]],
          "update"
        )
        assertBad(
          yield* client.request("POST", "/api/agents", { ...session, body: { name: 5, memoryEnabled: "x", model: 7 } }),
          [
            ["payload", "name"],
            ["payload", "memoryEnabled"],
            ["payload", "model"]
          ],
          "three wrong types"
        )
        // One entry per field, even when a value breaks several rules.
        assertBad(
          yield* client.request("POST", "/api/agents", {
            ...session,
            body: { name: "ok", model: `x ${"y".repeat(300)}` }
          }),
          [["payload", "model"]],
          "a model both too long and malformed"
        )
        const listed = yield* client.request("GET", "/api/agents", session)
        assert.strictEqual(listed.body.total, 1)
      })
    )

    it.effect("orchestration definitions", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const { agentId, orchestrationId, session } = yield* setUp
        assertBad(
          yield* client.request("POST", "/api/orchestrations", {
            ...session,
            body: {
              name: `Flow${lone}`,
              description: nul,
              steps: [
                { id: "a", agentId, prompt: `Say ${nul}` },
                { id: "b", agentId, prompt: `Say ${lone}`, dependsOn: [`a${nul}`] }
              ]
            }
          }),
          [
            ["payload", "name"],
            ["payload", "description"],
            ["payload", "steps", 0, "prompt"],
            ["payload", "steps", 1, "prompt"],
            ["payload", "steps", 1, "dependsOn", 0]
          ],
          "create"
        )
        assertBad(
          yield* client.request("PUT", `/api/orchestrations/${orchestrationId}`, {
            ...session,
            body: { steps: [{ id: "s", agentId: `${agentId}${nul}`, prompt: "{{input}}" }] }
          }),
          [["payload", "steps", 0, "agentId"]],
          "update"
        )
      })
    )

    it.effect("a container too large is one entry, whatever its items", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const { apiKey, orchestrationId, session } = yield* setUp
        const steps = yield* client.request("POST", "/api/orchestrations", {
          ...session,
          body: { name: nul, steps: Array.from({ length: 100_000 }, () => 1) }
        })
        assertBad(
          steps,
          [
            ["payload", "name"],
            ["payload", "steps"]
          ],
          "100,000 bad steps"
        )
        const variables = Object.fromEntries(Array.from({ length: 10_000 }, (_, i) => [`${nul}${i}`, 1]))
        assertBad(
          yield* client.request("POST", `/api/v1/orchestrations/${orchestrationId}/execute`, {
            ...apiKey,
            body: { input: "go", variables }
          }),
          [["payload", "variables"]],
          "10,000 bad variables"
        )
      })
    )

    it.effect("execute input and variable names and values; nothing is started", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const { account, apiKey, orchestrationId } = yield* setUp
        const execute = (body: unknown) =>
          client.request("POST", `/api/v1/orchestrations/${orchestrationId}/execute`, { ...apiKey, body })
        assertBad(yield* execute({ input: `go${nul}` }), [["payload", "input"]], "input")
        assertBad(
          yield* execute({ input: "go", variables: { [`who${nul}`]: "me", ok: `x${lone}`, [lone]: "y" } }),
          [
            ["payload", "variables", `who${nul}`],
            ["payload", "variables", "ok"],
            ["payload", "variables", lone]
          ],
          "variables"
        )
        const executions = yield* client.request("GET", "/api/v1/executions", apiKey)
        assert.strictEqual(executions.status, 200)
        assert.strictEqual(executions.body.total, 0)
        // Only the requests themselves were counted: the two refused, and the list.
        assert.strictEqual(yield* usedToday(account), 3)
      })
    )

    it.effect("chat message and conversationId, with memory on: no model call, no turn stored", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const { account, agentId, apiKey, session } = yield* setUp
        const chat = (body: unknown) => client.request("POST", `/api/v1/agents/${agentId}/chat`, { ...apiKey, body })
        assertBad(
          yield* chat({ message: `hi${nul}`, conversationId: "c" }),
          [["payload", "message"]],
          "message with NUL"
        )
        assertBad(
          yield* chat({ message: `hi${lone}`, conversationId: "c" }),
          [["payload", "message"]],
          "message with a lone surrogate"
        )
        assertBad(
          yield* chat({ message: "hi", conversationId: `c${lone}` }),
          [["payload", "conversationId"]],
          "conversationId"
        )
        assertBad(
          yield* client.request("POST", `/api/v1/agents/${agentId}/chat`, {
            headers: { ...apiKey.headers, accept: "text/event-stream" },
            body: { message: nul }
          }),
          [["payload", "message"]],
          "streamed"
        )
        const conversations = yield* client.request("GET", `/api/agents/${agentId}/conversations`, session)
        assert.strictEqual(conversations.body.total, 0)
        assert.strictEqual(yield* usedToday(account), 4)
        const fine = yield* chat({ message: "hi", conversationId: "c" })
        assert.strictEqual(fine.status, 200)
      })
    )
  })

  describe("page cursors", () => {
    it.effect("a cursor that is not the key of its own list is a 400 naming cursor", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const { agentId, apiKey, session } = yield* setUp
        const lists = [
          { path: "/api/agents", auth: session },
          { path: "/api/orchestrations", auth: session },
          { path: "/api/v1/agents", auth: apiKey },
          { path: "/api/v1/orchestrations", auth: apiKey },
          { path: "/api/v1/executions", auth: apiKey }
        ]
        // AA decodes to a NUL; the others are well-formed base64url of something that is not an id.
        for (const cursor of ["AA", cursorOf("not-an-id"), cursorOf("c-1"), cursorOf(`${missingId} `), "%%%"]) {
          for (const { auth, path } of lists) {
            assertBad(
              yield* client.request("GET", `${path}?cursor=${cursor}`, auth),
              [["query", "cursor"]],
              `${path} ${cursor}`
            )
          }
        }
        // An id is a cursor of every id-keyed list.
        for (const { auth, path } of lists) {
          const page = yield* client.request("GET", `${path}?cursor=${cursorOf(missingId)}`, auth)
          assert.strictEqual(page.status, 200, path)
        }

        // Conversations are keyed by their client-chosen ids: those are their cursors, and nothing else.
        const conversations = `/api/agents/${agentId}/conversations`
        for (const cursor of ["AA", cursorOf(`c${nul}`), cursorOf("x".repeat(201)), "%%%"]) {
          assertBad(
            yield* client.request("GET", `${conversations}?cursor=${cursor}`, session),
            [["query", "cursor"]],
            cursor
          )
        }
        for (const id of ["a", "b", "c"]) {
          const chat = yield* client.request("POST", `/api/v1/agents/${agentId}/chat`, {
            ...apiKey,
            body: { message: "hi", conversationId: id }
          })
          assert.strictEqual(chat.status, 200)
        }
        const first = yield* client.request("GET", `${conversations}?limit=2`, session)
        assert.deepStrictEqual(
          first.body.data.map((c: { id: string }) => c.id),
          ["a", "b"]
        )
        const second = yield* client.request("GET", `${conversations}?limit=2&cursor=${first.body.nextCursor}`, session)
        assert.deepStrictEqual(
          second.body.data.map((c: { id: string }) => c.id),
          ["c"]
        )
        // A conversation's cursor is foreign to the id-keyed lists.
        assertBad(
          yield* client.request("GET", `/api/agents?cursor=${first.body.nextCursor}`, session),
          [["query", "cursor"]],
          "a conversations cursor on the agents list"
        )
      })
    )
  })

  describe("the v1 routes show the reference's fields", () => {
    it.effect("agents without instructions, orchestrations without steps; the management routes keep them", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const { apiKey, session } = yield* setUp
        const agents = yield* client.request("GET", "/api/v1/agents", apiKey)
        assert.strictEqual(agents.status, 200)
        assert.deepStrictEqual(Object.keys(agents.body.data[0]).sort(), [
          "createdAt",
          "description",
          "id",
          "memoryEnabled",
          "model",
          "name",
          "status"
        ])
        assert.notInclude(agents.text, "Secret system prompt")
        const orchestrations = yield* client.request("GET", "/api/v1/orchestrations", apiKey)
        assert.strictEqual(orchestrations.status, 200)
        assert.deepStrictEqual(Object.keys(orchestrations.body.data[0]).sort(), [
          "createdAt",
          "description",
          "id",
          "name",
          "status"
        ])
        assert.notInclude(orchestrations.text, "Secret prompt")

        const managedAgents = yield* client.request("GET", "/api/agents", session)
        assert.strictEqual(managedAgents.body.data[0].instructions, "Secret system prompt")
        const managedFlows = yield* client.request("GET", "/api/orchestrations", session)
        assert.strictEqual(managedFlows.body.data[0].steps[0].prompt, "Secret prompt: {{input}}")
      })
    )
  })

  describe("the declared schemas", () => {
    it("every string a request can carry refuses NUL and lone surrogates, map keys included; every array and map is bounded first", () => {
      const unchecked: Array<string> = []
      const refuses = (ast: SchemaAST.AST, value: unknown) =>
        (ast.checks ?? []).some((check) => check._tag === "Filter" && check.run(value, ast, {}) !== undefined)
      // A container is taken as any value and refused whole when too large, before any item is
      // decoded: with every issue reported, its items would otherwise each cost one.
      const hugeArray = Array.from({ length: 100_000 }, () => 0)
      const hugeRecord = Object.fromEntries(hugeArray.map((_, i) => [`k${i}`, 0]))
      const boundedFirst = (ast: SchemaAST.AST) => {
        const encoded = SchemaAST.toEncoded(ast)
        return encoded._tag === "Any" && refuses(encoded, ast._tag === "Arrays" ? hugeArray : hugeRecord)
      }
      const walk = (ast: SchemaAST.AST, where: string): void => {
        switch (ast._tag) {
          case "String":
            if (!refuses(ast, `a${nul}`) || !refuses(ast, `a${lone}`)) unchecked.push(where)
            return
          case "Objects":
            for (const property of ast.propertySignatures) walk(property.type, `${where}.${String(property.name)}`)
            if (ast.indexSignatures.length > 0 && !boundedFirst(ast)) unchecked.push(`${where} (unbounded)`)
            for (const index of ast.indexSignatures) {
              // A key must be taken as any string, then refused: a key schema that merely does not
              // match a key drops that entry silently instead of naming it.
              const selects = SchemaAST.toEncoded(index.parameter)
              if (refuses(selects, `a${nul}`) || refuses(selects, `a${lone}`)) unchecked.push(`${where}[key selects]`)
              walk(index.parameter, `${where}[key]`)
              walk(index.type, `${where}[value]`)
            }
            return
          case "Arrays":
            if (!boundedFirst(ast)) unchecked.push(`${where} (unbounded)`)
            ast.elements.forEach((element, i) => walk(element, `${where}[${i}]`))
            for (const rest of ast.rest) walk(rest, `${where}[]`)
            return
          case "Union":
            ast.types.forEach((member, i) => walk(member, `${where}|${i}`))
            return
          default:
            return
        }
      }
      let endpoints = 0
      for (const group of Object.values(Api.groups)) {
        for (const [key, endpoint] of Object.entries(group.endpoints)) {
          endpoints++
          const name = `${group.identifier}.${key}`
          if (endpoint.params) walk(endpoint.params.ast, `${name} params`)
          if (endpoint.query) walk(endpoint.query.ast, `${name} query`)
          if (endpoint.headers) walk(endpoint.headers.ast, `${name} headers`)
          for (const payload of endpoint.payload.values()) {
            if ("schemas" in payload) for (const schema of payload.schemas) walk(schema.ast, `${name} payload`)
          }
        }
      }
      assert.isAbove(endpoints, 20)
      assert.deepStrictEqual(unchecked, [])
    })
  })
})

describe("enum-like settings", () => {
  const read = (env: Record<string, string>) => Effect.result(settingsConfig.parse(ConfigProvider.fromEnv({ env })))

  it.effect("LOG_LEVEL in any case; anything else names the variable and the choices", () =>
    Effect.gen(function* () {
      for (const [value, expected] of [
        ["warn", "Warn"],
        ["WARN", "Warn"],
        ["Warn", "Warn"],
        [" debug ", "Debug"],
        ["all", "All"]
      ]) {
        const settings = yield* read({ LOG_LEVEL: value! })
        assert.isTrue(Result.isSuccess(settings), value)
        if (Result.isSuccess(settings)) assert.strictEqual(settings.success.logLevel, expected, value)
      }
      const loud = yield* read({ LOG_LEVEL: "loud" })
      assert.isTrue(Result.isFailure(loud))
      if (Result.isFailure(loud)) {
        const message = String(loud.failure)
        assert.include(message, "LOG_LEVEL")
        assert.include(message, "loud")
        for (const level of ["Trace", "Debug", "Info", "Warn", "Error", "Fatal", "None"]) assert.include(message, level)
      }
    })
  )

  it.effect("booleans and the default model's provider in any case; anything else names the variable", () =>
    Effect.gen(function* () {
      const settings = yield* read({ COOKIE_SECURE: "TRUE", METRICS_ENABLED: "Off", ENFORCE_DAILY_LIMITS: "No" })
      assert.isTrue(Result.isSuccess(settings))
      if (Result.isSuccess(settings)) {
        assert.isTrue(settings.success.cookieSecure)
        assert.isFalse(settings.success.metricsEnabled)
        assert.isFalse(settings.success.enforceDailyLimits)
      }
      for (const [value, expected] of [
        ["LOCAL", "local"],
        ["OpenAI/gpt-4o-Mini", "openai/gpt-4o-Mini"]
      ]) {
        const model = yield* read({ DEFAULT_MODEL: value! })
        assert.isTrue(Result.isSuccess(model), value)
        if (Result.isSuccess(model)) assert.strictEqual(model.success.defaultModel, expected)
      }
      const unknownModel = yield* read({ DEFAULT_MODEL: "gpt-4o" })
      assert.isTrue(Result.isFailure(unknownModel))
      if (Result.isFailure(unknownModel)) assert.include(String(unknownModel.failure), "DEFAULT_MODEL")
      const maybe = yield* read({ COOKIE_SECURE: "maybe" })
      assert.isTrue(Result.isFailure(maybe))
      if (Result.isFailure(maybe)) {
        assert.include(String(maybe.failure), "COOKIE_SECURE")
        assert.include(String(maybe.failure), "maybe")
      }
    })
  )
})
