import { assert, layer } from "@effect/vitest"
import { Duration, Effect } from "effect"
import { AgentId } from "../../src/Domain/Ids.ts"
import { Conflict } from "../../src/Domain/Problems.ts"
import type { TeamRunWithTranscript } from "../../src/Teams/Api.ts"
import { eventually } from "../support/Eventually.ts"
import { FakeOpenAi, openaiKey } from "../support/FakeOpenAi.ts"
import { quietWindow } from "../support/QuietWindow.ts"
import { awaitRun, startRun, teamOf } from "../support/Teams.ts"
import * as TestServer from "../support/TestServer.ts"
import { bearer, createKey, signUp, TestClient } from "../support/TestServer.ts"

const model = "openai/gpt-4o-mini"

/** The user prompt of every request the fake received, and the system prompt, oldest first. */
const prompts = (fake: FakeOpenAi["Service"]) =>
  fake.requests.map((request) => {
    // The provider's wire format, which the fake records as it came.
    const messages: ReadonlyArray<{ readonly role: string; readonly content: string }> = request.body.messages
    return { system: messages.find((m) => m.role === "system")?.content, user: messages.at(-1)!.content }
  })

const transcriptOf = (run: typeof TeamRunWithTranscript.Type) =>
  run.transcript.data.map((entry) => ({ index: entry.index, agentId: entry.agentId, content: entry.content }))

