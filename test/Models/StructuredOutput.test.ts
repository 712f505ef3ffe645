import { assert, describe, it } from "@effect/vitest"
import { Effect, Result } from "effect"
import type { ModelRequest, ResponseFormat, ToolSpec } from "../../src/Models/Models.ts"
import { instanceOf } from "../../src/Models/SchemaInstance.ts"
import { compile } from "../../src/Tools/JsonSchema.ts"
import { FakeAnthropic } from "../support/FakeAnthropic.ts"
import { FakeOpenAi } from "../support/FakeOpenAi.ts"
import { anthropicKey, buildModels, collect, deltaText, openaiKey, someKey } from "./Harness.ts"

// Structured output through each provider (docs/tools.md#structured-output):
// what goes on the wire for a response format, Anthropic's forced tool read
// back as the reply's text, and the local model's values of a schema.

/** Meets OpenAI's strict rules: closed objects, every property required. */
const order: ResponseFormat = {
  type: "json_schema",
  name: "order_status",
  schema: {
    type: "object",
    properties: {
      id: { type: "string" },
      shipped: { type: "boolean" },
      items: {
        type: "array",
        items: {
          type: "object",
          properties: { sku: { type: "string" } },
          required: ["sku"],
          additionalProperties: false
        }
      }
    },
    required: ["id", "shipped", "items"],
    additionalProperties: false
  }
}

/** Does not: an optional property, a pattern. */
const loose: ResponseFormat = {
  type: "json_schema",
  name: "loose",
  schema: {
    type: "object",
    properties: { id: { type: "string", pattern: "^SO-\\d+$" }, note: { type: "string" } },
    required: ["id"]
  }
}

const weather: ToolSpec = {
  name: "get_weather",
  description: "The weather now in a city.",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] }
}

const ask = (model: string, responseFormat: ResponseFormat, extra: Partial<ModelRequest> = {}): ModelRequest => ({
  model,
  system: "You extract orders.",
  messages: [{ role: "user", content: "Order SO-7 shipped yesterday." }],
  maxOutputTokens: 300,
  responseFormat,
  ...extra
})

const validAgainst = (schema: { readonly [key: string]: unknown }, text: string) => {
  const compiled = compile(schema)
  assert.isTrue(Result.isSuccess(compiled), JSON.stringify(schema))
  const problems = Result.getOrThrow(compiled)(JSON.parse(text))
  assert.deepStrictEqual(problems, [], `${text} against ${JSON.stringify(schema)}`)
}

describe("structured output, OpenAI", () => {
  const setup = Effect.gen(function* () {
    const fake = yield* FakeOpenAi.make({ apiKey: openaiKey })
    const models = yield* buildModels({ openaiBaseUrl: fake.url, openaiApiKey: someKey(openaiKey) })
    return { fake, models }
  })

  it.live("sends response_format json_schema, strict only for a schema that meets the strict rules", () =>
    Effect.gen(function* () {
      const { fake, models } = yield* setup
      const answer = JSON.stringify({ id: "SO-7", shipped: true, items: [] })
      fake.script({ text: answer }, { text: '{"id":"SO-7"}' })

      const strict = yield* models.generate(ask("openai/gpt-4o-mini", order))
      const plain = yield* models.generate(ask("openai/gpt-4o-mini", loose))

      assert.strictEqual(strict.text, answer)
      assert.strictEqual(plain.text, '{"id":"SO-7"}')
      assert.deepStrictEqual(fake.requests[0]!.body.response_format, {
        type: "json_schema",
        json_schema: { name: "order_status", schema: order.schema, strict: true }
      })
      assert.deepStrictEqual(fake.requests[1]!.body.response_format, {
        type: "json_schema",
        json_schema: { name: "loose", schema: loose.schema }
      })
    })
  )

  it.live("streamed, with tools: the format beside the tools; without a format none is sent", () =>
    Effect.gen(function* () {
      const { fake, models } = yield* setup
      fake.script({ text: '{"id": "SO-7", "shipped": false, "items": []}' }, { text: "Plain." })

      const { events, error } = yield* collect(models.stream(ask("openai/gpt-4o-mini", order, { tools: [weather] })))
      yield* models.generate({ ...ask("openai/gpt-4o-mini", order), responseFormat: undefined })

      assert.isUndefined(error)
      assert.strictEqual(deltaText(events), '{"id": "SO-7", "shipped": false, "items": []}')
      const body = fake.requests[0]!.body
      assert.strictEqual(body.stream, true)
      assert.strictEqual(body.tool_choice, "auto")
      assert.strictEqual(body.tools[0].function.name, "get_weather")
      assert.strictEqual(body.response_format.json_schema.name, "order_status")
      assert.notProperty(fake.requests[1]!.body, "response_format")
    })
  )
})

