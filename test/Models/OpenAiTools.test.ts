import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import type { ModelEvent, ModelRequest, ToolSpec } from "../../src/Models/Models.ts"
import { FakeOpenAi } from "../support/FakeOpenAi.ts"
import { buildModels, collect, deltaText, openaiKey, someKey } from "./Harness.ts"

const weather: ToolSpec = {
  name: "get_weather",
  description: "The forecast for a place.",
  parameters: {
    type: "object",
    properties: { place: { type: "string" }, days: { type: "integer" } },
    required: ["place"]
  }
}

const trail: ToolSpec = {
  name: "find_trail",
  description: "Trails near a place.",
  parameters: { type: "object", properties: { near: { type: "string" } }, required: ["near"] }
}

const request: ModelRequest = {
  model: "openai/gpt-4o-mini",
  system: "You are Scout, a hiking guide.",
  messages: [{ role: "user", content: "Is the ridge trail good tomorrow?" }],
  maxOutputTokens: 300,
  tools: [weather, trail]
}

/** The `tools` field OpenAI expects for `specs`. */
const wireTools = (...specs: ReadonlyArray<ToolSpec>) =>
  specs.map((spec) => ({
    type: "function",
    function: { name: spec.name, description: spec.description, parameters: spec.parameters }
  }))

// Unicode (accents, an emoji: a surrogate pair) and escaped quotes and
// backslashes, so 1-, 2- and 3-character pieces split escapes and characters.
const trickyArguments = { place: 'Mont "Blanc" \\ Chamonix — Zoë 🏔️', days: 2, note: "line\nbreak\t\u0007" }

const setup = () =>
  Effect.gen(function* () {
    const fake = yield* FakeOpenAi.make({ apiKey: openaiKey })
    const models = yield* buildModels({ openaiBaseUrl: fake.url, openaiApiKey: someKey(openaiKey), modelMaxRetries: 0 })
    return { fake, models }
  })

const doneReply = (events: ReadonlyArray<ModelEvent>) => {
  const done = events.filter((event) => event._tag === "Done")
  assert.strictEqual(done.length, 1)
  return done[0]!.reply
}

