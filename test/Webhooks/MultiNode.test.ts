import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Crypto from "node:crypto"
import { Webhook } from "standardwebhooks"
import {
  executeMany,
  orchestrationSetup,
  requestJson,
  shardsSettled,
  startNodes,
  webhookEventsEnded
} from "../support/Cluster.ts"
import { eventually } from "../support/Eventually.ts"
import * as FakeReceiver from "../support/FakeReceiver.ts"
import { quietWindow } from "../support/QuietWindow.ts"
import { TestDatabaseUrl } from "../support/TestServer.ts"

const count = 30

describe("webhook delivery on three nodes", () => {
  it.live(
    "every event is delivered, one node killed (kill -9) mid-way; only deliveries it had in flight may repeat",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          const databaseUrl = yield* TestDatabaseUrl
          const receiver = yield* FakeReceiver.make
          // Slow answers, so that deliveries are in flight when the node dies.
          receiver.script({ delayMs: 1_000, times: 1_000 })
          const nodes = yield* startNodes(3, {
            DATABASE_URL: databaseUrl,
            WEBHOOK_ALLOW_PRIVATE: "true",
            WEBHOOK_RETRY_SCHEDULE: "1s,1s,1s,1s",
            WEBHOOK_SECRET_KEY: Crypto.randomBytes(32).toString("base64"),
            ENFORCE_DAILY_LIMITS: "false"
          })
          const urls = nodes.map((node) => node.baseUrl)
          // Shards settle once every runner has joined.
          yield* shardsSettled(nodes)
          const setup = yield* Effect.promise(async () => {
            const tenant = await orchestrationSetup(urls[0]!, "hook-nodes@example.com", "local", [
              { id: "s", prompt: "Say {{input}}" }
            ])
            const hooked = await requestJson(`${urls[1]}/api/orchestrations/${tenant.orchestrationId}`, {
              method: "PUT",
              headers: tenant.session,
              body: { outputWebhookUrl: receiver.url() }
            })
            const ids = await executeMany(urls, tenant, count)
            return { ...tenant, ids, secret: hooked.signingSecret as string }
          })

          // A third delivered, the rest in flight or to come: the kill lands mid-way.
          yield* eventually(
            Effect.sync(() => assert.isAtLeast(receiver.requests.length, count / 3, "a third of the deliveries")),
            { timeoutMs: 60_000, intervalMs: 10 }
          )
          nodes[2]!.child.kill("SIGKILL")
          yield* Effect.promise(() => nodes[2]!.exited)
          const killedAt = Date.now()

          const idsOf = () => new Set(receiver.requests.map((request) => request.headers["webhook-id"]))
          yield* eventually(
            Effect.sync(() => assert.isAtLeast(idsOf().size, count, "an event for every execution")),
            {
              timeoutMs: 90_000,
              intervalMs: 100
            }
          )
          // Whatever was still to come (a retry of an attempt cut by the kill, an attempt the killed
          // node had begun, taken over once its shard locks expire) has come: every delivery has ended.
          yield* webhookEventsEnded(databaseUrl, count)

          const requests = receiver.requests
          const distinct = idsOf()
          console.log(`${distinct.size} distinct webhook ids, ${requests.length} deliveries in all`)
          assert.strictEqual(distinct.size, count)
          const subjects = new Set<string>()
          for (const request of requests) {
            const event = new Webhook(setup.secret).verify(request.body, request.headers) as any
            assert.strictEqual(event.type, "execution.completed")
            subjects.add(event.data.id)
          }
          assert.deepStrictEqual([...subjects].sort(), [...setup.ids].sort())
          // A repeated id is an attempt the killed node had begun (the receiver answered, the node died
          // before storing that): its first copy arrived before the node was gone.
          const first = new Map<string, number>()
          for (const request of requests) {
            const id = request.headers["webhook-id"]!
            if (!first.has(id)) first.set(id, request.at)
            else assert.isBelow(first.get(id)!, killedAt, `event ${id} repeated`)
          }

          // With no node lost, each event is delivered exactly once.
          const before = requests.length
          const more = yield* Effect.promise(() => executeMany(urls.slice(0, 2), setup, 10))
          yield* eventually(
            Effect.sync(() =>
              assert.isAtLeast(idsOf().size, count + more.length, "an event for every later execution")
            ),
            {
              timeoutMs: 30_000,
              intervalMs: 100
            }
          )
          // Every later delivery has ended; then a deliberate quiet window: no second copy of a fresh event.
          yield* webhookEventsEnded(databaseUrl, count + more.length)
          yield* quietWindow(2_000)
          const later = receiver.requests.slice(before)
          const fresh = new Set(more)
          const forFresh = later.filter((request) =>
            fresh.has((new Webhook(setup.secret).verify(request.body, request.headers) as any).data.id)
          )
          console.log(
            `without a kill: ${more.length} executions, ${forFresh.length} deliveries of their events, ${later.length - forFresh.length} late repeats`
          )
          assert.strictEqual(forFresh.length, more.length)
          assert.strictEqual(new Set(forFresh.map((request) => request.headers["webhook-id"])).size, more.length)
          assert.strictEqual(idsOf().size, count + more.length)
          // Every earlier delivery had ended before these executions: a copy of an
          // earlier event arriving now may still only be an attempt the killed node had begun.
          for (const request of later) {
            if (forFresh.includes(request)) continue
            const id = request.headers["webhook-id"]!
            assert.isBelow(first.get(id)!, killedAt, `event ${id} repeated`)
          }

          for (const node of nodes.slice(0, 2)) node.child.kill("SIGTERM")
          yield* Effect.promise(() => Promise.all(nodes.slice(0, 2).map((node) => node.exited)))
        })
      ),
    150_000
  )
})
