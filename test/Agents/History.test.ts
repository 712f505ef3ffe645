import { assert, describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import type { TurnList } from "../../src/Agents/Api.ts"
import { NotFound } from "../../src/Domain/Problems.ts"
import { FakeOpenAi, openaiKey } from "../support/FakeOpenAi.ts"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"

const instructions = "You are Scout."

const withFake = TestServer.layerWithFakeOpenAi(openaiKey, {
  modelContextTokens: 16_000
})

const setUp = Effect.gen(function* () {
  const client = yield* TestClient
  const account = yield* TestServer.signUp()
  const key = yield* TestServer.createKey(account, ["chat"])
  const api = yield* TestServer.apiClient(account.token)
  const keyApi = yield* TestServer.apiClient(key.key)
  const agent = yield* api.agents.create({
    payload: { name: "Helper", model: "openai/gpt-4o-mini", instructions, memoryEnabled: true }
  })
  const chat = (message: string, conversationId: string) =>
    keyApi.v1Agents.chat({ params: { id: agent.id }, payload: { message, conversationId } })
  const messages = (conversationId: string, query: { readonly limit?: number; readonly cursor?: string } = {}) =>
    api.agents.turns({ params: { id: agent.id, conversationId }, query })
  // Raw, for the queries the typed client refuses to send.
  const rawMessages = (conversationId: string, query: string) =>
    client.request("GET", `/api/agents/${agent.id}/conversations/${conversationId}/messages${query}`, {
      headers: TestServer.bearer(account.token)
    })
  return { account, agentId: agent.id, chat, messages, rawMessages }
})

layer(withFake, { excludeTestServices: true })("conversation history, bounded", (it) => {
  describe("GET /api/agents/{id}/conversations/{conversationId}/messages", () => {
    it.effect("pages the turns oldest first with limit, cursor and nextCursor", () =>
      Effect.gen(function* () {
        const fake = yield* FakeOpenAi
        fake.reset()
        fake.setDefault({ text: "Noted." })
        const { chat, messages, rawMessages } = yield* setUp
        for (let n = 1; n <= 5; n++) yield* chat(`Message ${n}`, "paged")

        const indexes: Array<Array<number>> = []
        let cursor: string | null = null
        for (let page = 0; page < 5; page++) {
          const response: typeof TurnList.Type = yield* messages(
            "paged",
            cursor === null ? { limit: 2 } : { limit: 2, cursor }
          )
          assert.strictEqual(response.total, 5)
          indexes.push(response.data.map((turn) => turn.index))
          if (response.nextCursor === null) break
          cursor = response.nextCursor
        }
        assert.deepStrictEqual(indexes, [[1, 2], [3, 4], [5]])
        const first = yield* messages("paged", { limit: 1 })
        assert.strictEqual(first.data[0]!.message, "Message 1")
        assert.strictEqual(first.data[0]!.reply, "Noted.")
        // Without a limit, the default page holds all five, and says nothing follows.
        const all = yield* messages("paged")
        assert.strictEqual(all.data.length, 5)
        assert.strictEqual(all.nextCursor, null)

        for (const bad of ["?cursor=AA", "?cursor=not-a-cursor", "?limit=0", "?limit=201"]) {
          const response = yield* rawMessages("paged", bad)
          assert.strictEqual(response.status, 400, `${bad}: ${response.text}`)
          assert.match(response.headers.get("content-type") ?? "", /^application\/problem\+json/)
          assert.strictEqual(response.body.errors[0].path[0], "query")
        }
        assert.instanceOf(yield* Effect.flip(messages("nobody-here")), NotFound)
      })
    )
  })

  describe("the conversation entity", () => {
    it.effect(
      "loads only the newest turns that fit the budget: a long stored history reaches the model trimmed, and stays in Postgres",
      () =>
        Effect.gen(function* () {
          const fake = yield* FakeOpenAi
          const sql = yield* SqlClient.SqlClient
          fake.reset()
          fake.setDefault({ text: "Noted." })
          const { account, agentId, chat, messages } = yield* setUp
          // 40 old turns of 32,000 distinct random CJK characters each (about
          // 60,000 tokens apiece, each alone over the 16,000-token budget),
          // then three short recent ones.
          yield* sql`INSERT INTO conversations (tenant_id, agent_id, id, turn_count)
                   VALUES (${account.tenantId}, ${agentId}, 'long', 43)`
          yield* sql`INSERT INTO conversation_turns (tenant_id, agent_id, conversation_id, seq, message, reply, model,
                                                   input_tokens, output_tokens, created_at, completed_at)
                   SELECT ${account.tenantId}, ${agentId}, 'long', n,
                          (SELECT string_agg(chr(19968 + (random() * 19999)::int), '')
                           FROM generate_series(1, 32000) WHERE n > 0),
                          'Old reply ' || n, 'openai/gpt-4o-mini', 0, 0, now(), now()
                   FROM generate_series(1, 40) AS n`
          yield* sql`INSERT INTO conversation_turns (tenant_id, agent_id, conversation_id, seq, message, reply, model,
                                                   input_tokens, output_tokens, created_at, completed_at)
                   SELECT ${account.tenantId}, ${agentId}, 'long', n, 'Recent message ' || n, 'Recent reply ' || n,
                          'openai/gpt-4o-mini', 0, 0, now(), now()
                   FROM generate_series(41, 43) AS n`

          yield* chat("What now?", "long")
          const recent = [41, 42, 43].flatMap((n) => [
            { role: "user", content: `Recent message ${n}` },
            { role: "assistant", content: `Recent reply ${n}` }
          ])
          assert.deepStrictEqual(fake.requests.at(-1)!.body.messages, [
            { role: "system", content: instructions },
            ...recent,
            { role: "user", content: "What now?" }
          ])
          // The next turn is sent from memory with the one just stored.
          yield* chat("And then?", "long")
          assert.deepStrictEqual(fake.requests.at(-1)!.body.messages, [
            { role: "system", content: instructions },
            ...recent,
            { role: "user", content: "What now?" },
            { role: "assistant", content: "Noted." },
            { role: "user", content: "And then?" }
          ])

          // Every turn is still stored, the old ones included.
          const page = yield* messages("long", { limit: 200 })
          assert.strictEqual(page.total, 45)
          assert.strictEqual(page.data.length, 45)
          assert.strictEqual(page.data[0]!.message.length, 32_000)
          assert.strictEqual(page.data[44]!.message, "And then?")
        })
    )
  })
})
