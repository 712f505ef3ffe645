import { assert, describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import * as TestServer from "../support/TestServer.ts"
import { type Account, TestClient } from "../support/TestServer.ts"

const chat = (key: string, agentId: string, body: unknown, headers: Record<string, string> = {}) =>
  Effect.flatMap(TestClient, (client) =>
    client.request("POST", `/api/v1/agents/${agentId}/chat`, {
      headers: { ...TestServer.bearer(key), ...headers },
      body
    })
  )

const setUp = (agent: Record<string, unknown> = {}) =>
  Effect.gen(function* () {
    const account = yield* TestServer.signUp()
    const key = yield* TestServer.createKey(account, ["chat", "read"])
    const created = yield* TestServer.createAgent(account, { instructions: "You are Scout, a terse helper.", ...agent })
    return { account, key: key.key, agentId: created.id }
  })

const turnsOf = (account: Account, agentId: string, conversationId: string) =>
  Effect.flatMap(TestClient, (client) =>
    client.request("GET", `/api/agents/${agentId}/conversations/${encodeURIComponent(conversationId)}/messages`, {
      headers: TestServer.bearer(account.token)
    })
  )

layer(TestServer.layer({ maxMessageChars: 500 }), { excludeTestServices: true })("chat on the built-in model", (it) => {
  describe("POST /api/v1/agents/{id}/chat", () => {
    it.effect("answers offline with the local model and counts tokens", () =>
      Effect.gen(function* () {
        const { agentId, key } = yield* setUp()
        const response = yield* chat(key, agentId, { message: "Hello there", conversationId: "c-1" })
        assert.strictEqual(response.status, 200)
        assert.deepStrictEqual(Object.keys(response.body).sort(), ["conversationId", "model", "reply", "tokens"])
        assert.strictEqual(response.body.conversationId, "c-1")
        assert.strictEqual(response.body.model, "local")
        assert.isAbove(response.body.reply.length, 0)
        assert.isTrue(Number.isInteger(response.body.tokens) && response.body.tokens > 0)
      })
    )

    it.effect("generates a conversationId when none is given", () =>
      Effect.gen(function* () {
        const { agentId, key } = yield* setUp()
        const first = yield* chat(key, agentId, { message: "Hi" })
        assert.strictEqual(first.status, 200)
        assert.match(first.body.conversationId, /^[0-9a-f-]{36}$/)
        const second = yield* chat(key, agentId, { message: "Hi" })
        assert.notStrictEqual(second.body.conversationId, first.body.conversationId)
      })
    )

    it.effect("remembers the conversation when memory is on, in order, with tokens and model", () =>
      Effect.gen(function* () {
        const { account, agentId, key } = yield* setUp()
        const one = yield* chat(key, agentId, { message: "My name is Ada", conversationId: "mem" })
        const two = yield* chat(key, agentId, { message: "What is my name?", conversationId: "mem" })
        assert.strictEqual(two.status, 200)
        // The second turn was sent with the first as history, so it costs more input tokens.
        assert.isAbove(two.body.tokens, one.body.tokens)
        const turns = yield* turnsOf(account, agentId, "mem")
        assert.strictEqual(turns.status, 200)
        assert.strictEqual(turns.body.total, 2)
        assert.deepStrictEqual(
          turns.body.data.map((t: { message: string }) => t.message),
          ["My name is Ada", "What is my name?"]
        )
        assert.deepStrictEqual(
          turns.body.data.map((t: { index: number }) => t.index),
          [1, 2]
        )
        assert.strictEqual(turns.body.data[1].reply, two.body.reply)
        assert.strictEqual(turns.body.data[1].tokens, two.body.tokens)
        assert.strictEqual(turns.body.data[1].model, "local")
        assert.strictEqual(turns.body.data[1].inputTokens + turns.body.data[1].outputTokens, two.body.tokens)
      })
    )

    it.effect("keeps nothing when memory is off", () =>
      Effect.gen(function* () {
        const { account, agentId, key } = yield* setUp({ memoryEnabled: false })
        const one = yield* chat(key, agentId, { message: "My name is Ada", conversationId: "forgetful" })
        const two = yield* chat(key, agentId, { message: "My name is Ada", conversationId: "forgetful" })
        assert.strictEqual(two.status, 200)
        assert.strictEqual(two.body.tokens, one.body.tokens)
        const turns = yield* turnsOf(account, agentId, "forgetful")
        assert.strictEqual(turns.status, 404)
      })
    )

    it.effect("400 naming the message: missing, empty, blank, too long; and a bad conversationId", () =>
      Effect.gen(function* () {
        const { agentId, key } = yield* setUp()
        for (const body of [{}, { message: "" }, { message: "   " }, { message: "x".repeat(501) }, { message: 5 }]) {
          const response = yield* chat(key, agentId, body)
          assert.strictEqual(response.status, 400, JSON.stringify(body))
          assert.deepStrictEqual(response.body.errors[0].path, ["payload", "message"], JSON.stringify(body))
        }
        const badId = yield* chat(key, agentId, { message: "hi", conversationId: "" })
        assert.strictEqual(badId.status, 400)
        assert.deepStrictEqual(badId.body.errors[0].path, ["payload", "conversationId"])
      })
    )

    it.effect("404 for an inactive, missing or another tenant's agent; 403 without the chat scope", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const { account, agentId, key } = yield* setUp()
        yield* client.request("PUT", `/api/agents/${agentId}`, {
          headers: TestServer.bearer(account.token),
          body: { status: "inactive" }
        })
        assert.strictEqual((yield* chat(key, agentId, { message: "hi" })).status, 404)
        assert.strictEqual((yield* chat(key, "0190c1a8-0000-7000-8000-000000000000", { message: "hi" })).status, 404)
        const other = yield* setUp()
        assert.strictEqual((yield* chat(key, other.agentId, { message: "hi" })).status, 404)
        const readOnly = yield* TestServer.createKey(account, ["read"])
        const forbidden = yield* chat(readOnly.key, agentId, { message: "hi" })
        assert.strictEqual(forbidden.status, 403)
        assert.strictEqual(forbidden.body.requiredScope, "chat")
      })
    )

    it.effect("503 when the agent's provider is not configured", () =>
      Effect.gen(function* () {
        const { agentId, key } = yield* setUp({ model: "anthropic/claude-sonnet-4-5" })
        const response = yield* chat(key, agentId, { message: "hi" })
        assert.strictEqual(response.status, 503)
        assert.strictEqual(response.headers.get("content-type"), "application/problem+json")
        assert.match(response.body.detail, /ANTHROPIC_API_KEY|not configured/i)
      })
    )
  })

  describe("one conversation, one actor", () => {
    it.effect("20 concurrent messages to one conversation all get answers, and the history has all 20 in order", () =>
      Effect.gen(function* () {
        const { account, agentId, key } = yield* setUp()
        const messages = Array.from({ length: 20 }, (_, i) => `message number ${i}`)
        const responses = yield* Effect.forEach(
          messages,
          (message) => chat(key, agentId, { message, conversationId: "busy" }),
          { concurrency: "unbounded" }
        )
        assert.deepStrictEqual(
          responses.map((r) => r.status),
          Array(20).fill(200)
        )
        const turns = yield* turnsOf(account, agentId, "busy")
        assert.strictEqual(turns.body.total, 20)
        assert.deepStrictEqual(
          turns.body.data.map((t: { index: number }) => t.index),
          messages.map((_, i) => i + 1)
        )
        assert.deepStrictEqual(
          [...turns.body.data.map((t: { message: string }) => t.message)].sort(),
          [...messages].sort()
        )
        // Each turn was answered with the history of the turns before it: input tokens only grow.
        const inputs = turns.body.data.map((t: { inputTokens: number }) => t.inputTokens)
        for (let i = 1; i < inputs.length; i++) assert.isAbove(inputs[i], inputs[i - 1])
        // Each caller got the reply stored for its own message.
        for (const [i, response] of responses.entries()) {
          const stored = turns.body.data.find((t: { message: string }) => t.message === messages[i])
          assert.strictEqual(stored.reply, response.body.reply)
        }
      })
    )

    it.effect("20 conversations run in parallel, each with its own history", () =>
      Effect.gen(function* () {
        const { account, agentId, key } = yield* setUp()
        const ids = Array.from({ length: 20 }, (_, i) => `parallel-${i}`)
        const responses = yield* Effect.forEach(
          ids,
          (conversationId) => chat(key, agentId, { message: `hello from ${conversationId}`, conversationId }),
          { concurrency: "unbounded" }
        )
        assert.deepStrictEqual(
          responses.map((r) => r.status),
          Array(20).fill(200)
        )
        for (const id of ids) {
          const turns = yield* turnsOf(account, agentId, id)
          assert.strictEqual(turns.body.total, 1)
          assert.strictEqual(turns.body.data[0].message, `hello from ${id}`)
        }
        const client = yield* TestClient
        const list = yield* client.request("GET", `/api/agents/${agentId}/conversations?limit=5`, {
          headers: TestServer.bearer(account.token)
        })
        assert.strictEqual(list.body.total, 20)
        assert.strictEqual(list.body.data.length, 5)
        assert.isString(list.body.nextCursor)
      })
    )
  })

  describe("streaming", () => {
    it.effect("Accept: text/event-stream streams deltas, then done with the same JSON; the turn is stored", () =>
      Effect.gen(function* () {
        const { account, agentId, key } = yield* setUp()
        const response = yield* chat(
          key,
          agentId,
          { message: "Tell me something", conversationId: "sse" },
          {
            accept: "text/event-stream"
          }
        )
        assert.strictEqual(response.status, 200)
        assert.match(response.headers.get("content-type") ?? "", /^text\/event-stream/)
        const events = response.text
          .trim()
          .split("\n\n")
          .map((block) => {
            const [eventLine, dataLine] = block.split("\n")
            return { event: eventLine!.slice("event: ".length), data: JSON.parse(dataLine!.slice("data: ".length)) }
          })
        const deltas = events.filter((e) => e.event === "delta")
        const done = events[events.length - 1]!
        assert.isAbove(deltas.length, 1)
        assert.strictEqual(done.event, "done")
        assert.deepStrictEqual(Object.keys(done.data).sort(), ["conversationId", "model", "reply", "tokens"])
        assert.strictEqual(deltas.map((d) => d.data.text).join(""), done.data.reply)
        const turns = yield* turnsOf(account, agentId, "sse")
        assert.strictEqual(turns.body.total, 1)
        assert.strictEqual(turns.body.data[0].reply, done.data.reply)
        assert.strictEqual(turns.body.data[0].tokens, done.data.tokens)
      })
    )

    it.effect("errors arrive as an error event carrying a problem", () =>
      Effect.gen(function* () {
        const { agentId, key } = yield* setUp({ model: "anthropic/claude-sonnet-4-5" })
        const response = yield* chat(key, agentId, { message: "hi" }, { accept: "text/event-stream" })
        assert.match(response.text, /^event: error\ndata: /)
        const problem = JSON.parse(response.text.split("\n")[1]!.slice("data: ".length))
        assert.strictEqual(problem.status, 503)
      })
    )
  })

  describe("conversation management", () => {
    it.effect("lists, reads and forgets conversations; forgotten is forgotten", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const { account, agentId, key } = yield* setUp()
        yield* chat(key, agentId, { message: "Remember: blue", conversationId: "to-forget" })
        const auth = { headers: TestServer.bearer(account.token) }
        const list = yield* client.request("GET", `/api/agents/${agentId}/conversations`, auth)
        assert.deepStrictEqual(
          list.body.data.map((c: { id: string; turns: number }) => [c.id, c.turns]),
          [["to-forget", 1]]
        )
        const forget = yield* client.request("DELETE", `/api/agents/${agentId}/conversations/to-forget`, auth)
        assert.strictEqual(forget.status, 204)
        assert.strictEqual((yield* turnsOf(account, agentId, "to-forget")).status, 404)
        const again = yield* client.request("DELETE", `/api/agents/${agentId}/conversations/to-forget`, auth)
        assert.strictEqual(again.status, 404)
        // The entity forgot too: the next message starts a fresh history.
        yield* chat(key, agentId, { message: "What colour?", conversationId: "to-forget" })
        const fresh = yield* turnsOf(account, agentId, "to-forget")
        assert.strictEqual(fresh.body.total, 1)
        assert.strictEqual(fresh.body.data[0].index, 1)
        const stranger = yield* TestServer.signUp()
        const hidden = yield* client.request("GET", `/api/agents/${agentId}/conversations`, {
          headers: TestServer.bearer(stranger.token)
        })
        assert.strictEqual(hidden.status, 404)
      })
    )
  })
})
