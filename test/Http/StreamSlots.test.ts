import { assert, layer } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"
import { type ClusterNode, request, requestJson, signUpTenant, startNodes } from "../support/Cluster.ts"
import { eventually } from "../support/Eventually.ts"
import { anthropicKey, FakeAnthropic } from "../support/FakeAnthropic.ts"
import { FakeOpenAi, openaiKey } from "../support/FakeOpenAi.ts"
import { TestDatabaseUrl } from "../support/TestServer.ts"

const cap = 3

/** Two nodes on one database: a cap of 3 streams per tenant, a fallback poll far longer than any wait below. */
class Nodes extends Context.Service<
  Nodes,
  {
    readonly a: ClusterNode
    readonly b: ClusterNode
  }
>()("test/StreamSlotNodes") {}

const NodesLayer = Layer.effect(
  Nodes,
  Effect.gen(function* () {
    const databaseUrl = yield* TestDatabaseUrl
    const openai = yield* FakeOpenAi.make({ apiKey: openaiKey })
    // Executions' model calls never answer: their runs stay open until cancelled.
    openai.setDefault({ hang: true })
    const anthropic = yield* FakeAnthropic.make({ apiKey: anthropicKey })
    // A streamed chat sends one delta, then stays open.
    anthropic.setDefault({ stallAfter: 1, text: "One two three" })
    const [a, b] = yield* startNodes(2, {
      DATABASE_URL: databaseUrl,
      OPENAI_BASE_URL: openai.url,
      OPENAI_API_KEY: openaiKey,
      ANTHROPIC_BASE_URL: anthropic.url,
      ANTHROPIC_API_KEY: anthropicKey,
      ENFORCE_DAILY_LIMITS: "false",
      MAX_EVENT_STREAMS_PER_TENANT: String(cap),
      EVENT_STREAM_FALLBACK_POLL: "60 seconds",
      EVENT_STREAM_SLOT_LEASE: "3 seconds"
    })
    return { a: a!, b: b! }
  })
)

const within = { timeoutMs: 10_000 }

/** A tenant with an agent on each fake and a one-step orchestration; `execute` starts a run that hangs. */
const tenant = (node: ClusterNode, email: string) =>
  Effect.promise(async () => {
    const setup = await signUpTenant(node.baseUrl, email)
    const worker = await requestJson(`${node.baseUrl}/api/agents`, {
      method: "POST",
      headers: setup.session,
      body: { name: "Worker", model: "openai/gpt-4o-mini" }
    })
    const chatter = await requestJson(`${node.baseUrl}/api/agents`, {
      method: "POST",
      headers: setup.session,
      body: { name: "Chatter", model: "anthropic/claude-3-5-haiku-20241022" }
    })
    const orchestration = await requestJson(`${node.baseUrl}/api/orchestrations`, {
      method: "POST",
      headers: setup.session,
      body: { name: "Slow", steps: [{ id: "s", agentId: worker.id, prompt: "{{input}}" }], timeoutMs: 600_000 }
    })
    const execute = async () => {
      const started = await requestJson(`${node.baseUrl}/api/v1/orchestrations/${orchestration.id}/execute`, {
        method: "POST",
        headers: setup.bearer,
        body: { input: "wait" }
      })
      return started.executionId as string
    }
    return { ...setup, chatterId: chatter.id as string, workerId: worker.id as string, execute }
  })

interface Opened {
  readonly status: number
  /** The problem's JSON when refused. */
  readonly problem: any
  /** Every SSE event received so far. */
  readonly events: () => ReadonlyArray<{ readonly event: string; readonly data: any }>
  /** Resolves when the server ends the stream. */
  readonly ended: Promise<void>
  readonly close: () => void
}

