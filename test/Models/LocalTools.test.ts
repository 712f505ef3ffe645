import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import type { ChatMessage, ModelRequest, ToolChoice, ToolSpec } from "../../src/Models/Models.ts"
import { buildModels, collect, deltaText } from "./Harness.ts"

const lookupOrder: ToolSpec = {
  name: "lookup_order",
  description: "Finds an order by its id.",
  parameters: { type: "object", properties: { id: { type: "string" } }, required: ["id"] }
}
const getTime: ToolSpec = {
  name: "get-time",
  description: "Tells the time in a zone.",
  parameters: { type: "object", properties: { zone: { type: "string" } } }
}

const system = "You are Scout, a shop assistant."

const request = (
  messages: ReadonlyArray<ChatMessage>,
  options: { tools?: ReadonlyArray<ToolSpec>; toolChoice?: ToolChoice } = {}
): ModelRequest => ({
  model: "local",
  system,
  messages,
  maxOutputTokens: 1024,
  tools: options.tools ?? [lookupOrder, getTime],
  ...(options.toolChoice === undefined ? {} : { toolChoice: options.toolChoice })
})

const asking = (content: string, options?: { tools?: ReadonlyArray<ToolSpec>; toolChoice?: ToolChoice }) =>
  request([{ role: "user", content }], options)

/** A conversation whose first turn called `lookup_order` (as `local_call_1`) and got `results`. */
const afterCalls = (results: ReadonlyArray<{ name: string; content: string; isError: boolean; id: string }>) =>
  request([
    { role: "user", content: "Where is my order?" },
    {
      role: "assistant",
      content: "",
      toolCalls: results.map((result) => ({ id: result.id, name: result.name, arguments: { id: "SO-1" } }))
    },
    ...results.map(
      (result): ChatMessage => ({
        role: "tool",
        callId: result.id,
        name: result.name,
        content: result.content,
        isError: result.isError
      })
    )
  ])

