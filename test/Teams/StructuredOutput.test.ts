import { assert, describe, layer } from "@effect/vitest"
import { Duration, Effect, Result } from "effect"
import { AgentId } from "../../src/Domain/Ids.ts"
import type { TeamRunWithTranscript } from "../../src/Teams/Api.ts"
import { compile } from "../../src/Tools/JsonSchema.ts"
import { FakeOpenAi, openaiKey } from "../support/FakeOpenAi.ts"
import { awaitRun, createTeam, startRun } from "../support/Teams.ts"
import * as TestServer from "../support/TestServer.ts"
import { type Account, createAgent, createKey, signUp } from "../support/TestServer.ts"

// Structured output in team runs (docs/teams.md#structured-output): a member
// whose agent has a response format speaks JSON of its schema; a reply that
// still does not match after being told what was wrong fails the run naming
// the path; a closing turn that does not match ends the run quietly.

const model = "openai/gpt-4o-mini"

const orderSchema = {
  type: "object",
  properties: { id: { type: "string" }, shipped: { type: "boolean" } },
  required: ["id", "shipped"],
  additionalProperties: false
}
const order = { type: "json_schema", name: "order", schema: orderSchema }

// Built by the local model from the `NAME: value` lines of the mission, shown in its prompt.
const noteSchema = {
  type: "object",
  properties: {
    topic: { type: "string", minLength: 3 },
    people: { type: "integer", minimum: 2 },
    urgent: { type: "boolean" },
    tags: { type: "array", items: { type: "string" }, minItems: 1 }
  },
  required: ["topic", "people", "urgent", "tags"],
  additionalProperties: false
}
const note = { type: "json_schema", name: "note", schema: noteSchema }

const assertValid = (schema: { readonly [key: string]: unknown }, text: string) => {
  const problems = Result.getOrThrow(compile(schema))(JSON.parse(text))
  assert.deepStrictEqual(problems, [], text)
}

/** A round-robin team of agents (each `{ model, responseFormat? }`, named A, B...), in that order. */
const teamOfAgents = (
  account: Account,
  members: ReadonlyArray<{ readonly model: string; readonly responseFormat?: unknown }>,
  team: { readonly maxTurns?: number } = {}
) =>
  Effect.gen(function* () {
    const agents: Array<{ id: string }> = []
    for (const [i, member] of members.entries()) {
      agents.push(yield* createAgent(account, { name: String.fromCharCode(65 + i), ...member }))
    }
    const created = yield* createTeam(account, {
      members: agents.map((agent) => ({ agentId: AgentId.make(agent.id), role: "" })),
      ...team
    })
    return { team: created, agents }
  })

const run = (account: Account, teamId: string, mission: string) =>
  Effect.gen(function* () {
    const { key } = yield* createKey(account, ["teams"])
    return yield* awaitRun(account, teamId, yield* startRun(key, teamId, mission))
  })

const contents = (run: typeof TeamRunWithTranscript.Type) => run.transcript.data.map((entry) => entry.content)

/** The system prompt, last user message and response format of each request the fake received. */
const requestsOf = (fake: FakeOpenAi["Service"]) =>
  fake.requests.map((request) => {
    const messages: ReadonlyArray<{ readonly role: string; readonly content: string }> = request.body.messages
    return {
      system: messages.find((m) => m.role === "system")?.content ?? "",
      messages,
      responseFormat: request.body.response_format
    }
  })

