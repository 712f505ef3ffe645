import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import type { ChatMessage, ModelRequest, ToolSpec } from "../../src/Models/Models.ts"
import { FakeAnthropic } from "../support/FakeAnthropic.ts"
import { anthropicKey, buildModels, collect, deltaText, someKey } from "./Harness.ts"

const weather: ToolSpec = {
  name: "get_weather",
  description: "The weather now in a city.",
  parameters: {
    type: "object",
    properties: { city: { type: "string", description: "City name" } },
    required: ["city"],
    additionalProperties: false
  }
}

const time: ToolSpec = {
  name: "get_time",
  description: "The local time in a time zone.",
  parameters: { type: "object", properties: { zone: { type: "string" } }, required: ["zone"] }
}

const request: ModelRequest = {
  model: "anthropic/claude-sonnet-4-5",
  system: "You are Scout, a hiking guide.",
  messages: [{ role: "user", content: "Is it hiking weather in Paris?" }],
  maxOutputTokens: 500,
  tools: [weather, time]
}

const setup = Effect.gen(function* () {
  const fake = yield* FakeAnthropic.make({ apiKey: anthropicKey })
  const models = yield* buildModels({ anthropicBaseUrl: fake.url, anthropicApiKey: someKey(anthropicKey) })
  return { fake, models }
})

const sentTools = [
  { name: "get_weather", description: "The weather now in a city.", input_schema: weather.parameters },
  { name: "get_time", description: "The local time in a time zone.", input_schema: time.parameters }
]

