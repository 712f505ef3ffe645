import { assert, describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
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
  const agent = yield* TestServer.createAgent(account, {
    model: "openai/gpt-4o-mini",
    instructions,
    memoryEnabled: true
  })
  const chat = (message: string, conversationId: string) =>
    client.request("POST", `/api/v1/agents/${agent.id}/chat`, {
      headers: TestServer.bearer(key.key),
      body: { message, conversationId }
    })
  const messages = (conversationId: string, query = "") =>
    client.request("GET", `/api/agents/${agent.id}/conversations/${conversationId}/messages${query}`, {
      headers: TestServer.bearer(account.token)
    })
  return { account, agentId: agent.id, chat, messages }
})

layer(withFake, { excludeTestServices: true })("conversation history, bounded", (it) => {
  describe("GET /api/agents/{id}/conversations/{conversationId}/messages", () => {
    it.effect("pages the turns oldest first with limit, cursor and nextCursor", () =>
      Effect.gen(function* () {
        const fake = yield* FakeOpenAi
        fake.reset()
        fake.setDefault({ text: "Noted." })
        const { chat, messages } = yield* setUp
        for (let n = 1; n <= 5; n++) assert.strictEqual((yield* chat(`Message ${n}`, "paged")).status, 200)

        const indexes: Array<Array<number>> = []
        let query = "?limit=2"
        for (let page = 0; page < 5; page++) {
          const response = yield* messages("paged", query)
          assert.strictEqual(response.status, 200, response.text)
          assert.strictEqual(response.body.total, 5)
          indexes.push(response.body.data.map((turn: { index: number }) => turn.index))
          if (response.body.nextCursor === null) break
          query = `?limit=2&cursor=${response.body.nextCursor}`
        }
        assert.deepStrictEqual(indexes, [[1, 2], [3, 4], [5]])
        const first = yield* messages("paged", "?limit=1")
        assert.strictEqual(first.body.data[0].message, "Message 1")
        assert.strictEqual(first.body.data[0].reply, "Noted.")
        // Without a limit, the default page holds all five, and says nothing follows.
        const all = yield* messages("paged")
        assert.strictEqual(all.body.data.length, 5)
        assert.strictEqual(all.body.nextCursor, null)

        for (const bad of ["?cursor=AA", "?cursor=not-a-cursor", "?limit=0", "?limit=201"]) {
          const response = yield* messages("paged", bad)
          assert.strictEqual(response.status, 400, `${bad}: ${response.text}`)
          assert.match(response.headers.get("content-type") ?? "", /^application\/problem\+json/)
          assert.strictEqual(response.body.errors[0].path[0], "query")
        }
        assert.strictEqual((yield* messages("nobody-here")).status, 404)
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

          const answered = yield* chat("What now?", "long")
          assert.strictEqual(answered.status, 200, answered.text)
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
          const page = yield* messages("long", "?limit=200")
          assert.strictEqual(page.body.total, 45)
          assert.strictEqual(page.body.data.length, 45)
          assert.strictEqual(page.body.data[0].message.length, 32_000)
          assert.strictEqual(page.body.data[44].message, "And then?")
        })
    )
  })
})