layer(TestServer.layerWithFakeOpenAi(openaiKey, { teamClosingTurnTimeout: Duration.seconds(5) }), {
  excludeTestServices: true
})("team runs", (it) => {
  it.effect("round robin on the local model: every member speaks in order, the last declares the mission done", () =>
    Effect.gen(function* () {
      const account = yield* signUp()
      const { key } = yield* createKey(account, ["teams"])
      const { team, agents } = yield* teamOf(account, "local", 3)
      const runId = yield* startRun(key, team.id, "Plan a picnic by the river")
      const run = yield* awaitRun(account, team.id, runId)
      assert.strictEqual(run.status, "completed", JSON.stringify(run))
      assert.strictEqual(run.stopReason, "done")
      assert.strictEqual(run.turns, 3)
      assert.strictEqual(run.mode, "chat")
      assert.strictEqual(run.mission, "Plan a picnic by the river")
      assert.strictEqual(run.error, null)
      assert.strictEqual(run.result, `Every member has spoken on "Plan a picnic by the river".`)
      assert.deepStrictEqual(
        run.transcript.data.map((e) => [e.index, e.agentId, e.role]),
        [
          [0, agents[0]!.id, "role 0"],
          [1, agents[1]!.id, "role 1"],
          [2, agents[2]!.id, "role 2"]
        ]
      )
      assert.include(run.transcript.data[0]!.content, "A here:")
      assert.notInclude(run.transcript.data[1]!.content, "FINAL ANSWER")
      assert.include(run.transcript.data[2]!.content, "FINAL ANSWER:")
      assert.strictEqual(run.transcript.total, 3)
      assert.strictEqual(run.transcript.nextCursor, null)
      for (const entry of run.transcript.data) assert.isAbove(entry.tokens, 0)
      assert.strictEqual(
        run.tokensUsed,
        run.transcript.data.reduce((n, e) => n + e.tokens, 0)
      )
      assert.isAtLeast(run.durationMs ?? -1, 0)
      assert.instanceOf(run.completedAt, Date)
    })
  )

  it.effect(
    "leader on the local model: the leader opens, picks each member who has not spoken, and writes the final answer",
    () =>
      Effect.gen(function* () {
        const account = yield* signUp()
        const { key } = yield* createKey(account, ["teams"])
        const { team, agents } = yield* teamOf(account, "local", 3, { turnTaking: "leader" })
        const [a, b, c] = agents.map((agent) => agent.id)
        // Lead from the last member: order of picks is member order among those who have not spoken.
        const api = yield* TestServer.apiClient(account.token)
        const led = yield* api.teams.update({
          params: { id: team.id },
          payload: { leaderAgentId: AgentId.make(c!) }
        })
        assert.strictEqual(led.leaderAgentId, c)
        const runId = yield* startRun(key, team.id, "Name the boat")
        const run = yield* awaitRun(account, team.id, runId)
        assert.strictEqual(run.status, "completed", JSON.stringify(run))
        assert.strictEqual(run.stopReason, "done")
        assert.deepStrictEqual(
          run.transcript.data.map((e) => e.agentId),
          [c, a, c, b, c]
        )
        assert.include(run.transcript.data[0]!.content, "NEXT: A")
        assert.include(run.transcript.data[2]!.content, "NEXT: B")
        assert.strictEqual(run.result, `Every member has spoken on "Name the boat".`)
      })
  )

  it.effect(
    "round robin on an OpenAI-compatible provider: prompts carry instructions, mission, roles and transcript; FINAL ANSWER ends it",
    () =>
      Effect.gen(function* () {
        const fake = yield* FakeOpenAi
        fake.reset()
        const account = yield* signUp()
        const { key } = yield* createKey(account, ["teams"])
        const { team, agents } = yield* teamOf(account, model, 2)
        fake.script(
          { text: "Bread and cheese.", usage: { input: 100, output: 10 } },
          { text: "And lemonade.\nFINAL ANSWER: bread, cheese and lemonade", usage: { input: 120, output: 12 } }
        )
        const runId = yield* startRun(key, team.id, "Pack the basket")
        const run = yield* awaitRun(account, team.id, runId)
        assert.strictEqual(run.status, "completed", JSON.stringify(run))
        assert.strictEqual(run.stopReason, "done")
        assert.strictEqual(run.result, "bread, cheese and lemonade")
        assert.strictEqual(run.turns, 2)
        assert.strictEqual(run.tokensUsed, 242)
        assert.deepStrictEqual(transcriptOf(run), [
          { index: 0, agentId: agents[0]!.id, content: "Bread and cheese." },
          { index: 1, agentId: agents[1]!.id, content: "And lemonade.\nFINAL ANSWER: bread, cheese and lemonade" }
        ])
        assert.deepStrictEqual(
          run.transcript.data.map((e) => e.tokens),
          [110, 132]
        )
        const [first, second] = prompts(fake)
        assert.include(first!.system ?? "", "You are A.")
        assert.include(first!.system ?? "", "FINAL ANSWER:")
        assert.include(first!.user, "Pack the basket")
        assert.include(first!.user, `- A (agentId ${agents[0]!.id}): role 0`)
        assert.include(first!.user, `- B (agentId ${agents[1]!.id}): role 1`)
        assert.include(first!.user, "(nobody has spoken yet)")
        assert.include(second!.system ?? "", "You are B.")
        assert.include(second!.user, "[0] A: Bread and cheese.")
        assert.strictEqual(fake.requests.length, 2)
      })
  )

  it.effect(
    "leader on a provider: picks by name, an invalid or self pick falls back to round robin, only the leader ends the run",
    () =>
      Effect.gen(function* () {
        const fake = yield* FakeOpenAi
        fake.reset()
        const account = yield* signUp()
        const { key } = yield* createKey(account, ["teams"])
        const { team, agents } = yield* teamOf(account, model, 3, { turnTaking: "leader" })
        const [l, x, y] = agents.map((agent) => agent.id)
        fake.script(
          { text: "Let us start.\nNEXT: C" },
          { text: "C speaks." },
          { text: "Hmm.\nNEXT: Nobody" },
          { text: "B speaks." },
          { text: "Again me?\nNEXT: A" },
          { text: "C again.\nFINAL ANSWER: not mine to give" },
          { text: "Done.\nFINAL ANSWER: the leader's answer" }
        )
        const runId = yield* startRun(key, team.id, "Decide")
        const run = yield* awaitRun(account, team.id, runId)
        assert.strictEqual(run.status, "completed", JSON.stringify(run))
        assert.deepStrictEqual(
          run.transcript.data.map((e) => e.agentId),
          [l, y, l, x, l, y, l]
        )
        assert.strictEqual(run.stopReason, "done")
        assert.strictEqual(run.result, "the leader's answer")
        const leaderPrompt = prompts(fake)[0]!
        assert.include(leaderPrompt.system ?? "", "NEXT:")
        assert.include(leaderPrompt.user, "[leader]")
      })
  )

  it.effect("max_turns: the service stops the room and one closing turn writes the result", () =>
    Effect.gen(function* () {
      const fake = yield* FakeOpenAi
      fake.reset()
      const account = yield* signUp()
      const { key } = yield* createKey(account, ["teams"])
      const { team } = yield* teamOf(account, model, 2, { maxTurns: 3 })
      fake.script({ text: "talk", times: 3 }, { text: "FINAL ANSWER: the summary" })
      const runId = yield* startRun(key, team.id, "Chat forever")
      const run = yield* awaitRun(account, team.id, runId)
      assert.strictEqual(run.status, "completed", JSON.stringify(run))
      assert.strictEqual(run.stopReason, "max_turns")
      assert.strictEqual(run.result, "the summary")
      assert.strictEqual(run.turns, 4)
      assert.strictEqual(fake.requests.length, 4)
      assert.include(prompts(fake)[3]!.user, "has reached its limit (the most turns the team allows)")
    })
  )

  it.effect("token_budget: a turn that would cross the team's budget is not asked; the run closes", () =>
    Effect.gen(function* () {
      const fake = yield* FakeOpenAi
      fake.reset()
      const account = yield* signUp()
      const { key } = yield* createKey(account, ["teams"])
      const { team } = yield* teamOf(account, model, 2, { tokenBudget: 2_000 })
      fake.script(
        { text: "expensive", usage: { input: 1_500, output: 200 } },
        { text: "FINAL ANSWER: within budget", usage: { input: 50, output: 5 } }
      )
      const runId = yield* startRun(key, team.id, "Spend")
      const run = yield* awaitRun(account, team.id, runId)
      assert.strictEqual(run.status, "completed", JSON.stringify(run))
      assert.strictEqual(run.stopReason, "token_budget")
      assert.strictEqual(run.result, "within budget")
      assert.strictEqual(run.turns, 2)
      assert.strictEqual(run.tokensUsed, 1_755)
      assert.include(prompts(fake)[1]!.user, "the team's token budget")
    })
  )

  it.effect("timeout: a turn cut at the run's deadline; the closing turn still answers", () =>
    Effect.gen(function* () {
      const fake = yield* FakeOpenAi
      fake.reset()
      const account = yield* signUp()
      const { key } = yield* createKey(account, ["teams"])
      const { team } = yield* teamOf(account, model, 2, { timeoutMs: 1_500 })
      fake.script({ hang: true }, { text: "FINAL ANSWER: out of time" })
      const startedAt = Date.now()
      const runId = yield* startRun(key, team.id, "Slowly")
      const run = yield* awaitRun(account, team.id, runId)
      assert.strictEqual(run.status, "completed", JSON.stringify(run))
      assert.strictEqual(run.stopReason, "timeout")
      assert.strictEqual(run.result, "out of time")
      assert.strictEqual(run.turns, 1)
      assert.isBelow(Date.now() - startedAt, 8_000)
    })
  )

  it.effect("error: a provider failure fails the run with the reason", () =>
    Effect.gen(function* () {
      const fake = yield* FakeOpenAi
      fake.reset()
      const account = yield* signUp()
      const { key } = yield* createKey(account, ["teams"])
      const { team } = yield* teamOf(account, model, 2)
      fake.script({ text: "fine" }, { status: 400, message: "bad request from the fake" })
      const runId = yield* startRun(key, team.id, "Break")
      const run = yield* awaitRun(account, team.id, runId)
      assert.strictEqual(run.status, "failed", JSON.stringify(run))
      assert.strictEqual(run.stopReason, "error")
      assert.include(run.error ?? "", "bad request from the fake")
      assert.strictEqual(run.result, null)
      assert.strictEqual(run.turns, 1)
    })
  )

  it.effect("cancelled: cancel interrupts the turn in flight; the run stays cancelled, a second cancel is 409", () =>
    Effect.gen(function* () {
      const fake = yield* FakeOpenAi
      fake.reset()
      const account = yield* signUp()
      const { key } = yield* createKey(account, ["teams"])
      const { team } = yield* teamOf(account, model, 2)
      fake.setDefault({ hang: true })
      const runId = yield* startRun(key, team.id, "Wait")
      yield* eventually(
        Effect.sync(() => assert.isAbove(fake.requests.length, 0, "the turn reached the model")),
        { timeoutMs: 5_000 }
      )
      assert.strictEqual(fake.requests.length, 1)
      const params = { id: team.id, runId }
      const cancelled = yield* (yield* TestServer.apiClient(key, "x-api-key")).publicTeams.cancel({ params })
      assert.strictEqual(cancelled.success, true)
      assert.strictEqual(cancelled.data.status, "cancelled")
      assert.strictEqual(cancelled.data.stopReason, "cancelled")
      const again = yield* Effect.flip((yield* TestServer.apiClient(key)).v1Teams.cancel({ params }))
      assert.instanceOf(again, Conflict)
      assert.strictEqual(again.status, 409)
      fake.setDefault({})
      // A deliberate quiet window: nothing moves the cancelled run on.
      yield* quietWindow(500)
      const run = yield* awaitRun(account, team.id, runId)
      assert.strictEqual(run.status, "cancelled")
      assert.strictEqual(run.stopReason, "cancelled")
    })
  )

  it.effect("deleting a team cancels its unfinished runs", () =>
    Effect.gen(function* () {
      const fake = yield* FakeOpenAi
      fake.reset()
      const account = yield* signUp()
      const { key } = yield* createKey(account, ["teams"])
      const { team } = yield* teamOf(account, model, 2)
      fake.setDefault({ hang: true })
      const runId = yield* startRun(key, team.id, "Wait")
      yield* eventually(
        Effect.sync(() => assert.isAbove(fake.requests.length, 0, "the turn reached the model")),
        { timeoutMs: 5_000 }
      )
      assert.strictEqual(fake.requests.length, 1)
      const id = team.id
      const [, removed] = yield* (yield* TestServer.apiClient(account.token)).teams.remove({
        params: { id },
        responseMode: "decoded-and-response"
      })
      assert.strictEqual(removed.status, 204)
      fake.setDefault({})
      // The run stays readable, as it ended.
      const read = yield* (yield* TestServer.apiClient(key)).v1Teams.getRun({ params: { id, runId } })
      assert.deepStrictEqual([read.data.status, read.data.stopReason], ["cancelled", "cancelled"])
    })
  )

  it.effect(
    "events: run.running, turn.started and turn.completed per turn, then run.completed; Last-Event-ID resumes",
    () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const account = yield* signUp()
        const { key } = yield* createKey(account, ["teams"])
        const { team } = yield* teamOf(account, "local", 2)
        const runId = yield* startRun(key, team.id, "Stream it")
        const stream = yield* client.request("GET", `/api/teams/${team.id}/runs/${runId}/events`, {
          headers: bearer(account.token)
        })
        assert.strictEqual(stream.status, 200)
        assert.include(stream.headers.get("content-type") ?? "", "text/event-stream")
        const events = stream.text
          .trim()
          .split("\n\n")
          .map((frame) => ({
            id: /^id: (.*)$/m.exec(frame)?.[1],
            type: /^event: (.*)$/m.exec(frame)?.[1],
            data: JSON.parse(/^data: (.*)$/m.exec(frame)![1]!)
          }))
        assert.deepStrictEqual(
          events.map((e) => e.type),
          ["run.running", "turn.started", "turn.completed", "turn.started", "turn.completed", "run.completed"]
        )
        assert.strictEqual(events[2]!.data.index, 0)
        assert.isString(events[2]!.data.content)
        assert.strictEqual(events[5]!.data.stopReason, "done")
        const resumed = yield* client.request("GET", `/api/v1/teams/${team.id}/runs/${runId}/events`, {
          headers: { ...bearer(key), "last-event-id": events[3]!.id! }
        })
        assert.deepStrictEqual(
          resumed.text
            .trim()
            .split("\n\n")
            .map((frame) => /^event: (.*)$/m.exec(frame)?.[1]),
          ["turn.completed", "run.completed"]
        )
      })
  )

  it.effect("the transcript pages by index, oldest first", () =>
    Effect.gen(function* () {
      const client = yield* TestClient
      const account = yield* signUp()
      const { key } = yield* createKey(account, ["teams"])
      const { team } = yield* teamOf(account, "local", 5)
      const runId = yield* startRun(key, team.id, "Page me")
      yield* awaitRun(account, team.id, runId)
      const v1 = (yield* TestServer.apiClient(key)).v1Teams
      const params = { id: team.id, runId }
      const first = yield* v1.transcript({ params, query: { limit: 2 } })
      assert.deepStrictEqual(
        first.data.data.map((e) => e.index),
        [0, 1]
      )
      assert.strictEqual(first.data.total, 5)
      const second = yield* v1.transcript({ params, query: { limit: 2, cursor: first.data.nextCursor! } })
      assert.deepStrictEqual(
        second.data.data.map((e) => e.index),
        [2, 3]
      )
      // Raw: a cursor the typed client would refuse to encode.
      const bad = yield* client.request("GET", `/api/v1/teams/${team.id}/runs/${runId}/transcript?cursor=nope`, {
        headers: bearer(key)
      })
      assert.strictEqual(bad.status, 400)
    })
  )
})

