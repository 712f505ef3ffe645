import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Crypto from "node:crypto"
import { Webhook } from "standardwebhooks"
import {
  linesWith,
  request,
  requestJson,
  shardsSettled,
  signUpTenant,
  startNodes,
  webhookEventsEnded
} from "../support/Cluster.ts"
import { defined, eventually } from "../support/Eventually.ts"
import { FakeOpenAi, openaiKey } from "../support/FakeOpenAi.ts"
import * as FakeReceiver from "../support/FakeReceiver.ts"
import { TestDatabaseUrl } from "../support/TestServer.ts"

const count = 20

/** The run a request to the fake is for (its mission) and its turn (the transcript lines its prompt shows). */
const turnOf = (body: any) => {
  const prompt = body.messages.at(-1).content as string
  return { mission: /## Mission\n(.*)\n/.exec(prompt)?.[1] ?? "", turn: (prompt.match(/^\[\d+\] /gm) ?? []).length }
}

describe("team runs on three nodes", () => {
  it.live(
    "runs spread over the nodes; one killed mid-turn (kill -9), the survivors finish every run; each event delivered, once per webhook-id",
    () =>
      Effect.gen(function* () {
        const databaseUrl = yield* TestDatabaseUrl
        const fake = yield* FakeOpenAi.make({ apiKey: openaiKey })
        const receiver = yield* FakeReceiver.make
        // Turn 0 answers in 2 s (every run's turn 0 is asked by then); once all are asked, turn 1
        // answers slowly and ends the run: the kill lands while every turn 1 is in flight.
        fake.setDefault({ delayMs: 2_000, text: "First." })
        const nodes = yield* startNodes(3, {
          DATABASE_URL: databaseUrl,
          OPENAI_BASE_URL: fake.url,
          OPENAI_API_KEY: openaiKey,
          ENFORCE_DAILY_LIMITS: "false",
          // Every run's turn in flight at the kill: the tenant's cap on running runs is lifted.
          FREE_MAX_RUNNING_RUNS: "0",
          WEBHOOK_ALLOW_PRIVATE: "true",
          WEBHOOK_SECRET_KEY: Crypto.randomBytes(32).toString("base64")
        })
        const urls = nodes.map((node) => node.baseUrl)
        const victim = nodes[2]!
        // Shards settle once every runner has joined.
        yield* shardsSettled(nodes)

        const setup = yield* Effect.promise(async () => {
          const tenant = await signUpTenant(urls[0]!, "team-nodes@example.com")
          const agents = []
          for (const name of ["A", "B"]) {
            agents.push(
              await requestJson(`${urls[0]}/api/agents`, {
                method: "POST",
                headers: tenant.session,
                body: { name, model: "openai/gpt-4o-mini" }
              })
            )
          }
          const team = await requestJson(`${urls[0]}/api/teams`, {
            method: "POST",
            headers: tenant.session,
            body: {
              name: "Spread",
              members: agents.map((agent) => ({ agentId: agent.id, role: "member" })),
              room: { outputWebhookUrl: receiver.url("/nodes") }
            }
          })
          const runIds: Array<string> = []
          for (let i = 0; i < count; i++) {
            const started = await request(`${urls[i % urls.length]}/api/v1/teams/${team.id}/run`, {
              method: "POST",
              headers: tenant.bearer,
              body: { mission: `run-${i}` }
            })
            assert.strictEqual(started.status, 202, started.text)
            runIds.push(started.body.data.runId)
          }
          return { tenant, teamId: team.id as string, secret: team.room.signingSecret as string, runIds }
        })

        const asked = (turn: number) => fake.requests.filter((r) => turnOf(r.body).turn === turn)
        const progress = () => `turn 0 asked ${asked(0).length}, turn 1 asked ${asked(1).length} times`
        yield* Effect.promise(() =>
          eventually(() => assert.isAtLeast(asked(0).length, count, `every turn 0 asked (${progress()})`), {
            timeoutMs: 60_000
          })
        )
        fake.setDefault({ delayMs: 4_000, text: "Second.\nFINAL ANSWER: finished" })
        yield* Effect.promise(() =>
          eventually(() => assert.isAtLeast(asked(1).length, count, "every turn 1 in flight"), { timeoutMs: 60_000 })
        ).pipe(Effect.tapError(() => Effect.sync(() => console.log(progress()))))
        assert.strictEqual(asked(0).length, count, progress())
        // Every turn 0 completed (and logged) before its turn 1 was asked: wait out the nodes' log batches.
        const completed = yield* Effect.promise(() =>
          eventually(() => {
            const lines = linesWith(nodes, "Team turn completed")
            assert.isAtLeast(lines.length, count, "every turn 0's log line")
            return lines
          })
        )
        const spread = new Set(completed.map((entry) => entry.node))
        victim.child.kill("SIGKILL")
        yield* Effect.promise(() => victim.exited)
        fake.setDefault({ delayMs: 50, text: "Second.\nFINAL ANSWER: finished" })

        const survivors = urls.slice(0, 2)
        const finals = yield* Effect.promise(() =>
          eventually(
            async () => {
              const page = await request(`${survivors[0]}/api/teams/${setup.teamId}/runs?limit=200`, {
                headers: setup.tenant.session
              })
              assert.strictEqual(page.status, 200)
              const runs = page.body.data as Array<any>
              return defined(
                "every run to finish",
                runs.every((run) => ["completed", "failed", "cancelled"].includes(run.status)) ? runs : undefined
              )
            },
            { timeoutMs: 120_000 }
          )
        )
        assert.strictEqual(finals.length, count)
        assert.deepStrictEqual(
          finals.map((run) => [run.status, run.stopReason, run.result]),
          Array(count).fill(["completed", "done", "finished"])
        )
        // No completed turn 0 was asked again.
        for (let i = 0; i < count; i++) {
          assert.strictEqual(
            asked(0).filter((r) => turnOf(r.body).mission === `run-${i}`).length,
            1,
            `turn 0 of run-${i}`
          )
        }

        const ids = yield* Effect.promise(() =>
          eventually(
            () => {
              const distinct = new Set(receiver.requests.map((r) => r.headers["webhook-id"]))
              assert.isAtLeast(distinct.size, count, "an event for every run")
              return distinct
            },
            { timeoutMs: 60_000 }
          )
        )
        // Whatever was still to come (a copy of an event whose attempt the victim had begun) has come.
        yield* webhookEventsEnded(databaseUrl, count)
        console.log(
          `team runs on 3 nodes: turns completed on ${spread.size} nodes before the kill; ` +
            `${ids.size} distinct webhook-ids, ${receiver.requests.length} deliveries in all`
        )
        assert.isAtLeast(spread.size, 2, "runs spread over the nodes")
        assert.strictEqual(ids.size, count)
        const subjects = new Set(
          receiver.requests.map((r) => (new Webhook(setup.secret).verify(r.body, r.headers) as any).data.runId)
        )
        assert.deepStrictEqual([...subjects].sort(), [...setup.runIds].sort())
        for (const node of nodes.slice(0, 2)) {
          node.child.kill("SIGTERM")
          yield* Effect.promise(() => node.exited)
        }
      }),
    240_000
  )
})
