import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import pg from "pg"
import Stripe from "stripe"
import { listenerConnections } from "../../src/Database/Sql.ts"
import {
  awaitFinal,
  type ClusterNode,
  executeMany,
  linesWith,
  request,
  requestJson,
  signUpTenant,
  startNodes,
  twoStepSetup
} from "../support/Cluster.ts"
import { eventually } from "../support/Eventually.ts"
import { FakeOpenAi, openaiKey } from "../support/FakeOpenAi.ts"
import { TestDatabaseUrl } from "../support/TestServer.ts"

const webhookSecret = "whsec_cluster"
// Webhook signatures come from Stripe's own library.
const stripe = new Stripe("sk_test_x")

/** Three nodes on a fresh database, all talking to one fake OpenAI. */
const threeNodes = (extraEnv: Record<string, string> = {}) =>
  Effect.gen(function* () {
    const databaseUrl = yield* TestDatabaseUrl
    const fake = yield* FakeOpenAi.make({ apiKey: openaiKey })
    const nodes = yield* startNodes(3, {
      DATABASE_URL: databaseUrl,
      OPENAI_BASE_URL: fake.url,
      OPENAI_API_KEY: openaiKey,
      ...extraEnv
    })
    return { databaseUrl, fake, nodes, urls: nodes.map((node) => node.baseUrl) }
  })

/** Uses the key on node C (so C caches it), revokes it on node A; how long until C refuses it. */
const revokeOnARefusedOnC = async (
  urls: ReadonlyArray<string>,
  session: Record<string, string>,
  keyId: string,
  bearer: Record<string, string>
) => {
  const accepted = await request(`${urls[2]}/api/v1/agents`, { headers: bearer })
  assert.strictEqual(accepted.status, 200)
  const revokedAt = Date.now()
  const revoked = await request(`${urls[0]}/api/keys/${keyId}`, { method: "DELETE", headers: session })
  assert.strictEqual(revoked.status, 204)
  // Until it refuses the key, node C accepts it: any other answer is noted.
  const otherAnswers: Array<number> = []
  const refusedAfter = await eventually(
    async () => {
      const r = await request(`${urls[2]}/api/v1/agents`, { headers: bearer })
      if (r.status === 401) return Date.now() - revokedAt
      if (r.status !== 200) otherAnswers.push(r.status)
      throw new Error(`node C still answers ${r.status} to the revoked key`)
    },
    { timeoutMs: 5_000, intervalMs: 10 }
  )
  assert.deepStrictEqual(otherAnswers, [])
  return refusedAfter
}

/**
 * Reads an agent or an orchestration (`path`, e.g. `/api/agents/<id>`) on
 * node C (so C caches it), renames it on node A; how long until C answers
 * with the new name.
 */
const renameOnASeenOnC = async (
  urls: ReadonlyArray<string>,
  session: Record<string, string>,
  path: string,
  name: string
) => {
  const before = await requestJson(`${urls[2]}${path}`, { headers: session })
  assert.notStrictEqual(before.name, name)
  const renamedAt = Date.now()
  await requestJson(`${urls[0]}${path}`, { method: "PUT", headers: session, body: { name } })
  return eventually(
    async () => {
      const seen = await requestJson(`${urls[2]}${path}`, { headers: session })
      if (seen.name !== name) throw new Error(`node C still answers ${path} with the old name`)
      return Date.now() - renamedAt
    },
    { timeoutMs: 5_000, intervalMs: 10 }
  )
}

/**
 * Lists agents on node C (so C keeps the page), makes one on node A, then
 * deletes it there; how long until C's list shows each change.
 */
const listChangedOnASeenOnC = async (urls: ReadonlyArray<string>, session: Record<string, string>, name: string) => {
  const ids = async () =>
    ((await requestJson(`${urls[2]}/api/agents?limit=100`, { headers: session })).data as Array<{ id: string }>).map(
      (a) => a.id
    )
  const until = async (what: string, done: (listed: ReadonlyArray<string>) => boolean) => {
    const startedAt = Date.now()
    await eventually(async () => assert.isTrue(done(await ids()), `node C's list shows ${what}`), {
      timeoutMs: 5_000,
      intervalMs: 10
    })
    return Date.now() - startedAt
  }
  await ids()
  const made = await requestJson(`${urls[0]}/api/agents`, { method: "POST", headers: session, body: { name } })
  const madeAfter = await until("the new agent", (listed) => listed.includes(made.id))
  await requestJson(`${urls[0]}/api/agents/${made.id}`, { method: "DELETE", headers: session })
  const deletedAfter = await until("the deletion", (listed) => !listed.includes(made.id))
  return Math.max(madeAfter, deletedAfter)
}