layer(TestServer.layerWithFakeOpenAi(openaiKey, { modelContextTokens: 700 }), { excludeTestServices: true })(
  "the room's context budget",
  (it) => {
    it.effect("the transcript a speaker sees is trimmed from its oldest turn to MODEL_CONTEXT_TOKENS", () =>
      Effect.gen(function* () {
        const fake = yield* FakeOpenAi
        fake.reset()
        const account = yield* signUp()
        const { key } = yield* createKey(account, ["teams"])
        const { team } = yield* teamOf(account, model, 2, { maxTurns: 6 })
        // About 150 tokens a turn: the room's rules and members take the rest of the 700.
        fake.setDefault({ text: Array.from({ length: 150 }, (_, i) => `word${i}`).join(" ") })
        const runId = yield* startRun(key, team.id, "Talk at length")
        const run = yield* awaitRun(account, team.id, runId)
        assert.strictEqual(run.stopReason, "max_turns", JSON.stringify(run))
        const users = prompts(fake).map((p) => p.user)
        assert.include(users[1]!, "[0] A: word0")
        const last = users[5]!
        assert.match(last, /\(\d+ earlier turns omitted\)/)
        assert.notInclude(last, "[0] A:")
        assert.include(last, "[4] A:")
      })
    )
  }
)