/** Opens an SSE response; once it is 200, its events are collected as they come. */
const openSse = (url: string, init: { method?: string; headers: Record<string, string>; body?: unknown }) =>
  Effect.promise(async (): Promise<Opened> => {
    const controller = new AbortController()
    const response = await fetch(url, {
      method: init.method ?? "GET",
      headers: { accept: "text/event-stream", "content-type": "application/json", ...init.headers },
      body: init.body === undefined ? null : JSON.stringify(init.body),
      signal: controller.signal
    })
    const close = () => controller.abort()
    if (response.status !== 200) {
      return {
        status: response.status,
        problem: await response.json(),
        events: () => [],
        ended: Promise.resolve(),
        close
      }
    }
    const events: Array<{ event: string; data: any }> = []
    const reader = response.body!.getReader()
    const decoder = new TextDecoder()
    const ended = (async () => {
      let buffer = ""
      try {
        while (true) {
          const { done, value } = await reader.read()
          if (done) return
          buffer += decoder.decode(value, { stream: true })
          let cut: number
          while ((cut = buffer.indexOf("\n\n")) >= 0) {
            const block = buffer.slice(0, cut)
            buffer = buffer.slice(cut + 2)
            const fields = Object.fromEntries(
              block.split("\n").map((line) => [line.slice(0, line.indexOf(":")), line.slice(line.indexOf(":") + 2)])
            )
            if (fields.event !== undefined)
              events.push({ event: fields.event, data: JSON.parse(fields.data ?? "null") })
          }
        }
      } catch {
        // aborted by the test
      }
    })()
    return { status: 200, problem: undefined, events: () => events, ended, close }
  })

const executionStream = (node: ClusterNode, bearer: Record<string, string>, executionId: string) =>
  openSse(`${node.baseUrl}/api/v1/executions/${executionId}/events`, { headers: bearer })

const chatStream = (node: ClusterNode, bearer: Record<string, string>, agentId: string) =>
  openSse(`${node.baseUrl}/api/v1/agents/${agentId}/chat`, {
    method: "POST",
    headers: bearer,
    body: { message: "Hello" }
  })

const assertTooMany = (opened: Opened) => {
  assert.strictEqual(opened.status, 429, JSON.stringify(opened.problem))
  assert.strictEqual(opened.problem.type, "urn:agent-host:problem:too-many-streams")
  assert.strictEqual(opened.problem.limit, cap)
}