describe("local model with tools", () => {
  it.live("calls the tool a message tells it to, with the parsed arguments", () =>
    Effect.gen(function* () {
      const models = yield* buildModels()
      const input = asking('Please call lookup_order {"id": "SO-1"} and tell me.')

      const reply = yield* models.generate(input)

      assert.deepStrictEqual(reply.toolCalls, [{ id: "local_call_1", name: "lookup_order", arguments: { id: "SO-1" } }])
      assert.strictEqual(reply.text, "")
      assert.strictEqual(reply.model, "local")
      // Output: the calls' names and argument JSON; input: what it read, as without tools.
      assert.strictEqual(reply.outputTokens, models.countTokens("lookup_order") + models.countTokens('{"id":"SO-1"}'))
      assert.strictEqual(
        reply.inputTokens,
        models.countTokens(system) + models.countTokens('Please call lookup_order {"id": "SO-1"} and tell me.')
      )
    })
  )

  it.live("makes several calls in the order the message names them, and only of offered tools", () =>
    Effect.gen(function* () {
      const models = yield* buildModels()

      const reply = yield* models.generate(
        asking(
          'First Call get-time {"zone": "UTC"}, then call refund {"id": 1}, then recall lookup_order, then ' +
            'call lookup_order {"id": "SO-2", "note": "a } brace and call get-time inside"}.'
        )
      )

      assert.deepStrictEqual(reply.toolCalls, [
        { id: "local_call_1", name: "get-time", arguments: { zone: "UTC" } },
        {
          id: "local_call_2",
          name: "lookup_order",
          arguments: { id: "SO-2", note: "a } brace and call get-time inside" }
        }
      ])
    })
  )

  it.live("calls with {} when no object follows the tool's name", () =>
    Effect.gen(function* () {
      const models = yield* buildModels()

      const reply = yield* models.generate(asking("What time is it? call get-time please"))

      assert.deepStrictEqual(reply.toolCalls, [{ id: "local_call_1", name: "get-time", arguments: {} }])
    })
  )

  it.live("passes arguments that are not JSON through as their raw text", () =>
    Effect.gen(function* () {
      const models = yield* buildModels()

      const unquoted = yield* models.generate(asking("call lookup_order {id: SO-1} now"))
      const unclosed = yield* models.generate(asking('call lookup_order {"id": "SO-1" and more'))

      assert.deepStrictEqual(unquoted.toolCalls, [
        { id: "local_call_1", name: "lookup_order", arguments: "{id: SO-1}" }
      ])
      assert.deepStrictEqual(unclosed.toolCalls, [
        { id: "local_call_1", name: "lookup_order", arguments: '{"id": "SO-1" and more' }
      ])
    })
  )

  it.live("answers from the tool results the conversation ends with, successes and failures", () =>
    Effect.gen(function* () {
      const models = yield* buildModels()
      const input = afterCalls([
        { id: "local_call_1", name: "lookup_order", content: "Order SO-1 shipped on Monday.", isError: false },
        { id: "local_call_2", name: "get-time", content: "Timed out after 5000 ms", isError: true }
      ])

      const reply = yield* models.generate(input)

      assert.deepStrictEqual(reply.toolCalls, [])
      assert.strictEqual(
        reply.text,
        '[local model] lookup_order answered: "Order SO-1 shipped on Monday." get-time failed: "Timed out after 5000 ms". ' +
          "(I am the built-in offline model; configure an OpenAI or Anthropic model for real answers.)"
      )
      assert.strictEqual(reply.outputTokens, models.countTokens(reply.text))
      // It read the earlier calls and the results as well as the turns' text.
      const callTokens = models.countTokens("lookup_order") + models.countTokens("get-time")
      const argumentTokens = 2 * models.countTokens('{"id":"SO-1"}')
      const resultTokens =
        models.countTokens("Order SO-1 shipped on Monday.") + models.countTokens("Timed out after 5000 ms")
      assert.strictEqual(
        reply.inputTokens,
        models.countTokens(system) +
          models.countTokens("Where is my order?") +
          callTokens +
          argumentTokens +
          resultTokens
      )
    })
  )

  it.live("makes the call a tool result asks for, numbering it after the earlier calls", () =>
    Effect.gen(function* () {
      const models = yield* buildModels()
      const input = afterCalls([
        {
          id: "local_call_1",
          name: "lookup_order",
          content: 'Order SO-1 is held; call get-time {"zone": "Europe/Paris"} to know when it ships.',
          isError: false
        }
      ])

      const reply = yield* models.generate(input)

      assert.strictEqual(reply.text, "")
      assert.deepStrictEqual(reply.toolCalls, [
        { id: "local_call_2", name: "get-time", arguments: { zone: "Europe/Paris" } }
      ])
    })
  )

  it.live("under toolChoice none makes no call, answering as it does without tools", () =>
    Effect.gen(function* () {
      const models = yield* buildModels()
      const message = 'call lookup_order {"id": "SO-1"}'

      const none = yield* models.generate(asking(message, { toolChoice: "none" }))
      const withoutTools = yield* models.generate(asking(message, { tools: [] }))
      const plain = yield* models.generate({
        model: "local",
        system,
        messages: [{ role: "user", content: message }],
        maxOutputTokens: 1024
      })

      assert.deepStrictEqual(none.toolCalls, [])
      assert.include(none.text, "You said:")
      assert.deepStrictEqual(none, plain)
      assert.deepStrictEqual(withoutTools, plain)
    })
  )

  it.live(
    "under toolChoice required calls the first offered tool with {} when told of none, and a named choice calls that tool",
    () =>
      Effect.gen(function* () {
        const models = yield* buildModels()

        const required = yield* models.generate(asking("Where is my order?", { toolChoice: "required" }))
        const auto = yield* models.generate(asking("Where is my order?", { toolChoice: "auto" }))
        const named = yield* models.generate(
          asking('call lookup_order {"id": "SO-1"}', { toolChoice: { tool: "get-time" } })
        )

        assert.deepStrictEqual(required.toolCalls, [{ id: "local_call_1", name: "lookup_order", arguments: {} }])
        assert.deepStrictEqual(auto.toolCalls, [])
        assert.include(auto.text, "You asked:")
        assert.deepStrictEqual(named.toolCalls, [{ id: "local_call_1", name: "get-time", arguments: {} }])
      })
  )

  it.live("streams the same calls as generate, with no text", () =>
    Effect.gen(function* () {
      const models = yield* buildModels()
      const input = asking('call get-time {"zone": "UTC"} and call lookup_order {"id": "SO-3"}')

      const generated = yield* models.generate(input)
      const { events, error } = yield* collect(models.stream(input))

      assert.isUndefined(error)
      assert.lengthOf(generated.toolCalls, 2)
      assert.deepStrictEqual(
        events.filter((event) => event._tag === "Delta"),
        []
      )
      assert.deepStrictEqual(events, [{ _tag: "Done", reply: generated }])
    })
  )

  it.live("streams an answer from tool results word by word, as generate gives it", () =>
    Effect.gen(function* () {
      const models = yield* buildModels()
      const input = afterCalls([
        { id: "local_call_1", name: "lookup_order", content: "Order SO-1 shipped.", isError: false }
      ])

      const generated = yield* models.generate(input)
      const { events, error } = yield* collect(models.stream(input))

      assert.isUndefined(error)
      assert.include(generated.text, 'lookup_order answered: "Order SO-1 shipped."')
      assert.strictEqual(deltaText(events), generated.text)
      assert.deepStrictEqual(events.at(-1), { _tag: "Done", reply: generated })
    })
  )

  it.live("gives the same reply to the same input", () =>
    Effect.gen(function* () {
      const models = yield* buildModels()
      const calls = asking('call lookup_order {"id": "SO-1"} call get-time {"zone": "UTC"} call get-time')
      const results = afterCalls([
        { id: "local_call_1", name: "lookup_order", content: "Order SO-1 shipped.", isError: false }
      ])

      const first = yield* Effect.all([models.generate(calls), models.generate(results)])
      const second = yield* Effect.all([models.generate(calls), models.generate(results)])

      assert.deepStrictEqual(second, first)
      assert.deepStrictEqual(
        first[0].toolCalls.map((call) => call.id),
        ["local_call_1", "local_call_2", "local_call_3"]
      )
    })
  )
})
