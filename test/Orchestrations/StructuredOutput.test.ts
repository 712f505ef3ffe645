import { assert, describe, layer } from "@effect/vitest"
import { Effect, Result } from "effect"
import { compile } from "../../src/Tools/JsonSchema.ts"
import { FakeOpenAi, openaiKey } from "../support/FakeOpenAi.ts"
import * as TestServer from "../support/TestServer.ts"
import { type Account, TestClient, type TestResponse } from "../support/TestServer.ts"

// Structured output in executions (docs/orchestrations.md#structured-output):
// a step's response format on the local model, its fields in a later step's
// prompt (that step on the fake OpenAI server, which shows the prompt as
// rendered), a format the model cannot meet, and formats refused when saved.

const session = (account: Account) => ({ headers: TestServer.bearer(account.token) })

const orderSchema = {
  type: "object",
  properties: {
    id: { type: "string", pattern: "^SO-\\d+$" },
    customer: {
      type: "object",
      properties: { name: { type: "string", minLength: 2 }, vip: { type: "boolean" } },
      required: ["name", "vip"]
    },
    tags: { type: "array", items: { type: "string", maxLength: 4 }, minItems: 2 },
    count: { type: "integer", minimum: 3 }
  },
  required: ["id", "customer", "tags", "count"],
  additionalProperties: false
}

const order = { type: "json_schema", name: "order", schema: orderSchema }

const post = (account: Account, path: string, body: unknown) =>
  Effect.flatMap(TestClient, (client) => client.request("POST", path, { ...session(account), body }))

const created = (response: TestResponse, what: string) => {
  assert.strictEqual(response.status, 201, `${what}: ${response.text}`)
  return response.body as { id: string } & Record<string, any>
}

/** A 400 problem naming exactly `paths`, the first message matching `why`. */
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

const execute = (account: Account, orchestrationId: string, input: string) =>
  Effect.gen(function* () {
    const client = yield* TestClient
    const started = yield* client.request("POST", `/api/orchestrations/${orchestrationId}/execute`, {
      ...session(account),
      body: { input }
    })
    assert.strictEqual(started.status, 202, started.text)
    const id = started.body.executionId as string
    return yield* TestServer.waitFor(
      "the execution to finish",
      Effect.map(client.request("GET", `/api/executions/${id}`, session(account)), (reply) =>
        reply.body.status === "completed" || reply.body.status === "failed" ? { id, ...reply.body } : undefined
      )
    )
  })

const assertValid = (schema: { readonly [key: string]: unknown }, text: string) => {
  const problems = Result.getOrThrow(compile(schema))(JSON.parse(text))
  assert.deepStrictEqual(problems, [], text)
}

/** The last message of each request the fake OpenAI server received since its reset. */
const promptsSent = (fake: typeof FakeOpenAi.Service) =>
  fake.requests.map((request) => request.body.messages.at(-1).content as string)