layer(NodesLayer, { timeout: "90 seconds", excludeTestServices: true })("event streams across nodes", (it) => {
  it.effect(
    "a tenant's cap holds across both nodes and counts streamed chats; another tenant still streams; an ended stream gives its place back",
    () =>
      Effect.gen(function* () {
        const { a, b } = yield* Nodes
        const t = yield* tenant(a, "slots-cap@example.com")
        const executionId = yield* Effect.promise(t.execute)

        const onA = yield* executionStream(a, t.bearer, executionId)
        const onB = yield* executionStream(b, t.bearer, executionId)
        assert.strictEqual(onA.status, 200)
        assert.strictEqual(onB.status, 200)
        const chat = yield* chatStream(b, t.bearer, t.chatterId)
        assert.strictEqual(chat.status, 200, JSON.stringify(chat.problem))
        yield* eventually(
          Effect.sync(() =>
            assert.isTrue(
              chat.events().some((e) => e.event === "delta"),
              "the chat's first delta"
            )
          ),
          within
        )

        // Three open, on two nodes: a fourth is refused on either node, chat or events alike.
        assertTooMany(yield* executionStream(a, t.bearer, executionId))
        assertTooMany(yield* executionStream(b, t.bearer, executionId))
        assertTooMany(yield* chatStream(a, t.bearer, t.chatterId))
        // A chat answered as JSON streams nothing and takes no place.
        const plain = yield* Effect.promise(() =>
          request(`${a.baseUrl}/api/v1/agents/${t.chatterId}/chat`, {
            method: "POST",
            headers: t.bearer,
            body: { message: "Hi" }
          })
        )
        assert.strictEqual(plain.status, 200, plain.text)

        // Another tenant's streams are its own.
        const u = yield* tenant(b, "slots-other@example.com")
        const theirs = yield* chatStream(a, u.bearer, u.chatterId)
        assert.strictEqual(theirs.status, 200, JSON.stringify(theirs.problem))
        theirs.close()

        // A client that hangs up gives its place back, whichever node it was on.
        chat.close()
        const reopened = yield* eventually(
          Effect.promise(async () => {
            const opened = await Effect.runPromise(executionStream(a, t.bearer, executionId))
            if (opened.status === 200) return opened
            assertTooMany(opened)
            throw new Error("no place yet after the chat closed")
          }),
          within
        )

        // Streams the server ends (the run finished) give theirs back too.
        const cancelled = yield* Effect.promise(() =>
          request(`${b.baseUrl}/api/v1/executions/${executionId}/cancel`, { method: "POST", headers: t.bearer })
        )
        assert.strictEqual(cancelled.status, 202, cancelled.text)
        for (const stream of [onA, onB, reopened]) {
          yield* Effect.promise(() => stream.ended)
          assert.strictEqual(stream.events().at(-1)?.event, "execution.cancelled")
        }
        const chats = yield* eventually(
          Effect.promise(async () => {
            const opened: Array<Opened> = []
            for (const node of [a, b, a]) {
              const one = await Effect.runPromise(chatStream(node, t.bearer, t.chatterId))
              opened.push(one)
              if (one.status !== 200) {
                opened.forEach((o) => o.close())
                throw new Error(`not every place free again: ${one.status}`)
              }
            }
            return opened
          }),
          within
        )
        assert.strictEqual(chats.length, cap)
        assertTooMany(yield* chatStream(b, t.bearer, t.chatterId))
        chats.forEach((c) => c.close())
      })
  )

  it.effect("a stream hears its run's events through the node's listener, long before the fallback poll", () =>
    Effect.gen(function* () {
      const { a, b } = yield* Nodes
      const t = yield* tenant(a, "slots-listen@example.com")
      const executionId = yield* Effect.promise(t.execute)
      // The stream is served by B; the run's events are written wherever its workflow runs.
      const stream = yield* executionStream(b, t.bearer, executionId)
      assert.strictEqual(stream.status, 200)
      yield* eventually(
        Effect.sync(() =>
          assert.isTrue(
            stream.events().some((e) => e.event === "execution.running"),
            "the execution's first events"
          )
        ),
        within
      )

      const cancelledAt = Date.now()
      const cancelled = yield* Effect.promise(() =>
        request(`${a.baseUrl}/api/v1/executions/${executionId}/cancel`, { method: "POST", headers: t.bearer })
      )
      assert.strictEqual(cancelled.status, 202, cancelled.text)
      // The fallback poll is a minute: only a notification brings the event this soon.
      yield* eventually(
        Effect.sync(() =>
          assert.isTrue(
            stream.events().some((e) => e.event === "execution.cancelled"),
            "execution.cancelled on the stream"
          )
        ),
        { timeoutMs: 3_000 }
      )
      const heardAfter = Date.now() - cancelledAt
      console.log(`execution.cancelled reached the stream on the other node ${heardAfter} ms after the cancel`)
      assert.isBelow(heardAfter, 3_000)
      yield* Effect.promise(() => stream.ended)
      assert.strictEqual(stream.events().at(-1)?.event, "execution.cancelled")
    })
  )

  it.effect(
    "a killed node's places come back once their lease runs out",
    () =>
      Effect.gen(function* () {
        const { a, b } = yield* Nodes
        const t = yield* tenant(a, "slots-dead@example.com")
        const executionId = yield* Effect.promise(t.execute)
        for (let i = 0; i < cap; i++) assert.strictEqual((yield* executionStream(b, t.bearer, executionId)).status, 200)
        b.child.kill("SIGKILL")
        yield* Effect.promise(() => b.exited)
        const killedAt = Date.now()
        // The dead node's places still count until their lease (3 s) runs out.
        assertTooMany(yield* executionStream(a, t.bearer, executionId))
        const opened = yield* eventually(
          Effect.promise(async () => {
            const one = await Effect.runPromise(executionStream(a, t.bearer, executionId))
            if (one.status === 200) return one
            assertTooMany(one)
            throw new Error("no place yet on the surviving node")
          }),
          within
        )
        const after = Date.now() - killedAt
        console.log(`a place came back ${after} ms after its node was killed`)
        opened.close()
        // Cancelling waits up to CLUSTER_CALL_TIMEOUT (10 s) for a workflow whose shard was the dead node's.
        yield* Effect.promise(() =>
          request(`${a.baseUrl}/api/v1/executions/${executionId}/cancel`, { method: "POST", headers: t.bearer })
        )
      }),
    60_000
  )
})