describe("Anthropic provider, tool calls", () => {
  it.live("offers the tools and reads a tool_use block of a whole reply as a tool call", () =>
    Effect.gen(function* () {
      const { fake, models } = yield* setup
      fake.script({
        text: "Let me check.",
        model: "claude-sonnet-4-5-20250929",
        usage: { input: 310, output: 42 },
        toolCalls: [{ id: "toolu_01A", name: "get_weather", arguments: { city: "Paris" } }]
      })

      const reply = yield* models.generate(request)

      assert.deepStrictEqual(reply, {
        text: "Let me check.",
        model: "anthropic/claude-sonnet-4-5-20250929",
        inputTokens: 310,
        outputTokens: 42,
        toolCalls: [{ id: "toolu_01A", name: "get_weather", arguments: { city: "Paris" } }]
      })
      assert.deepStrictEqual(fake.requests[0]!.body, {
        model: "claude-sonnet-4-5",
        max_tokens: 500,
        system: "You are Scout, a hiking guide.",
        messages: [{ role: "user", content: "Is it hiking weather in Paris?" }],
        tools: sentTools,
        tool_choice: { type: "auto" }
      })
    })
  )

  it.live("reads two tool_use blocks of one turn, in order, with no text", () =>
    Effect.gen(function* () {
      const { fake, models } = yield* setup
      fake.script({
        toolCalls: [
          { id: "toolu_01", name: "get_weather", arguments: { city: "Paris" } },
          { id: "toolu_02", name: "get_time", arguments: { zone: "Europe/Paris" } }
        ]
      })

      const reply = yield* models.generate(request)

      assert.strictEqual(reply.text, "")
      assert.deepStrictEqual(reply.toolCalls, [
        { id: "toolu_01", name: "get_weather", arguments: { city: "Paris" } },
        { id: "toolu_02", name: "get_time", arguments: { zone: "Europe/Paris" } }
      ])
    })
  )

  it.live("streams text, then assembles each tool_use block from its input_json_delta pieces", () =>
    Effect.gen(function* () {
      const { fake, models } = yield* setup
      fake.script({
        text: "Checking both now.",
        model: "claude-sonnet-4-5-20250929",
        usage: { input: 300, output: 60 },
        toolCalls: [
          { id: "toolu_01", name: "get_weather", arguments: { city: "Paris" } },
          { id: "toolu_02", name: "get_time", arguments: { zone: "Europe/Paris" } }
        ]
      })

      const { events, error } = yield* collect(models.stream(request))

      assert.isUndefined(error)
      assert.strictEqual(deltaText(events), "Checking both now.")
      assert.strictEqual(events.filter((event) => event._tag === "Done").length, 1)
      assert.deepStrictEqual(events.at(-1), {
        _tag: "Done",
        reply: {
          text: "Checking both now.",
          model: "anthropic/claude-sonnet-4-5-20250929",
          inputTokens: 300,
          outputTokens: 60,
          toolCalls: [
            { id: "toolu_01", name: "get_weather", arguments: { city: "Paris" } },
            { id: "toolu_02", name: "get_time", arguments: { zone: "Europe/Paris" } }
          ]
        }
      })
      const body = fake.requests[0]!.body
      assert.strictEqual(body.stream, true)
      assert.deepStrictEqual(body.tools, sentTools)
      assert.deepStrictEqual(body.tool_choice, { type: "auto" })
    })
  )

  it.live("assembles input split anywhere: inside escapes, unicode and \\u sequences", () =>
    Effect.gen(function* () {
      const { fake, models } = yield* setup
      const tricky = {
        query: 'say "hé" — 東京 🏔️ \\ back\nslash',
        nested: { 'a"b': [1, 2.5, -3e-7, true, null], empty: "" }
      }
      const escaped = '{"city":"caf\\u00e9 \\"Z\\u00fcrich\\"","note":"\\ud83c\\udfd4"}'
      for (const chunk of [1, 2, 5]) {
        fake.script({
          argumentChunkChars: chunk,
          toolCalls: [
            { id: "toolu_a", name: "get_weather", arguments: tricky },
            { id: "toolu_b", name: "get_weather", arguments: escaped }
          ]
        })

        const { events, error } = yield* collect(models.stream(request))

        assert.isUndefined(error)
        const done = events.at(-1)
        assert.strictEqual(done?._tag, "Done")
        assert.deepStrictEqual(done?._tag === "Done" ? done.reply.toolCalls : undefined, [
          { id: "toolu_a", name: "get_weather", arguments: tricky },
          { id: "toolu_b", name: "get_weather", arguments: { city: 'café "Zürich"', note: "🏔" } }
        ])
        assert.strictEqual(deltaText(events), "")
      }
    })
  )

  it.live("streams a call with no input as {} and one whose input is not JSON as its text", () =>
    Effect.gen(function* () {
      const { fake, models } = yield* setup
      fake.script({
        toolCalls: [
          { id: "toolu_a", name: "get_time", arguments: "" },
          { id: "toolu_b", name: "get_weather", arguments: '{"city": "Par' }
        ]
      })

      const { events, error } = yield* collect(models.stream(request))

      assert.isUndefined(error)
      const done = events.at(-1)
      assert.deepStrictEqual(done?._tag === "Done" ? done.reply.toolCalls : undefined, [
        { id: "toolu_a", name: "get_time", arguments: {} },
        { id: "toolu_b", name: "get_weather", arguments: '{"city": "Par' }
      ])
    })
  )

  it.live("sends the calls as tool_use blocks and all their results in one user message, failures marked", () =>
    Effect.gen(function* () {
      const { fake, models } = yield* setup
      const history: ReadonlyArray<ChatMessage> = [
        { role: "user", content: "Is it hiking weather in Paris?" },
        {
          role: "assistant",
          content: "Checking both.",
          toolCalls: [
            { id: "toolu_01", name: "get_weather", arguments: { city: "Paris" } },
            { id: "toolu_02", name: "get_time", arguments: { zone: "Europe/Pariss" } }
          ]
        },
        { role: "tool", callId: "toolu_01", name: "get_weather", content: "18°C, light wind", isError: false },
        { role: "tool", callId: "toolu_02", name: "get_time", content: 'Unknown zone "Europe/Pariss"', isError: true },
        {
          role: "assistant",
          content: "",
          toolCalls: [{ id: "toolu_03", name: "get_time", arguments: "not json" }]
        },
        { role: "tool", callId: "toolu_03", name: "get_time", content: "", isError: false },
        { role: "assistant", content: "It is 18°C." },
        { role: "user", content: "And tomorrow?" }
      ]
      fake.script({ text: "Mild again." })

      const reply = yield* models.generate({ ...request, messages: history })

      assert.strictEqual(reply.text, "Mild again.")
      assert.deepStrictEqual(fake.requests[0]!.body.messages, [
        { role: "user", content: "Is it hiking weather in Paris?" },
        {
          role: "assistant",
          content: [
            { type: "text", text: "Checking both." },
            { type: "tool_use", id: "toolu_01", name: "get_weather", input: { city: "Paris" } },
            { type: "tool_use", id: "toolu_02", name: "get_time", input: { zone: "Europe/Pariss" } }
          ]
        },
        {
          role: "user",
          content: [
            { type: "tool_result", tool_use_id: "toolu_01", content: "18°C, light wind" },
            { type: "tool_result", tool_use_id: "toolu_02", content: 'Unknown zone "Europe/Pariss"', is_error: true }
          ]
        },
        // Anthropic takes only an object as input: arguments that were not one go back as none.
        { role: "assistant", content: [{ type: "tool_use", id: "toolu_03", name: "get_time", input: {} }] },
        { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_03", content: "" }] },
        { role: "assistant", content: "It is 18°C." },
        { role: "user", content: "And tomorrow?" }
      ])
    })
  )

  it.live("passes on Anthropic's refusal of a call whose result is missing", () =>
    Effect.gen(function* () {
      const { fake, models } = yield* setup
      const error = yield* Effect.flip(
        models.generate({
          ...request,
          messages: [
            { role: "user", content: "Weather?" },
            {
              role: "assistant",
              content: "",
              toolCalls: [{ id: "toolu_01", name: "get_weather", arguments: { city: "Paris" } }]
            },
            { role: "user", content: "Well?" }
          ]
        })
      )

      assert.strictEqual(error.status, 400)
      assert.include(error.message, "toolu_01")
      assert.strictEqual(fake.requests.length, 1)
    })
  )

  it.live("maps each tool choice to Anthropic's", () =>
    Effect.gen(function* () {
      const { fake, models } = yield* setup
      const choices = [
        [undefined, { type: "auto" }],
        ["auto", { type: "auto" }],
        ["none", { type: "none" }],
        ["required", { type: "any" }],
        [{ tool: "get_time" }, { type: "tool", name: "get_time" }]
      ] as const
      for (const [choice, sent] of choices) {
        fake.reset()
        yield* models.generate({ ...request, toolChoice: choice })
        const streamed = yield* collect(models.stream({ ...request, toolChoice: choice }))
        assert.isUndefined(streamed.error)

        assert.strictEqual(fake.requests.length, 2)
        for (const { body } of fake.requests) {
          assert.deepStrictEqual(body.tool_choice, sent)
          assert.deepStrictEqual(body.tools, sentTools)
        }
      }
    })
  )

  it.live("sends neither tools nor tool_choice when no tools are offered", () =>
    Effect.gen(function* () {
      const { fake, models } = yield* setup
      const bare = { ...request, tools: undefined }
      yield* models.generate(bare)
      yield* models.generate({ ...request, tools: [], toolChoice: "required" })
      yield* collect(models.stream(bare))

      assert.strictEqual(fake.requests.length, 3)
      for (const { body } of fake.requests) {
        assert.isFalse("tools" in body)
        assert.isFalse("tool_choice" in body)
        assert.deepStrictEqual(body.messages, [{ role: "user", content: "Is it hiking weather in Paris?" }])
      }
    })
  )
})