layer(TestServer.layerWithFakeOpenAi(openaiKey), { excludeTestServices: true })("structured output", (it) => {
  describe("in executions", () => {
    it.effect("a step's format gives JSON output; a later step's prompt uses its fields, nested and whole", () =>
      Effect.gen(function* () {
        const fake = yield* FakeOpenAi
        fake.reset()
        fake.script({ text: "Dear Ada, your order ships." })
        const account = yield* TestServer.signUp()
        const local = yield* TestServer.createAgent(account, { model: "local" })
        const writer = yield* TestServer.createAgent(account, { model: "openai/gpt-4o-mini" })
        const orchestration = created(
          yield* post(account, "/api/orchestrations", {
            name: "Orders",
            steps: [
              {
                id: "a",
                agentId: local.id,
                prompt: "Extract the order.\nid: {{input}}\nname: Ada\nvip: true\ncount: 7",
                responseFormat: order
              },
              {
                id: "b",
                agentId: writer.id,
                dependsOn: ["a"],
                prompt:
                  "whole={{steps.a.output}}|name={{ steps.a.output.customer.name }}|vip={{steps.a.output.customer.vip}}" +
                  "|customer={{steps.a.output.customer}}|tags={{steps.a.output.tags}}|first={{steps.a.output.tags.0}}" +
                  "|count={{steps.a.output.count}}|missing=[{{steps.a.output.nope}}][{{steps.a.output.id.deeper}}]"
              }
            ]
          }),
          "orchestration"
        )
        // The step's format is kept with it.
        assert.deepStrictEqual(orchestration.steps[0].responseFormat, order)
        assert.notProperty(orchestration.steps[1], "responseFormat")

        const execution = yield* execute(account, orchestration.id, "SO-12")

        assert.strictEqual(execution.status, "completed", JSON.stringify(execution))
        assert.strictEqual(execution.output, "Dear Ada, your order ships.")
        const [prompt] = promptsSent(fake)
        const fields = Object.fromEntries(
          prompt!.split("|").map((part) => [part.slice(0, part.indexOf("=")), part.slice(part.indexOf("=") + 1)])
        )
        assertValid(orderSchema, fields.whole!)
        const output = JSON.parse(fields.whole!)
        assert.deepStrictEqual(output.customer, { name: "Ada", vip: true })
        assert.strictEqual(output.id, "SO-12")
        assert.deepStrictEqual(fields, {
          whole: fields.whole,
          name: "Ada",
          vip: "true",
          customer: '{"name":"Ada","vip":true}',
          tags: JSON.stringify(output.tags),
          first: output.tags[0],
          count: "7",
          missing: "[][]"
        })
      })
    )

    it.effect("a one-step run's output is the JSON; the agent's format applies, a step's own wins over it", () =>
      Effect.gen(function* () {
        const account = yield* TestServer.signUp()
        const agentFormat = {
          type: "json_schema",
          name: "agent_side",
          schema: { type: "object", properties: { from: { const: "agent" } }, required: ["from"] }
        }
        const stepFormat = {
          type: "json_schema",
          name: "step_side",
          schema: { type: "object", properties: { from: { enum: ["step"] } }, required: ["from"] }
        }
        const agent = yield* TestServer.createAgent(account, { model: "local", responseFormat: agentFormat })
        assert.deepStrictEqual((agent as Record<string, unknown>).responseFormat, agentFormat)
        const run = (step: Record<string, unknown>) =>
          Effect.gen(function* () {
            const orchestration = created(
              yield* post(account, "/api/orchestrations", {
                name: "One",
                steps: [{ id: "only", agentId: agent.id, prompt: "Say {{input}}", ...step }]
              }),
              "orchestration"
            )
            return yield* execute(account, orchestration.id, "hello")
          })

        const byAgent = yield* run({})
        const byStep = yield* run({ responseFormat: stepFormat })

        assert.strictEqual(byAgent.status, "completed", JSON.stringify(byAgent))
        assert.strictEqual(byAgent.output, '{"from":"agent"}')
        assert.strictEqual(byStep.status, "completed", JSON.stringify(byStep))
        assert.strictEqual(byStep.output, '{"from":"step"}')

        // Removed from the agent (null), its steps answer in text again.
        const client = yield* TestClient
        const cleared = yield* client.request("PUT", `/api/agents/${agent.id}`, {
          ...session(account),
          body: { responseFormat: null }
        })
        assert.strictEqual(cleared.status, 200, cleared.text)
        assert.isNull(cleared.body.responseFormat)
        const plain = yield* run({})
        assert.strictEqual(plain.status, "completed", JSON.stringify(plain))
        assert.match(plain.output, /^\[local model\] /)
      })
    )

    it.effect(
      "a reply that is not JSON twice fails the step naming the path; the model is asked twice, told the problems the second time",
      () =>
        Effect.gen(function* () {
          const fake = yield* FakeOpenAi
          const account = yield* TestServer.signUp()
          const agent = yield* TestServer.createAgent(account, { model: "openai/gpt-4o-mini" })
          const orchestration = created(
            yield* post(account, "/api/orchestrations", {
              name: "Strict",
              steps: [
                { id: "a", agentId: agent.id, prompt: "Look up {{input}}", responseFormat: order },
                { id: "b", agentId: agent.id, dependsOn: ["a"], prompt: "Use {{steps.a.output.id}}" }
              ]
            }),
            "orchestration"
          )

          fake.reset()
          fake.script({ text: "Sure! The order is SO-1." }, { text: "SO-1, shipped." })
          const notJson = yield* execute(account, orchestration.id, "SO-1")

          assert.strictEqual(notJson.status, "failed", JSON.stringify(notJson))
          assert.strictEqual(
            notJson.error,
            'Step a: the reply does not match the response format "order": (root): The reply is not JSON'
          )
          assert.isNull(notJson.output)
          assert.strictEqual(fake.requests.length, 2, "asked exactly twice, and step b never")
          const [first, second] = fake.requests.map((request) => request.body)
          for (const body of [first, second]) {
            assert.deepStrictEqual(body.response_format, {
              type: "json_schema",
              json_schema: { name: "order", schema: orderSchema }
            })
          }
          assert.deepStrictEqual(first.messages, [{ role: "user", content: "Look up SO-1" }])
          assert.deepStrictEqual(second.messages.slice(0, 2), [
            { role: "user", content: "Look up SO-1" },
            { role: "assistant", content: "Sure! The order is SO-1." }
          ])
          assert.strictEqual(second.messages.length, 3)
          assert.strictEqual(second.messages[2].role, "user")
          assert.include(second.messages[2].content, '"order"')
          assert.include(second.messages[2].content, "(root): The reply is not JSON")

          // JSON in the wrong shape: the paths that failed are named.
          fake.reset()
          const wrong = JSON.stringify({ id: 5, customer: { name: "A", vip: "yes" }, tags: [], count: 1 })
          fake.script({ text: wrong, times: 2 })
          const misshapen = yield* execute(account, orchestration.id, "SO-2")

          assert.strictEqual(misshapen.status, "failed", JSON.stringify(misshapen))
          assert.strictEqual(fake.requests.length, 2)
          for (const path of [
            "/id: must be string",
            "/customer/name: ",
            "/customer/vip: must be boolean",
            "/tags: ",
            "/count: "
          ]) {
            assert.include(misshapen.error, path)
            assert.include(fake.requests[1]!.body.messages[2].content, path)
          }
        })
    )
  })

  describe("when saved", () => {
    it.effect("an invalid format on an agent or a step is a 400 naming the path", () =>
      Effect.gen(function* () {
        const account = yield* TestServer.signUp()
        const agent = yield* TestServer.createAgent(account, { model: "local" })
        const agentWith = (responseFormat: unknown) =>
          post(account, "/api/agents", { name: "Formatted", model: "local", responseFormat })
        const stepWith = (responseFormat: unknown) =>
          post(account, "/api/orchestrations", {
            name: "Formatted",
            steps: [{ id: "s", agentId: agent.id, prompt: "{{input}}", responseFormat }]
          })
        const ok = { type: "json_schema", name: "answer", schema: { type: "string" } }
        let deep: Record<string, unknown> = { type: "string" }
        for (let i = 0; i < 20; i++) deep = { type: "object", properties: { a: deep } }
        const cases: ReadonlyArray<readonly [unknown, ReadonlyArray<string | number>, RegExp]> = [
          [{ ...ok, schema: { type: "objekt" } }, ["schema", "type"], /allowed values/],
          [
            { ...ok, schema: { type: "object", properties: { id: { type: "string", requried: true } } } },
            ["schema", "properties", "id", "requried"],
            /Unknown keyword "requried"/
          ],
          [
            { ...ok, schema: { type: "object", properties: { id: { $ref: "#/$defs/missing" } } } },
            ["schema", "properties", "id", "$ref"],
            /does not resolve/
          ],
          [{ ...ok, name: "has space" }, ["name"], /letters, digits/],
          [{ ...ok, name: "x".repeat(65) }, ["name"], /letters, digits/],
          [{ ...ok, type: "json_object" }, ["type"], /json_schema/],
          [{ ...ok, schema: "a string" }, ["schema"], /object/],
          [{ ...ok, schema: { type: "string", description: "x".repeat(33_000) } }, ["schema"], /characters of JSON/],
          [
            { ...ok, schema: deep },
            ["schema", ...Array.from({ length: 16 }, () => ["properties", "a"]).flat()],
            /nesting/
          ]
        ]
        for (const [format, path, why] of cases) {
          const what = JSON.stringify(format).slice(0, 100)
          assertRefused(yield* agentWith(format), [["payload", "responseFormat", ...path]], `agent ${what}`, why)
          assertRefused(
            yield* stepWith(format),
            [["payload", "steps", 0, "responseFormat", ...path]],
            `step ${what}`,
            why
          )
        }
        // An update is checked the same way and changes nothing.
        const client = yield* TestClient
        const update = yield* client.request("PUT", `/api/agents/${agent.id}`, {
          ...session(account),
          body: { responseFormat: { ...ok, schema: { type: "objekt" } } }
        })
        assertRefused(update, [["payload", "responseFormat", "schema", "type"]], "agent update")
        const read = yield* client.request("GET", `/api/agents/${agent.id}`, session(account))
        assert.isNull(read.body.responseFormat)

        // A valid one of any root type is kept; the API-key view of the agent does not show it.
        const kept = created(yield* agentWith(ok), "agent")
        assert.deepStrictEqual(kept.responseFormat, ok)
        const { key } = yield* TestServer.createKey(account, ["read"])
        const listed = yield* client.request("GET", "/api/v1/agents", { headers: TestServer.bearer(key) })
        assert.strictEqual(listed.status, 200, listed.text)
        for (const shown of listed.body.data) assert.notProperty(shown, "responseFormat")
      })
    )

    it.effect("output fields in prompts: only of a step run before, in a well-formed placeholder", () =>
      Effect.gen(function* () {
        const account = yield* TestServer.signUp()
        const agent = yield* TestServer.createAgent(account, { model: "local" })
        const steps = (prompt: string) => [
          { id: "a", agentId: agent.id, prompt: "{{input}}", responseFormat: order },
          { id: "b", agentId: agent.id, prompt },
          { id: "c", agentId: agent.id, prompt: "{{input}}", dependsOn: ["a"] }
        ]
        const save = (prompt: string) => post(account, "/api/orchestrations", { name: "Fields", steps: steps(prompt) })
        assertRefused(
          yield* save("{{steps.a.output.id}}"),
          [["payload", "steps", 1, "prompt"]],
          "not an ancestor",
          /must depend on `a`/
        )
        assertRefused(
          yield* save("{{steps.a.output.}}"),
          [["payload", "steps", 1, "prompt"]],
          "empty field",
          /Unknown placeholder/
        )
        assertRefused(
          yield* save("{{steps.a.output.a b}}"),
          [["payload", "steps", 1, "prompt"]],
          "a space",
          /Unknown placeholder/
        )
        const tooDeep = `{{steps.a.output${".f".repeat(17)}}}`
        assertRefused(yield* save(tooDeep), [["payload", "steps", 1, "prompt"]], "17 fields", /Unknown placeholder/)
        const fine = yield* post(account, "/api/orchestrations", {
          name: "Fields",
          steps: [
            ...steps("{{input}}").slice(0, 1),
            {
              id: "b",
              agentId: agent.id,
              prompt: `{{steps.a.output${".f".repeat(16)}}} {{steps.a.output.items.0}}`,
              dependsOn: ["a"]
            }
          ]
        })
        created(fine, "16 fields")
      })
    )
  })
})
