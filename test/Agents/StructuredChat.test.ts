import { assert, describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import { FakeOpenAi, openaiKey } from "../support/FakeOpenAi.ts"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"

// An agent with a response format answers chat with JSON matching it
// (docs/tools.md#structured-output); a model that cannot is asked once more,
// told what was wrong, then the turn is a 422 naming where.

const format = {
  type: "json_schema",
  name: "order",
  schema: {
    type: "object",
    properties: { id: { type: "string" }, quantity: { type: "integer", minimum: 1 } },
    required: ["id", "quantity"],
    additionalProperties: false
  }
}

const agentWithFormat = (model: string) =>
  Effect.gen(function* () {
    const client = yield* TestClient
    const account = yield* TestServer.signUp()
    const { key } = yield* TestServer.createKey(account)
    const agent = yield* TestServer.createAgent(account, { model, responseFormat: format })
    const chat = (message: string) =>
      client.request("POST", `/api/v1/agents/${agent.id}/chat`, {
        headers: TestServer.bearer(key),
        body: { message }
      })
    return { chat }
  })

layer(TestServer.layerWithFakeOpenAi(openaiKey), { excludeTestServices: true })("structured chat", (it) => {
  describe("an agent with a response format", () => {
    it.effect("on the local model: the reply is JSON matching the schema", () =>
      Effect.gen(function* () {
        const { chat } = yield* agentWithFormat("local")
        const reply = yield* chat("id: A-7")
        assert.strictEqual(reply.status, 200, reply.text)
        const answer = JSON.parse(reply.body.reply)
        assert.strictEqual(answer.id, "A-7")
        assert.isAtLeast(answer.quantity, 1)
        assert.deepStrictEqual(Object.keys(answer).sort(), ["id", "quantity"])
      })
    )

    it.effect("a model answering other JSON twice: asked again with the problems, then a 422 naming the path", () =>
      Effect.gen(function* () {
        const fake = yield* FakeOpenAi
        fake.reset()
        fake.script({ text: '{"id": "A-7", "quantity": 0}' }, { text: '{"id": 7, "quantity": 2}' })
        const { chat } = yield* agentWithFormat("openai/gpt-4o-mini")
        const reply = yield* chat("One order, please")
        assert.strictEqual(reply.status, 422, reply.text)
        assert.strictEqual(reply.headers.get("content-type"), "application/problem+json")
        assert.strictEqual(reply.body.type, "urn:agent-host:problem:output-invalid")
        assert.deepStrictEqual(
          reply.body.errors.map((error: { path: ReadonlyArray<unknown> }) => error.path),
          [["id"]]
        )
        assert.strictEqual(fake.requests.length, 2)
        const [first, second] = fake.requests
        assert.deepStrictEqual(first!.body.response_format.json_schema.name, "order")
        // The second request carries the first reply and what was wrong with it.
        const retry = second!.body.messages.at(-1)
        assert.strictEqual(retry.role, "user")
        assert.include(retry.content, "/quantity")
      })
    )

    it.effect("a model answering matching JSON: the reply is that JSON, asked once", () =>
      Effect.gen(function* () {
        const fake = yield* FakeOpenAi
        fake.reset()
        fake.script({ text: '{"id": "B-1", "quantity": 3}' })
        const { chat } = yield* agentWithFormat("openai/gpt-4o-mini")
        const reply = yield* chat("One order, please")
        assert.strictEqual(reply.status, 200, reply.text)
        assert.deepStrictEqual(JSON.parse(reply.body.reply), { id: "B-1", quantity: 3 })
        assert.strictEqual(fake.requests.length, 1)
      })
    )
  })
})
