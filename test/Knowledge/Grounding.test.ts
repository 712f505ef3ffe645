import { assert, describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import { sourcesHeader } from "../../src/Models/Conventions.ts"
import { eventually } from "../support/Eventually.ts"
import { FakeOpenAi, openaiKey } from "../support/FakeOpenAi.ts"
import { seedKnowledge } from "../support/Knowledge.ts"
import { awaitRun, createTeam, startRun } from "../support/Teams.ts"
import * as TestServer from "../support/TestServer.ts"
import { type Account, TestClient } from "../support/TestServer.ts"

const handbook = [
  {
    filename: "handbook.md",
    text:
      "# Refunds\n\nAnnual plans are refunded in full within fourteen days of purchase. Monthly plans are not refunded.\n\n" +
      "# Support hours\n\nThe support desk answers from nine to five, Monday to Friday."
  },
  { filename: "garden.txt", text: "Tomatoes need full sun and deep watering twice a week." }
]

const chat = (account: Account, agentId: string, message: string) =>
  Effect.gen(function* () {
    const client = yield* TestClient
    const { key } = yield* TestServer.createKey(account)
    return yield* client.request("POST", `/api/v1/agents/${agentId}/chat`, {
      headers: TestServer.bearer(key),
      body: { message, conversationId: "grounded" }
    })
  })

layer(TestServer.layerWithFakeOpenAi(openaiKey), { excludeTestServices: true })("grounding", (it) => {
  describe("agents' knowledgeIds", () => {
    it.effect(
      "are the tenant's bases, given once each; another tenant's or an unknown base is a 400 naming the field",
      () =>
        Effect.gen(function* () {
          const client = yield* TestClient
          const owner = yield* TestServer.signUp()
          const other = yield* TestServer.signUp()
          const { knowledgeId } = yield* seedKnowledge(owner, { name: "Handbook", documents: handbook })
          const agent = yield* TestServer.createAgent(owner, {
            model: "local",
            knowledgeIds: [knowledgeId, knowledgeId]
          })
          assert.deepStrictEqual((agent as any).knowledgeIds, [knowledgeId])
          for (const [account, ids] of [
            [other, [knowledgeId]],
            [owner, ["00000000-0000-7000-8000-000000000000"]]
          ] as const) {
            const refused = yield* client.request("POST", "/api/agents", {
              headers: TestServer.bearer(account.token),
              body: { name: "Nosy", knowledgeIds: ids }
            })
            assert.strictEqual(refused.status, 400, refused.text)
            assert.deepStrictEqual(refused.body.errors[0].path, ["payload", "knowledgeIds"])
          }
          const tooMany = yield* client.request("PUT", `/api/agents/${agent.id}`, {
            headers: TestServer.bearer(owner.token),
            body: { knowledgeIds: Array.from({ length: 11 }, () => knowledgeId) }
          })
          assert.strictEqual(tooMany.status, 400, tooMany.text)
          const cleared = yield* client.request("PUT", `/api/agents/${agent.id}`, {
            headers: TestServer.bearer(owner.token),
            body: { knowledgeIds: [] }
          })
          assert.deepStrictEqual(cleared.body.knowledgeIds, [])
        })
    )
  })

  describe("chat", () => {
    it.effect("on the local model: the reply quotes the best source, and the response names the sources", () =>
      Effect.gen(function* () {
        const account = yield* TestServer.signUp()
        const { documents, knowledgeId } = yield* seedKnowledge(account, { name: "Handbook", documents: handbook })
        const agent = yield* TestServer.createAgent(account, { model: "local", knowledgeIds: [knowledgeId] })
        const answered = yield* chat(account, agent.id, "Can I get a refund on an annual plan?")
        assert.strictEqual(answered.status, 200, answered.text)
        assert.match(
          answered.body.reply,
          /According to \[1\] \(handbook\.md › Refunds\): "Annual plans are refunded in full/
        )
        assert.isAbove(answered.body.sources.length, 0)
        assert.deepStrictEqual(Object.keys(answered.body.sources[0]).sort(), [
          "chunkId",
          "documentId",
          "knowledgeId",
          "score"
        ])
        assert.strictEqual(answered.body.sources[0].documentId, documents["handbook.md"])
        assert.strictEqual(answered.body.sources[0].knowledgeId, knowledgeId)
        // Nothing matches: grounded, with no sources, and the reply says nothing it was not given.
        const nothing = yield* chat(account, agent.id, "Zebras?")
        assert.deepStrictEqual(nothing.body.sources, [])
        assert.notInclude(nothing.body.reply, "According to")
        // An agent without knowledge answers with the reference's fields only.
        const plain = yield* TestServer.createAgent(account, { model: "local" })
        const unGrounded = yield* chat(account, plain.id, "Can I get a refund on an annual plan?")
        assert.deepStrictEqual(Object.keys(unGrounded.body).sort(), ["conversationId", "model", "reply", "tokens"])
      })
    )

    it.effect(
      "on an OpenAI-compatible provider: the system prompt carries the numbered sources after the instructions",
      () =>
        Effect.gen(function* () {
          const fake = yield* FakeOpenAi
          fake.reset()
          const account = yield* TestServer.signUp()
          const { knowledgeId } = yield* seedKnowledge(account, { name: "Handbook", documents: handbook })
          const agent = yield* TestServer.createAgent(account, {
            model: "openai/gpt-4o-mini",
            instructions: "You answer customers.",
            knowledgeIds: [knowledgeId]
          })
          const answered = yield* chat(account, agent.id, "When does the support desk answer?")
          assert.strictEqual(answered.status, 200, answered.text)
          const system = (fake.requests.at(-1)!.body as any).messages[0]
          assert.strictEqual(system.role, "system")
          assert.isTrue(
            system.content.startsWith(
              `You answer customers.\n\n${sourcesHeader}\n\n[1] (handbook.md › Support hours)\n`
            ),
            system.content
          )
          assert.include(system.content, "The support desk answers from nine to five")
          assert.strictEqual(answered.body.sources.length, (system.content.match(/^\[\d+\] \(/gm) ?? []).length)
        })
    )
  })

  describe("orchestration steps and team turns", () => {
    it.effect("a step of a grounded agent is answered from the sources for its rendered prompt", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const account = yield* TestServer.signUp()
        const { key } = yield* TestServer.createKey(account)
        const { knowledgeId } = yield* seedKnowledge(account, { name: "Handbook", documents: handbook })
        const agent = yield* TestServer.createAgent(account, { model: "local", knowledgeIds: [knowledgeId] })
        const created = yield* client.request("POST", "/api/orchestrations", {
          headers: TestServer.bearer(account.token),
          body: { name: "Ask", steps: [{ id: "ask", agentId: agent.id, prompt: "Question: {{input}}" }] }
        })
        assert.strictEqual(created.status, 201, created.text)
        const started = yield* client.request("POST", `/api/v1/orchestrations/${created.body.id}/execute`, {
          headers: TestServer.bearer(key),
          body: { input: "how should I water tomatoes" }
        })
        assert.strictEqual(started.status, 202, started.text)
        const execution = yield* eventually(
          Effect.map(
            client.request("GET", `/api/v1/executions/${started.body.executionId}`, {
              headers: TestServer.bearer(key)
            }),
            (polled) => {
              assert.include(["completed", "failed"], polled.body.status, "the execution finished")
              return polled.body
            }
          ),
          { timeoutMs: 20_000, intervalMs: 100 }
        )
        assert.strictEqual(execution.status, "completed", JSON.stringify(execution))
        assert.match(JSON.stringify(execution), /According to \[1\] \(garden\.txt\): \\"Tomatoes need full sun/)
      })
    )

    it.effect("a team turn of a grounded member is grounded on the mission", () =>
      Effect.gen(function* () {
        const account = yield* TestServer.signUp()
        const { key } = yield* TestServer.createKey(account)
        const { knowledgeId } = yield* seedKnowledge(account, { name: "Handbook", documents: handbook })
        const grounded = yield* TestServer.createAgent(account, {
          name: "Clerk",
          model: "local",
          knowledgeIds: [knowledgeId]
        })
        const plain = yield* TestServer.createAgent(account, { name: "Host", model: "local" })
        const team = yield* createTeam(account, {
          members: [
            { agentId: grounded.id, role: "policy" },
            { agentId: plain.id, role: "writer" }
          ]
        })
        const runId = yield* startRun(key, team.id, "Explain the refund rules for annual plans")
        const run = yield* awaitRun(account, team.id, runId)
        assert.strictEqual(run.status, "completed", JSON.stringify(run))
        const turns = run.transcript.data
        assert.match(turns[0].content, /According to \[1\] \(handbook\.md › Refunds\): "Annual plans are refunded/)
        assert.notInclude(turns[1].content, "According to")
      })
    )
  })
})