describe("OpenAI provider with tools", () => {
  it.live("offers the tools and reads two calls of one turn, in order, ids kept, arguments parsed", () =>
    Effect.gen(function* () {
      const { fake, models } = yield* setup()
      fake.script({
        toolCalls: [
          { id: "call_weather1", name: "get_weather", arguments: { place: "Chamonix", days: 1 } },
          { id: "call_trail1", name: "find_trail", arguments: { near: "Chamonix" } }
        ],
        usage: { input: 80, output: 30 }
      })

      const reply = yield* models.generate(request)

      assert.deepStrictEqual(reply, {
        text: "",
        model: "openai/gpt-4o-mini",
        inputTokens: 80,
        outputTokens: 30,
        toolCalls: [
          { id: "call_weather1", name: "get_weather", arguments: { place: "Chamonix", days: 1 } },
          { id: "call_trail1", name: "find_trail", arguments: { near: "Chamonix" } }
        ]
      })
      assert.deepStrictEqual(fake.requests[0]!.body, {
        model: "gpt-4o-mini",
        max_tokens: 300,
        messages: [
          { role: "system", content: "You are Scout, a hiking guide." },
          { role: "user", content: "Is the ridge trail good tomorrow?" }
        ],
        tools: wireTools(weather, trail),
        tool_choice: "auto"
      })
    })
  )

  it.live("keeps text that comes with calls", () =>
    Effect.gen(function* () {
      const { fake, models } = yield* setup()
      fake.script({ text: "Let me check.", toolCalls: [{ id: "call_1", name: "get_weather", arguments: {} }] })

      const reply = yield* models.generate(request)

      assert.strictEqual(reply.text, "Let me check.")
      assert.deepStrictEqual(reply.toolCalls, [{ id: "call_1", name: "get_weather", arguments: {} }])
    })
  )

  it.live("streams two calls, their arguments put together exactly from pieces split mid-token", () =>
    Effect.gen(function* () {
      const { fake, models } = yield* setup()
      for (const argumentChunkChars of [1, 2, 3]) {
        fake.script({
          text: "Checking both.",
          argumentChunkChars,
          toolCalls: [
            { id: "call_a", name: "get_weather", arguments: trickyArguments },
            { id: "call_b", name: "find_trail", arguments: { near: 'Zoë\'s "hut"' } }
          ],
          usage: { input: 50, output: 20 }
        })

        const { events, error } = yield* collect(models.stream(request))

        assert.isUndefined(error)
        assert.strictEqual(deltaText(events), "Checking both.")
        assert.deepStrictEqual(doneReply(events), {
          text: "Checking both.",
          model: "openai/gpt-4o-mini",
          inputTokens: 50,
          outputTokens: 20,
          toolCalls: [
            { id: "call_a", name: "get_weather", arguments: trickyArguments },
            { id: "call_b", name: "find_trail", arguments: { near: 'Zoë\'s "hut"' } }
          ]
        })
      }
      const body = fake.requests[0]!.body
      assert.strictEqual(body.stream, true)
      assert.deepStrictEqual(body.tools, wireTools(weather, trail))
      assert.strictEqual(body.tool_choice, "auto")
    })
  )

  it.live("streams calls whose pieces come interleaved by index", () =>
    Effect.gen(function* () {
      const { fake, models } = yield* setup()
      const calls = [
        { id: "call_1", name: "get_weather", arguments: { place: "Zermatt", days: 3 } },
        { id: "call_2", name: "find_trail", arguments: { near: 'Saas-Fee "village"' } },
        { id: "call_3", name: "get_weather", arguments: trickyArguments }
      ]
      fake.script({ toolCalls: calls, interleaveToolCalls: true, argumentChunkChars: 2 })

      const { events, error } = yield* collect(models.stream(request))

      assert.isUndefined(error)
      assert.deepStrictEqual(doneReply(events).toolCalls, calls)
      assert.strictEqual(deltaText(events), "")
    })
  )

  it.live("gives arguments that are not JSON back as their text", () =>
    Effect.gen(function* () {
      const { fake, models } = yield* setup()
      const broken = '{"place": "Chamonix", "days": '
      fake.script(
        { toolCalls: [{ id: "call_x", name: "get_weather", arguments: broken }] },
        { toolCalls: [{ id: "call_y", name: "get_weather", arguments: broken }] }
      )

      const reply = yield* models.generate(request)
      const { events, error } = yield* collect(models.stream(request))

      assert.deepStrictEqual(reply.toolCalls, [{ id: "call_x", name: "get_weather", arguments: broken }])
      assert.isUndefined(error)
      assert.deepStrictEqual(doneReply(events).toolCalls, [{ id: "call_y", name: "get_weather", arguments: broken }])
    })
  )

  it.live("reads empty arguments as no arguments", () =>
    Effect.gen(function* () {
      const { fake, models } = yield* setup()
      fake.script(
        { toolCalls: [{ id: "call_e", name: "find_trail", arguments: "" }] },
        { toolCalls: [{ id: "call_f", name: "find_trail", arguments: "" }] }
      )

      const reply = yield* models.generate(request)
      const { events } = yield* collect(models.stream(request))

      assert.deepStrictEqual(reply.toolCalls, [{ id: "call_e", name: "find_trail", arguments: {} }])
      assert.deepStrictEqual(doneReply(events).toolCalls, [{ id: "call_f", name: "find_trail", arguments: {} }])
    })
  )

  it.live("sends the calls and their results back as OpenAI's assistant tool_calls and tool messages", () =>
    Effect.gen(function* () {
      const { fake, models } = yield* setup()
      fake.script({ text: "Sunny, and the ridge trail is open." }, { text: "Still sunny." })
      const followUp: ModelRequest = {
        ...request,
        messages: [
          ...request.messages,
          {
            role: "assistant",
            content: "",
            toolCalls: [
              { id: "call_w", name: "get_weather", arguments: trickyArguments },
              // A call whose arguments were not JSON goes back as the text the model sent.
              { id: "call_t", name: "find_trail", arguments: '{"near": "Cham' }
            ]
          },
          { role: "tool", callId: "call_w", name: "get_weather", content: '{"sky":"sunny","high":21}', isError: false },
          { role: "tool", callId: "call_t", name: "find_trail", content: "Invalid arguments: not JSON", isError: true },
          {
            role: "assistant",
            content: "Sunny, and the ridge trail is open. Checking again.",
            toolCalls: [{ id: "call_w2", name: "get_weather", arguments: {} }]
          },
          { role: "tool", callId: "call_w2", name: "get_weather", content: "sunny", isError: false }
        ]
      }

      const reply = yield* models.generate(followUp)
      const { error } = yield* collect(models.stream(followUp))

      assert.strictEqual(reply.text, "Sunny, and the ridge trail is open.")
      assert.isUndefined(error)
      const expected = [
        { role: "system", content: "You are Scout, a hiking guide." },
        { role: "user", content: "Is the ridge trail good tomorrow?" },
        {
          role: "assistant",
          content: null,
          tool_calls: [
            {
              id: "call_w",
              type: "function",
              function: { name: "get_weather", arguments: JSON.stringify(trickyArguments) }
            },
            { id: "call_t", type: "function", function: { name: "find_trail", arguments: '{"near": "Cham' } }
          ]
        },
        { role: "tool", tool_call_id: "call_w", content: '{"sky":"sunny","high":21}' },
        { role: "tool", tool_call_id: "call_t", content: "Invalid arguments: not JSON" },
        {
          role: "assistant",
          content: "Sunny, and the ridge trail is open. Checking again.",
          tool_calls: [{ id: "call_w2", type: "function", function: { name: "get_weather", arguments: "{}" } }]
        },
        { role: "tool", tool_call_id: "call_w2", content: "sunny" }
      ]
      assert.deepStrictEqual(fake.requests[0]!.body.messages, expected)
      assert.deepStrictEqual(fake.requests[1]!.body.messages, expected)
      // The arguments text is the arguments' JSON, exactly.
      assert.deepStrictEqual(
        JSON.parse(fake.requests[0]!.body.messages[2].tool_calls[0].function.arguments),
        trickyArguments
      )
    })
  )

  it.live("sends each tool choice as OpenAI spells it", () =>
    Effect.gen(function* () {
      const { fake, models } = yield* setup()
      const choices: ReadonlyArray<[ModelRequest["toolChoice"], unknown]> = [
        [undefined, "auto"],
        ["auto", "auto"],
        ["none", "none"],
        ["required", "required"],
        [{ tool: "find_trail" }, { type: "function", function: { name: "find_trail" } }]
      ]
      for (const [toolChoice] of choices) {
        yield* models.generate({ ...request, toolChoice })
        yield* collect(models.stream({ ...request, toolChoice }))
      }

      assert.strictEqual(fake.requests.length, choices.length * 2)
      choices.forEach(([, wire], at) => {
        for (const sent of [fake.requests[2 * at]!, fake.requests[2 * at + 1]!]) {
          assert.deepStrictEqual(sent.body.tool_choice, wire)
          assert.deepStrictEqual(sent.body.tools, wireTools(weather, trail))
        }
      })
    })
  )

  it.live("sends neither tools nor tool_choice when no tools are offered", () =>
    Effect.gen(function* () {
      const { fake, models } = yield* setup()
      const bare = { ...request, tools: undefined }

      yield* models.generate(bare)
      yield* collect(models.stream(bare))
      yield* models.generate({ ...request, tools: [], toolChoice: "required" })

      assert.strictEqual(fake.requests.length, 3)
      for (const sent of fake.requests) {
        assert.notProperty(sent.body, "tools")
        assert.notProperty(sent.body, "tool_choice")
      }
      assert.deepStrictEqual(Object.keys(fake.requests[0]!.body), ["model", "messages", "max_tokens"])
    })
  )

  it.live("fails a stream cut in the middle of a call's arguments, giving out no call", () =>
    Effect.gen(function* () {
      const { fake, models } = yield* setup()
      fake.script({
        toolCalls: [{ id: "call_cut", name: "get_weather", arguments: trickyArguments }],
        dropAfter: 4
      })

      const { events, error } = yield* collect(models.stream(request))

      assert.strictEqual(error?.reason, "ProviderError")
      assert.deepStrictEqual(events, [])
    })
  )

  it.live("retries a stream cut in a call's arguments, and the call comes once", () =>
    Effect.gen(function* () {
      const fake = yield* FakeOpenAi.make({ apiKey: openaiKey })
      const models = yield* buildModels({
        openaiBaseUrl: fake.url,
        openaiApiKey: someKey(openaiKey),
        modelMaxRetries: 1
      })
      const call = { id: "call_again", name: "get_weather", arguments: { place: "Zermatt" } }
      fake.script({ toolCalls: [call], dropAfter: 3 }, { toolCalls: [call] })

      const { events, error } = yield* collect(models.stream(request))

      assert.isUndefined(error)
      assert.strictEqual(fake.requests.length, 2)
      assert.deepStrictEqual(doneReply(events).toolCalls, [call])
    })
  )
})