layer(TestServer.layerWithFakeOpenAi(openaiKey, { teamClosingTurnTimeout: Duration.seconds(5) }), {
  excludeTestServices: true
})("structured output in team runs", (it) => {
  describe("on the local model", () => {
    it.effect("a member with a format speaks JSON of its schema; the run finishes as before", () =>
      Effect.gen(function* () {
        const account = yield* signUp()
        const { team, agents } = yield* teamOfAgents(account, [
          { model: "local", responseFormat: note },
          { model: "local" }
        ])
        const done = yield* run(account, team.id, "Plan the picnic\ntopic: river picnic\npeople: 12\nurgent: true")

        assert.strictEqual(done.status, "completed", JSON.stringify(done))
        assert.strictEqual(done.stopReason, "done")
        assert.deepStrictEqual(
          done.transcript.data.map((entry) => entry.agentId),
          [agents[0]!.id, agents[1]!.id]
        )
        const [json, text] = contents(done)
        assertValid(noteSchema, json!)
        const value = JSON.parse(json!)
        assert.deepStrictEqual([value.topic, value.people, value.urgent], ["river picnic", 12, true])
        assert.strictEqual(json, JSON.stringify(JSON.parse(json!)), "stored as the JSON text")
        assert.include(text!, "FINAL ANSWER:")
        assert.match(done.result ?? "", /^Every member has spoken on /)
      })
    )

    it.effect("a JSON turn never ends the run; at the limit the closing turn's JSON is the result", () =>
      Effect.gen(function* () {
        const account = yield* signUp()
        const { team } = yield* teamOfAgents(account, [{ model: "local", responseFormat: note }], { maxTurns: 1 })
        const done = yield* run(account, team.id, "Count heads\ntopic: heads\npeople: 3")

        assert.strictEqual(done.status, "completed", JSON.stringify(done))
        assert.strictEqual(done.stopReason, "max_turns")
        assert.strictEqual(done.turns, 2)
        const [first, closing] = contents(done)
        assertValid(noteSchema, first!)
        assertValid(noteSchema, closing!)
        assert.strictEqual(done.result, closing)
        assert.strictEqual(JSON.parse(done.result!).people, 3)
      })
    )
  })

  describe("on a provider that can miss the format", () => {
    it.effect("a member answering JSON of another shape twice fails the run, naming the format and the paths", () =>
      Effect.gen(function* () {
        const fake = yield* FakeOpenAi
        fake.reset()
        const account = yield* signUp()
        const { team } = yield* teamOfAgents(account, [{ model }, { model, responseFormat: order }])
        fake.script({ text: "Looking into it." }, { text: '{"id": 5, "shipped": "yes"}', times: 2 })
        const failed = yield* run(account, team.id, "Find order SO-1")

        assert.strictEqual(failed.status, "failed", JSON.stringify(failed))
        assert.strictEqual(failed.stopReason, "error")
        assert.strictEqual(
          failed.error,
          'Turn 1: the reply does not match the response format "order": /id: must be string; /shipped: must be boolean'
        )
        assert.isNull(failed.result)
        assert.strictEqual(failed.turns, 1)
        assert.deepStrictEqual(contents(failed), ["Looking into it."])
        const sent = requestsOf(fake)
        assert.strictEqual(sent.length, 3, "the member without a format once, the one with it twice")
        assert.isUndefined(sent[0]!.responseFormat)
        for (const request of sent.slice(1)) {
          assert.deepStrictEqual(request.responseFormat, {
            type: "json_schema",
            // Strict: the schema meets OpenAI's strict rules.
            json_schema: { name: "order", schema: orderSchema, strict: true }
          })
        }
        // The retry is told what was wrong, after the reply it got.
        const retry = sent[2]!.messages
        assert.deepStrictEqual(retry.at(-2), { role: "assistant", content: '{"id": 5, "shipped": "yes"}' })
        assert.strictEqual(retry.at(-1)!.role, "user")
        assert.include(retry.at(-1)!.content, "/id: must be string; /shipped: must be boolean")
      })
    )

    it.effect("a member answering text, then JSON of its schema when told: the turn is the JSON, the run goes on", () =>
      Effect.gen(function* () {
        const fake = yield* FakeOpenAi
        fake.reset()
        const account = yield* signUp()
        const { team } = yield* teamOfAgents(account, [{ model, responseFormat: order }, { model }])
        const valid = '{"id":"SO-1","shipped":true}'
        fake.script(
          { text: "FINAL ANSWER: it shipped", usage: { input: 100, output: 5 } },
          { text: valid, usage: { input: 130, output: 9 } },
          { text: "Good.\nFINAL ANSWER: SO-1 shipped", usage: { input: 90, output: 6 } }
        )
        const done = yield* run(account, team.id, "Find order SO-1")

        assert.strictEqual(done.status, "completed", JSON.stringify(done))
        assert.strictEqual(done.stopReason, "done")
        assert.strictEqual(done.result, "SO-1 shipped")
        assert.deepStrictEqual(contents(done), [valid, "Good.\nFINAL ANSWER: SO-1 shipped"])
        assertValid(orderSchema, contents(done)[0]!)
        // The turn's tokens are both of its calls.
        assert.deepStrictEqual(
          done.transcript.data.map((entry) => entry.tokens),
          [244, 96]
        )
        assert.strictEqual(done.tokensUsed, 340)
        const sent = requestsOf(fake)
        assert.strictEqual(sent.length, 3)
        assert.include(sent[1]!.messages.at(-1)!.content, "(root): The reply is not JSON")
        // The member held to JSON is told so; the next speaker sees the JSON in the transcript.
        assert.include(sent[0]!.system, 'Reply with only JSON matching the JSON Schema "order"')
        assert.notInclude(sent[2]!.system, "JSON Schema")
        assert.isUndefined(sent[2]!.responseFormat)
        assert.include(sent[2]!.messages.at(-1)!.content, `A: ${valid}`)
      })
    )

    it.effect("a closing turn that misses its format is dropped: the run completes with the last turn", () =>
      Effect.gen(function* () {
        const fake = yield* FakeOpenAi
        fake.reset()
        const account = yield* signUp()
        const { team } = yield* teamOfAgents(account, [{ model, responseFormat: order }], { maxTurns: 1 })
        const valid = '{"id":"SO-2","shipped":false}'
        fake.script({ text: valid }, { text: "Closing words.", times: 2 })
        const done = yield* run(account, team.id, "Find order SO-2")

        assert.strictEqual(done.status, "completed", JSON.stringify(done))
        assert.strictEqual(done.stopReason, "max_turns")
        assert.strictEqual(done.turns, 1)
        assert.strictEqual(done.result, valid)
        assert.deepStrictEqual(contents(done), [valid])
        const sent = requestsOf(fake)
        assert.strictEqual(sent.length, 3, "the turn, then the closing turn and its retry")
        assert.include(sent[1]!.messages.at(-1)!.content, "has reached its limit")
        assert.include(sent[1]!.system, "it is the mission's final answer")
        assert.deepStrictEqual(sent[2]!.responseFormat, sent[1]!.responseFormat)
      })
    )
  })
})