describe("structured output, Anthropic", () => {
  const setup = Effect.gen(function* () {
    const fake = yield* FakeAnthropic.make({ apiKey: anthropicKey })
    const models = yield* buildModels({ anthropicBaseUrl: fake.url, anthropicApiKey: someKey(anthropicKey) })
    return { fake, models }
  })
  const model = "anthropic/claude-sonnet-4-5"
  const answerTool = {
    name: "order_status",
    description: "Respond with the answer as this tool's input",
    input_schema: order.schema
  }
  const answer = { id: "SO-7", shipped: true, items: [{ sku: "TENT-2" }] }

  it.live("forces a tool named after the format and reads its input as the reply's text, not a call", () =>
    Effect.gen(function* () {
      const { fake, models } = yield* setup
      fake.script({
        toolCalls: [{ id: "toolu_01", name: "order_status", arguments: answer }],
        usage: { input: 90, output: 20 }
      })

      const reply = yield* models.generate(ask(model, order))

      assert.deepStrictEqual(reply, {
        text: JSON.stringify(answer),
        model: "anthropic/claude-sonnet-4-5",
        inputTokens: 90,
        outputTokens: 20,
        toolCalls: []
      })
      assert.deepStrictEqual(fake.requests[0]!.body, {
        model: "claude-sonnet-4-5",
        max_tokens: 300,
        system: "You extract orders.",
        messages: [{ role: "user", content: "Order SO-7 shipped yesterday." }],
        tools: [answerTool],
        tool_choice: { type: "tool", name: "order_status" }
      })
    })
  )

  it.live("streamed: the input's pieces, split mid-token, are the text's deltas", () =>
    Effect.gen(function* () {
      const { fake, models } = yield* setup
      fake.script({
        argumentChunkChars: 2,
        toolCalls: [{ id: "toolu_01", name: "order_status", arguments: answer }]
      })

      const { events, error } = yield* collect(models.stream(ask(model, order)))

      assert.isUndefined(error)
      assert.isAbove(events.filter((event) => event._tag === "Delta").length, 10)
      assert.deepStrictEqual(JSON.parse(deltaText(events)), answer)
      const done = events.at(-1)
      assert.strictEqual(done?._tag, "Done")
      if (done?._tag === "Done") {
        assert.deepStrictEqual(JSON.parse(done.reply.text), answer)
        assert.deepStrictEqual(done.reply.toolCalls, [])
      }
      assert.strictEqual(fake.requests[0]!.body.stream, true)
      assert.deepStrictEqual(fake.requests[0]!.body.tool_choice, { type: "tool", name: "order_status" })
    })
  )

  it.live(
    "with the loop's tools: all sent with tool_choice any; a real call stays a call, the format's is the answer",
    () =>
      Effect.gen(function* () {
        const { fake, models } = yield* setup
        fake.script(
          { toolCalls: [{ id: "toolu_w", name: "get_weather", arguments: { city: "Oslo" } }] },
          { toolCalls: [{ id: "toolu_a", name: "order_status", arguments: answer }] }
        )
        const request = ask(model, order, { tools: [weather], toolChoice: "auto" })

        const first = yield* models.generate(request)
        const second = yield* models.generate(request)
        // The loop's last word after its bound: no tool but the format's.
        fake.script({ toolCalls: [{ id: "toolu_b", name: "order_status", arguments: answer }] })
        const last = yield* models.generate({ ...request, toolChoice: "none" })

        assert.deepStrictEqual(first.toolCalls, [{ id: "toolu_w", name: "get_weather", arguments: { city: "Oslo" } }])
        assert.strictEqual(first.text, "")
        assert.deepStrictEqual(second.toolCalls, [])
        assert.deepStrictEqual(JSON.parse(second.text), answer)
        assert.deepStrictEqual(JSON.parse(last.text), answer)
        const body = fake.requests[0]!.body
        assert.deepStrictEqual(
          body.tools.map((tool: { name: string }) => tool.name),
          ["get_weather", "order_status"]
        )
        assert.deepStrictEqual(body.tool_choice, { type: "any" })
        assert.deepStrictEqual(fake.requests[2]!.body.tools, [answerTool])
        assert.deepStrictEqual(fake.requests[2]!.body.tool_choice, { type: "tool", name: "order_status" })
      })
  )

  it.live("a schema whose root is not an object is wrapped as the answer property, and unwrapped", () =>
    Effect.gen(function* () {
      const { fake, models } = yield* setup
      const tags: ResponseFormat = {
        type: "json_schema",
        name: "tags",
        schema: { type: "array", items: { type: "string" } }
      }
      fake.script(
        { toolCalls: [{ id: "toolu_01", name: "tags", arguments: { answer: ["a", "b"] } }] },
        { toolCalls: [{ id: "toolu_02", name: "tags", arguments: { answer: ["c"] } }] }
      )

      const reply = yield* models.generate(ask(model, tags))
      const streamed = yield* collect(models.stream(ask(model, tags)))

      assert.strictEqual(reply.text, '["a","b"]')
      assert.strictEqual(deltaText(streamed.events), '["c"]')
      assert.deepStrictEqual(fake.requests[0]!.body.tools, [
        {
          name: "tags",
          description: "Respond with the answer as this tool's input",
          input_schema: {
            type: "object",
            properties: { answer: tags.schema },
            required: ["answer"],
            additionalProperties: false
          }
        }
      ])
    })
  )
})