/**
 * Nodes that start together join one after another, and shards move to a
 * joining node only once their previous holder lets them go. Chats (on new
 * conversations, round-robin) until a conversation has lived on every node:
 * from then on the shards are spread over all three.
 */
const untilSpread = async (nodes: ReadonlyArray<ClusterNode>, agentId: string, bearer: Record<string, string>) => {
  let i = 0
  await eventually(
    async () => {
      // The turns of earlier tries are in the logs by now: the pause between tries outlasts the nodes' log batches.
      if (new Set(linesWith(nodes, "Conversation turn").map((turn) => turn.node)).size === 3) return
      await requestJson(`${nodes[i % 3]!.baseUrl}/api/v1/agents/${agentId}/chat`, {
        method: "POST",
        headers: bearer,
        body: { message: `warm-up ${i++}` }
      })
      throw new Error("the shards have not spread over the three nodes")
    },
    { timeoutMs: 30_000, intervalMs: 100 }
  )
}

describe("three nodes on one database", () => {
  it.live(
    "executions and conversations are spread over all three nodes, whichever node takes the request",
    () =>
      Effect.gen(function* () {
        const { fake, nodes, urls } = yield* threeNodes({ ENFORCE_DAILY_LIMITS: "false" })
        fake.setDefault({ text: "done" })
        const setup = yield* Effect.promise(() => twoStepSetup(urls[0]!, "spread@example.com"))
        yield* Effect.promise(() => untilSpread(nodes, setup.agentId, setup.bearer))
        const ids = yield* Effect.promise(() => executeMany(urls, setup, 30))
        const finals = yield* Effect.promise(() => awaitFinal(urls, setup.bearer, ids, 60_000))
        assert.deepStrictEqual(
          finals.map((e) => e.status),
          Array(30).fill("completed")
        )

        const conversations = yield* Effect.promise(() =>
          Promise.all(
            Array.from({ length: 30 }, (_, i) =>
              requestJson(`${urls[i % 3]}/api/v1/agents/${setup.agentId}/chat`, {
                method: "POST",
                headers: setup.bearer,
                body: { message: `hello ${i}` }
              })
            )
          )
        )
        assert.strictEqual(new Set(conversations.map((c) => c.conversationId)).size, 30)
        // A conversation goes on where it lives, whichever node the next message reaches.
        const again = yield* Effect.promise(() =>
          requestJson(`${urls[2]}/api/v1/agents/${setup.agentId}/chat`, {
            method: "POST",
            headers: setup.bearer,
            body: { message: "and again", conversationId: conversations[0].conversationId }
          })
        )
        assert.strictEqual(again.conversationId, conversations[0].conversationId)
        // Streamed replies cross nodes too: each node streams a turn of a conversation living elsewhere or here.
        for (const base of urls) {
          const streamed = yield* Effect.promise(async () => {
            const response = await fetch(`${base}/api/v1/agents/${setup.agentId}/chat`, {
              method: "POST",
              headers: { ...setup.bearer, "content-type": "application/json", accept: "text/event-stream" },
              body: JSON.stringify({ message: "stream please", conversationId: conversations[1].conversationId })
            })
            return { status: response.status, type: response.headers.get("content-type"), text: await response.text() }
          })
          assert.strictEqual(streamed.status, 200)
          assert.strictEqual(streamed.type, "text/event-stream")
          assert.include(streamed.text, "done")
        }
        const ours = new Set(conversations.map((c) => c.conversationId as string))
        const ourTurns = () =>
          linesWith(nodes, "Conversation turn").filter(({ line }) => ours.has(line.annotations.conversationId))
        // The nodes write their logs in batches: wait for the line of every step and turn.
        yield* Effect.promise(() =>
          eventually(() => {
            assert.strictEqual(linesWith(nodes, "Step completed").length, 60)
            assert.strictEqual(ourTurns().length, 34)
          })
        )

        // Every step was asked of the model once, wherever it ran.
        const asked = fake.requests.map((r) => r.body.messages.at(-1).content as string)
        assert.strictEqual(asked.filter((prompt) => prompt.startsWith("A ")).length, 30)
        assert.strictEqual(asked.filter((prompt) => prompt.startsWith("B ")).length, 30)
        const ranSteps = new Map(nodes.map((node) => [node.runnerAddress, linesWith([node], "Step completed").length]))
        const turns = ourTurns()
        const turnsByNode = new Map(nodes.map((node) => [node.runnerAddress, 0]))
        for (const { node } of turns) turnsByNode.set(node, turnsByNode.get(node)! + 1)
        console.log("steps run per node:", Object.fromEntries(ranSteps))
        console.log("conversation turns per node:", Object.fromEntries(turnsByNode))
        assert.strictEqual(
          [...ranSteps.values()].reduce((a, b) => a + b, 0),
          60
        )
        for (const [node, count] of ranSteps) assert.isAbove(count, 0, `no step ran on ${node}`)
        assert.strictEqual(turns.length, 34)
        for (const [node, count] of turnsByNode) assert.isAbove(count, 0, `no conversation lived on ${node}`)
        // Both turns of the continued conversation ran on the same node.
        const continued = turns.filter(({ line }) => line.annotations.conversationId === again.conversationId)
        assert.strictEqual(continued.length, 2)
        assert.strictEqual(continued[0]!.node, continued[1]!.node)
      }),
    120_000
  )

  it.live(
    "quotas are exact over three nodes; plan changes and key revocations reach every node within 1 s; idempotency keys hold across nodes",
    () =>
      Effect.gen(function* () {
        const { databaseUrl, urls } = yield* threeNodes({
          FREE_DAILY_LIMIT: "100",
          PRO_DAILY_LIMIT: "5000",
          STRIPE_WEBHOOK_SECRET: webhookSecret,
          STRIPE_PRICE_PRO: "price_pro"
        })

        // 150 concurrent requests of one tenant, round-robin: exactly 100 pass.
        const quota = yield* Effect.promise(() => signUpTenant(urls[0]!, "quota@example.com"))
        const statuses = yield* Effect.promise(() =>
          Promise.all(
            Array.from({ length: 150 }, (_, i) =>
              request(`${urls[i % 3]}/api/v1/agents`, { headers: quota.bearer }).then((r) => r.status)
            )
          )
        )
        assert.strictEqual(statuses.filter((s) => s === 200).length, 100)
        assert.strictEqual(statuses.filter((s) => s === 429).length, 50)
        const billing = yield* Effect.promise(() => requestJson(`${urls[1]}/api/billing`, { headers: quota.session }))
        assert.strictEqual(billing.usedToday, 100)

        // An upgrade paid for through the webhook on node A applies on node C within 1 s.
        const me = yield* Effect.promise(() => requestJson(`${urls[0]}/api/auth/me`, { headers: quota.session }))
        const payload = JSON.stringify({
          id: `evt_${Date.now()}`,
          object: "event",
          type: "customer.subscription.created",
          created: Math.floor(Date.now() / 1000),
          livemode: false,
          data: {
            object: {
              id: "sub_multi",
              object: "subscription",
              customer: "cus_multi",
              status: "active",
              metadata: { tenant_id: me.tenant.id },
              items: { object: "list", data: [{ id: "si_1", object: "subscription_item", price: { id: "price_pro" } }] }
            }
          }
        })
        const upgradedAt = Date.now()
        const delivered = yield* Effect.promise(() =>
          fetch(`${urls[0]}/api/webhooks/stripe`, {
            method: "POST",
            headers: {
              "content-type": "application/json",
              "stripe-signature": stripe.webhooks.generateTestHeaderString({ payload, secret: webhookSecret })
            },
            body: payload
          }).then((r) => r.status)
        )
        assert.strictEqual(delivered, 200)
        const upgraded = yield* Effect.promise(() => request(`${urls[2]}/api/v1/agents`, { headers: quota.bearer }))
        const upgradeSeenAfter = Date.now() - upgradedAt
        assert.strictEqual(upgraded.status, 200)
        assert.strictEqual(upgraded.headers.get("ratelimit-limit"), "5000")
        assert.isAtMost(upgradeSeenAfter, 1_000)

        // One Idempotency-Key sent to every node at once, twice each, starts one execution.
        const setup = yield* Effect.promise(() => twoStepSetup(urls[0]!, "keys@example.com"))
        const twice = yield* Effect.promise(() =>
          Promise.all(
            [...urls, ...urls].map((base) =>
              requestJson(`${base}/api/v1/orchestrations/${setup.orchestrationId}/execute`, {
                method: "POST",
                headers: { ...setup.bearer, "idempotency-key": "same-order-1" },
                body: { input: "once" }
              })
            )
          )
        )
        assert.strictEqual(new Set(twice.map((started) => started.executionId)).size, 1)
        const listed = yield* Effect.promise(() =>
          requestJson(`${urls[1]}/api/v1/executions`, { headers: setup.bearer })
        )
        assert.strictEqual(listed.total, 1)

        // A key used on node C (so C has it cached), revoked on node A, is
        // refused on C within 1 s.
        const refusedAfter = yield* Effect.promise(() =>
          revokeOnARefusedOnC(urls, setup.session, setup.keyId, setup.bearer)
        )
        console.log(`a key revoked on node A was refused on node C after ${refusedAfter} ms`)
        assert.isAtMost(refusedAfter, 1_000)

        // An agent read on node C (so C has it cached) and changed on node A is
        // read changed on C within 1 s.
        const agentPath = `/api/agents/${setup.agentId}`
        const orchestrationPath = `/api/orchestrations/${setup.orchestrationId}`
        const renamedAfter = yield* Effect.promise(() =>
          renameOnASeenOnC(urls, setup.session, agentPath, "Renamed on A")
        )
        console.log(`an agent changed on node A was read changed on node C after ${renamedAfter} ms`)
        assert.isAtMost(renamedAfter, 1_000)
        const listedAfter = yield* Effect.promise(() => listChangedOnASeenOnC(urls, setup.session, "Made on A"))
        console.log(`an agent made and deleted on node A was listed so on node C after ${listedAfter} ms`)
        assert.isAtMost(listedAfter, 1_000)
        const orchestrationRenamedAfter = yield* Effect.promise(() =>
          renameOnASeenOnC(urls, setup.session, orchestrationPath, "Renamed on A")
        )
        console.log(
          `an orchestration changed on node A was read changed on node C after ${orchestrationRenamedAfter} ms`
        )
        assert.isAtMost(orchestrationRenamedAfter, 1_000)

        // Still so after every node lost its listening connections (a database
        // restart, a proxy timeout): the listeners reconnect.
        const terminated = yield* Effect.promise(async () => {
          const admin = new pg.Client({ connectionString: databaseUrl })
          await admin.connect()
          const result = await admin.query(
            `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
           WHERE application_name = 'agent-host-listener' AND datname = current_database()`
          )
          await admin.end()
          return result.rowCount
        })
        assert.strictEqual(terminated, 3 * listenerConnections)
        yield* Effect.sleep("2 seconds")
        const another = yield* Effect.promise(() =>
          requestJson(`${urls[0]}/api/keys`, { method: "POST", headers: setup.session, body: { name: "another" } })
        )
        const refusedAgainAfter = yield* Effect.promise(() =>
          revokeOnARefusedOnC(urls, setup.session, another.id, { authorization: `Bearer ${another.key}` })
        )
        console.log(
          `after the listeners reconnected, a revoked key was refused on node C after ${refusedAgainAfter} ms`
        )
        assert.isAtMost(refusedAgainAfter, 1_000)
        const renamedAgainAfter = yield* Effect.promise(() =>
          renameOnASeenOnC(urls, setup.session, agentPath, "Renamed again on A")
        )
        console.log(`after the listeners reconnected, a changed agent was read on node C after ${renamedAgainAfter} ms`)
        assert.isAtMost(renamedAgainAfter, 1_000)
        const listedAgainAfter = yield* Effect.promise(() =>
          listChangedOnASeenOnC(urls, setup.session, "Made again on A")
        )
        console.log(
          `after the listeners reconnected, an agent made and deleted on node A was listed so on node C after ${listedAgainAfter} ms`
        )
        assert.isAtMost(listedAgainAfter, 1_000)
        const orchestrationRenamedAgainAfter = yield* Effect.promise(() =>
          renameOnASeenOnC(urls, setup.session, orchestrationPath, "Renamed again on A")
        )
        console.log(
          `after the listeners reconnected, a changed orchestration was read on node C after ${orchestrationRenamedAgainAfter} ms`
        )
        assert.isAtMost(orchestrationRenamedAgainAfter, 1_000)
      }),
    120_000
  )
})
