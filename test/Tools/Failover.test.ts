import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { awaitFinal, linesWith, requestJson, shardsSettled, signUpTenant, startNodes } from "../support/Cluster.ts"
import { eventually } from "../support/Eventually.ts"
import * as FakeReceiver from "../support/FakeReceiver.ts"
import { TestDatabaseUrl } from "../support/TestServer.ts"

// Durable tool calls across the loss of one node of three (docs/tools.md): a
// call that completed is never made again; one in flight on the lost node is
// made again by a survivor, with the same Idempotency-Key.

const count = 12

/** An http tool `name` on `url` whose arguments are `properties`. */
const httpTool = (name: string, url: string, properties: Record<string, unknown>) => ({
  name,
  description: `${name} on the test's receiver`,
  parameters: { type: "object", properties, additionalProperties: false },
  settings: { kind: "http", method: "GET", url, allowedHosts: ["127.0.0.1"] },
  // Held calls must outlast the kill and the take-over: the test ends them, not their timeout.
  policy: { timeoutMs: 120_000 }
})

describe("durable tool calls when one node of three is lost", () => {
  it.live(
    "kill -9 of a node with calls in flight: every execution completes, a completed call is made once, " +
      "one in flight at the kill twice with the same Idempotency-Key",
    () =>
      Effect.gen(function* () {
        const databaseUrl = yield* TestDatabaseUrl
        // `lookup_order` answers at once, and its answer asks (in the local model's tool rule) for
        // `ship_order`, whose first calls are held: at the kill, every execution has one call
        // completed and one in flight.
        const lookups = yield* FakeReceiver.make
        lookups.script({ body: "call ship_order {}", times: 2 * count })
        const shipments = yield* FakeReceiver.make
        shipments.script({ hold: true, times: count })

        const nodes = yield* startNodes(3, {
          DATABASE_URL: databaseUrl,
          ENFORCE_DAILY_LIMITS: "false",
          // Every execution in flight at once: the tenant's cap on running runs is lifted.
          FREE_MAX_RUNNING_RUNS: "0",
          // The receivers are on loopback.
          WEBHOOK_ALLOW_PRIVATE: "true"
        })
        const urls = nodes.map((node) => node.baseUrl)
        yield* shardsSettled(nodes)

        const setup = yield* Effect.promise(async () => {
          const tenant = await signUpTenant(urls[0]!, "tool-failover@example.com")
          const toolIds: Array<string> = []
          for (const tool of [
            httpTool("lookup_order", lookups.url("/orders/{{args.id}}"), { id: { type: "string" } }),
            httpTool("ship_order", shipments.url("/ship"), {})
          ]) {
            toolIds.push(
              (await requestJson(`${urls[0]}/api/tools`, { method: "POST", headers: tenant.session, body: tool })).id
            )
          }
          const agent = await requestJson(`${urls[0]}/api/agents`, {
            method: "POST",
            headers: tenant.session,
            body: { name: "Clerk", model: "local", toolIds }
          })
          // Step `a` (no call) tells, in the logs, which node runs each execution; step `b` makes the calls.
          const orchestration = await requestJson(`${urls[0]}/api/orchestrations`, {
            method: "POST",
            headers: tenant.session,
            body: {
              name: "Lookup and ship",
              steps: [
                { id: "a", agentId: agent.id, prompt: "Say {{input}}" },
                {
                  id: "b",
                  agentId: agent.id,
                  prompt: 'call lookup_order {"id": "{{input}}"}',
                  dependsOn: ["a"]
                }
              ]
            }
          })
          const ids = await Promise.all(
            Array.from({ length: count }, async (_, i) => {
              const started = await requestJson(
                `${urls[i % urls.length]}/api/v1/orchestrations/${orchestration.id}/execute`,
                { method: "POST", headers: tenant.bearer, body: { input: `run-${i}` } }
              )
              return started.executionId as string
            })
          )
          return { bearer: tenant.bearer, ids }
        })
        const lookupKey = (id: string) => `${id}:b:local_call_1`
        const shipKey = (id: string) => `${id}:b:local_call_2`
        const keysOf = (receiver: FakeReceiver.FakeReceiver) => {
          const made = new Map<string, number>()
          for (const request of receiver.requests) {
            const key = request.headers["idempotency-key"] ?? "(none)"
            made.set(key, (made.get(key) ?? 0) + 1)
          }
          return made
        }

        // Every lookup answered, every shipment held.
        yield* Effect.promise(() =>
          eventually(() => assert.strictEqual(keysOf(shipments).size, count, "shipments held"), {
            timeoutMs: 90_000,
            intervalMs: 100
          })
        )
        assert.strictEqual(keysOf(lookups).size, count)
        // Which node runs which execution: the node that logged its step `a`.
        const ran = yield* Effect.promise(() =>
          eventually(() => {
            const lines = linesWith(nodes, "Step completed").filter(({ line }) => line.annotations.stepId === "a")
            assert.strictEqual(new Set(lines.map(({ line }) => line.annotations.executionId)).size, count)
            return lines
          })
        )
        const victim = nodes
          .map((node) => ({
            node,
            ids: [
              ...new Set(
                ran.flatMap(({ line, node: ranOn }) =>
                  ranOn === node.runnerAddress ? [line.annotations.executionId as string] : []
                )
              )
            ]
          }))
          .sort((x, y) => y.ids.length - x.ids.length)[0]!
        const victimIds = victim.ids.sort()
        assert.isAbove(victimIds.length, 0)
        const survivors = nodes.filter((node) => node !== victim.node).map((node) => node.baseUrl)
        const cut = () => shipments.closedByClient.map((r) => r.headers["idempotency-key"]!)

        const cutBefore = cut().length
        victim.node.child.kill("SIGKILL")
        yield* Effect.promise(() => victim.node.exited)
        // The calls in flight on the victim were cut with it: they and no others.
        yield* Effect.promise(() =>
          eventually(() => assert.sameMembers(cut().slice(cutBefore), victimIds.map(shipKey), "calls cut by the kill"))
        )
        // The survivors make them again (answered at once), while their own calls are still held.
        yield* Effect.promise(() =>
          eventually(
            () => {
              const made = keysOf(shipments)
              assert.deepStrictEqual(
                victimIds.filter((id) => made.get(shipKey(id)) !== 2),
                [],
                "executions whose call is not made again"
              )
            },
            { timeoutMs: 90_000, intervalMs: 100 }
          )
        )
        shipments.releaseHeld()
        const finals = yield* Effect.promise(() => awaitFinal(survivors, setup.bearer, setup.ids, 120_000))
        assert.deepStrictEqual(
          finals.map((e) => e.status),
          Array(count).fill("completed"),
          JSON.stringify(finals.filter((e) => e.status !== "completed"))
        )
        for (const final of finals) assert.include(final.output, "ship_order answered", final.id)

        // No call is missing. Each lookup (completed before the kill) was made once. Each shipment (in
        // flight at the kill) at most twice: once more only after its attempt was cut, the victim's all.
        const lookupsMade = keysOf(lookups)
        const shipmentsMade = keysOf(shipments)
        assert.sameMembers([...lookupsMade.keys()], setup.ids.map(lookupKey))
        assert.sameMembers([...shipmentsMade.keys()], setup.ids.map(shipKey))
        assert.deepStrictEqual(lookups.closedByClient, [])
        const cutAtAll = cut()
        for (const id of setup.ids) {
          assert.strictEqual(lookupsMade.get(lookupKey(id)), 1, `lookup of ${id}`)
          const made = shipmentsMade.get(shipKey(id))!
          assert.isAtMost(made, 2, `shipment of ${id}`)
          assert.strictEqual(made, 1 + cutAtAll.filter((key) => key === shipKey(id)).length, `shipment of ${id}`)
          if (victimIds.includes(id)) assert.strictEqual(made, 2, `shipment of ${id}, on the victim`)
        }
        // And so the executions' records say, each attempt counted.
        for (const id of setup.ids) {
          const calls = yield* Effect.promise(() =>
            requestJson(`${survivors[0]}/api/v1/executions/${id}/tool-calls`, { headers: setup.bearer })
          )
          assert.deepStrictEqual(
            calls.data.map((call: any) => [call.callId, call.tool, call.status, call.attempts]),
            [
              ["local_call_1", "lookup_order", "succeeded", 1],
              ["local_call_2", "ship_order", "succeeded", shipmentsMade.get(shipKey(id))]
            ],
            id
          )
        }
        console.log(
          `kill -9 of a node running ${victimIds.length} of ${count} executions: ` +
            `its ${victimIds.length} calls in flight were made again on the survivors, none of the completed ones`
        )
      }),
    300_000
  )
})