describe("structured output, the local model", () => {
  const schemas: ReadonlyArray<{ readonly [key: string]: unknown }> = [
    order.schema,
    {
      type: "object",
      properties: {
        status: { enum: ["open", "closed"] },
        kind: { const: "order" },
        count: { type: "integer", minimum: 3, maximum: 9, multipleOf: 2 },
        ratio: { type: "number", exclusiveMinimum: 0, exclusiveMaximum: 1 },
        code: { type: "string", minLength: 12, maxLength: 14 },
        tags: { type: "array", items: { type: "string" }, minItems: 2 },
        pair: { type: "array", items: [{ type: "integer" }, { type: "boolean" }], minItems: 2 },
        maybe: { type: ["null", "string"] },
        nested: { type: "object", properties: { deep: { $ref: "#/$defs/leaf" } }, required: ["deep"] },
        either: { anyOf: [{ type: "number", minimum: 5 }, { type: "string" }] },
        both: {
          allOf: [
            { properties: { x: { type: "string" } }, required: ["x"] },
            { required: ["y"], properties: { y: { type: "boolean" } } }
          ]
        }
      },
      required: ["status", "kind", "count", "ratio", "code", "tags", "pair", "maybe", "nested", "either", "both"],
      $defs: {
        leaf: { type: "object", properties: { at: { type: "string" } }, required: ["at"], additionalProperties: false }
      }
    },
    { type: "array", items: { type: "number" }, minItems: 1, contains: { type: "number", minimum: 10 } },
    { type: "string", maxLength: 5 },
    { type: "object", minProperties: 2, properties: { a: { type: "string" }, b: { type: "number", default: 4 } } },
    {
      type: "object",
      properties: { node: { $ref: "#/definitions/node" } },
      required: ["node"],
      definitions: {
        node: {
          type: "object",
          properties: { name: { type: "string" }, children: { type: "array", items: { $ref: "#/definitions/node" } } },
          required: ["name", "children"]
        }
      }
    },
    { type: "object", required: ["__proto__", "extra"], additionalProperties: { type: "integer", minimum: 1 } }
  ]

  it.effect("answers with a value valid against each schema, the same every time, streamed alike", () =>
    Effect.gen(function* () {
      const models = yield* buildModels()
      for (const schema of schemas) {
        const format: ResponseFormat = { type: "json_schema", name: "answer", schema }
        const reply = yield* models.generate(ask("local", format))
        const again = yield* models.generate(ask("local", format))
        const { events, error } = yield* collect(models.stream(ask("local", format)))
        assert.isUndefined(error)
        validAgainst(schema, reply.text)
        assert.strictEqual(again.text, reply.text)
        assert.strictEqual(deltaText(events), reply.text)
        assert.deepStrictEqual(reply.toolCalls, [])
        assert.strictEqual(reply.outputTokens > 0, true)
      }
    })
  )

  it.effect("takes strings, numbers and booleans from the message's NAME: value lines, else the message", () =>
    Effect.gen(function* () {
      const models = yield* buildModels()
      const format: ResponseFormat = {
        type: "json_schema",
        name: "order",
        schema: {
          type: "object",
          properties: {
            id: { type: "string", pattern: "^SO-\\d+$" },
            city: { type: "string" },
            qty: { type: "integer", minimum: 1 },
            gift: { type: "boolean" },
            summary: { type: "string", maxLength: 9 },
            code: { type: "string", pattern: "^[A-Z]{3}$", minLength: 3 }
          },
          required: ["id", "city", "qty", "gift", "summary", "code"]
        }
      }
      const reply = yield* models.generate({
        ...ask("local", format),
        messages: [{ role: "user", content: "Take this order.\nID: SO-42\ncity:  Lyon \nqty: 3\ngift: true" }]
      })
      assert.deepStrictEqual(JSON.parse(reply.text), {
        id: "SO-42",
        city: "Lyon",
        qty: 3,
        gift: true,
        summary: "Take this",
        // Neither the message nor "" matches its pattern: left invalid, for the loop to report.
        code: "---"
      })
    })
  )

  it.effect("with tools offered, a call phrase is still a call; with none it answers in the format", () =>
    Effect.gen(function* () {
      const models = yield* buildModels()
      const calling = yield* models.generate(
        ask("local", order, {
          tools: [weather],
          messages: [{ role: "user", content: 'call get_weather {"city": "Oslo"}' }]
        })
      )
      const answering = yield* models.generate(ask("local", order, { tools: [weather] }))
      assert.deepStrictEqual(calling.toolCalls, [
        { id: "local_call_1", name: "get_weather", arguments: { city: "Oslo" } }
      ])
      validAgainst(order.schema, answering.text)
    })
  )

  it("builds nothing past its depth bound for a schema that only recurses", () => {
    const value = instanceOf({ $ref: "#" }, "x")
    assert.isNull(value)
  })
})
