import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { linesWith, request, requestJson, shardsSettled, signUpTenant, startNodes } from "../support/Cluster.ts"
import { eventually } from "../support/Eventually.ts"
import { FakeOpenAi, type FakeServer, openaiKey } from "../support/FakeOpenAi.ts"
import * as FakeReceiver from "../support/FakeReceiver.ts"
import { type ServiceProcess, spawnService, waitReady } from "../support/Process.ts"
import { TestDatabaseUrl } from "../support/TestServer.ts"
import { lookupTool } from "../support/Tools.ts"

// Durable tool calls in a team run (a member's turn runs the tool loop under
// the scope `turn-<index>`, docs/tools.md) across a kill -9: a call that
// completed is never made again, its stored result is replayed; a call in
// flight at the kill is made again, with the same Idempotency-Key
// `<runId>:<callId>`; and so when one node of three is lost.

const lookup = { id: "call_1", name: "lookup_order", arguments: { id: "A-1" } }
const answer = "A-1 has shipped."

/** Polls (bounded) until every run of the team is final, asking the nodes in turn; their bodies, in order. */
const awaitRuns = async (
  baseUrls: ReadonlyArray<string>,
  bearer: Record<string, string>,
  teamId: string,
  runIds: ReadonlyArray<string>,
  timeoutMs: number
) => {
  const finals = new Map<string, any>()
  let turn = 0
  await eventually(
    async () => {
      for (const runId of runIds) {
        if (finals.has(runId)) continue
        const base = baseUrls[turn++ % baseUrls.length]!
        const { status, body } = await request(`${base}/api/v1/teams/${teamId}/runs/${runId}`, { headers: bearer })
        if (status !== 200 && status !== 503) throw new Error(`GET team run ${runId}: ${status}`)
        if (status === 200 && ["completed", "failed", "cancelled"].includes(body.data.status))
          finals.set(runId, body.data)
      }
      if (finals.size < runIds.length)
        throw new Error(`${runIds.length - finals.size} team runs not final after ${timeoutMs} ms`)
    },
    // Every try reads each open run: a slower pace spares the nodes under test.
    { timeoutMs, intervalMs: 200 }
  )
  return runIds.map((runId) => finals.get(runId))
}

/**
 * A tenant with an http tool on `receiverUrl`, an agent on the fake OpenAI
 * given it, a team of that one agent, and one run of it.
 */
const startTeamRun = async (baseUrl: string, email: string, receiverUrl: string) => {
  const tenant = await signUpTenant(baseUrl, email)
  const tool = await requestJson(`${baseUrl}/api/tools`, {
    method: "POST",
    headers: tenant.session,
    body: {
      ...lookupTool(receiverUrl),
      // A held call must outlast the kill and the restart: the test ends it, not its timeout.
      policy: { timeoutMs: 120_000 }
    }
  })
  const agent = await requestJson(`${baseUrl}/api/agents`, {
    method: "POST",
    headers: tenant.session,
    body: { name: "Clerk", model: "openai/gpt-4o-mini", toolIds: [tool.id] }
  })
  const team = await requestJson(`${baseUrl}/api/teams`, {
    method: "POST",
    headers: tenant.session,
    body: { name: "Desk", members: [{ agentId: agent.id, role: "looks orders up" }] }
  })
  const started = await requestJson(`${baseUrl}/api/v1/teams/${team.id}/run`, {
    method: "POST",
    headers: tenant.bearer,
    body: { mission: "Where is order A-1?" }
  })
  return { bearer: tenant.bearer, teamId: team.id as string, runId: started.data.runId as string }
}

const kill = (service: ServiceProcess) =>
  Effect.promise(async () => {
    service.child.kill("SIGKILL")
    await service.exited
  })

const stop = (service: ServiceProcess) =>
  Effect.promise(async () => {
    service.child.kill("SIGTERM")
    await service.exited
  })

const serviceEnv = (databaseUrl: string, fakeUrl: string) => ({
  DATABASE_URL: databaseUrl,
  OPENAI_BASE_URL: fakeUrl,
  OPENAI_API_KEY: openaiKey,
  ENFORCE_DAILY_LIMITS: "false",
  // The receiver is on loopback.
  WEBHOOK_ALLOW_PRIVATE: "true"
})

/** The fake's requests for the turn's first model call (the mission last) and for the one reading the result. */
const askedFirst = (fake: FakeServer) => fake.requests.filter((r) => r.body.messages.at(-1).role === "user")
const askedWithResult = (fake: FakeServer) => fake.requests.filter((r) => r.body.messages.at(-1).role === "tool")

describe("durable tool calls in a team run across a kill -9", () => {
  it.live(
    "a call completed before the kill is never made again, nor is the model call that asked for it",
    () =>
      Effect.gen(function* () {
        const databaseUrl = yield* TestDatabaseUrl
        const fake = yield* FakeOpenAi.make({ apiKey: openaiKey })
        const receiver = yield* FakeReceiver.make
        receiver.script({ body: JSON.stringify({ id: "A-1", status: "shipped" }) })
        // The member asks for the call; its next model call (reading the result) is held: the kill lands there.
        fake.script({ toolCalls: [lookup] }, { hold: true, text: "held" })
        fake.setDefault({ text: `${answer}\nFINAL ANSWER: ${answer}` })
        const env = serviceEnv(databaseUrl, fake.url)

        const first = yield* spawnService(env)
        yield* waitReady(first)
        const { bearer, teamId, runId } = yield* Effect.promise(() =>
          startTeamRun(first.baseUrl, "team-tool-crash-after@example.com", receiver.url("/orders/{{args.id}}"))
        )
        yield* Effect.promise(() =>
          eventually(() => assert.strictEqual(askedWithResult(fake).length, 1, "the model call after the tool call"), {
            timeoutMs: 60_000
          })
        )
        assert.strictEqual(receiver.requests.length, 1)
        assert.strictEqual(askedFirst(fake).length, 1)
        yield* kill(first)

        const second = yield* spawnService(env)
        yield* waitReady(second)
        const readyAt = Date.now()
        const [run] = yield* Effect.promise(() => awaitRuns([second.baseUrl], bearer, teamId, [runId], 90_000))
        console.log(
          "%s: the team run completed %d ms after the new process was ready",
          "kill -9 after the call",
          Date.now() - readyAt
        )
        assert.strictEqual(run.status, "completed", JSON.stringify(run))
        assert.strictEqual(run.stopReason, "done")
        assert.strictEqual(run.result, answer)
        // The call was made once; the model's reply that asked for it was replayed, not asked again.
        assert.strictEqual(receiver.requests.length, 1)
        assert.strictEqual(receiver.requests[0]!.headers["idempotency-key"], `${runId}:turn-0:call_1`)
        assert.strictEqual(askedFirst(fake).length, 1)
        // Only the model call in flight was asked again, with the kept result.
        assert.strictEqual(askedWithResult(fake).length, 2)
        const again = askedWithResult(fake).at(-1)!.body.messages.at(-1)
        assert.include(again.content, "shipped")
        assert.strictEqual(again.tool_call_id, "call_1")

        // The turn shows its one call, made once, with its result.
        assert.strictEqual(run.turns, 1)
        const [turn] = run.transcript.data
        assert.strictEqual(turn.content, `${answer}\nFINAL ANSWER: ${answer}`)
        assert.strictEqual(turn.toolCalls.length, 1)
        assert.deepInclude(turn.toolCalls[0], {
          callId: "call_1",
          tool: "lookup_order",
          status: "succeeded",
          attempts: 1,
          scope: "turn-0"
        })
        assert.include(turn.toolCalls[0].result, "shipped")
        yield* stop(second)
      }),
    180_000
  )

  it.live(
    "a call in flight at the kill is made again with the same Idempotency-Key, and the run completes with its result",
    () =>
      Effect.gen(function* () {
        const databaseUrl = yield* TestDatabaseUrl
        const fake = yield* FakeOpenAi.make({ apiKey: openaiKey })
        const receiver = yield* FakeReceiver.make
        // The first request is held unanswered: the kill lands while the receiver has it.
        receiver.script({ hold: true }, { body: JSON.stringify({ id: "A-1", status: "shipped" }) })
        fake.script({ toolCalls: [lookup] })
        fake.setDefault({ text: `${answer}\nFINAL ANSWER: ${answer}` })
        const env = serviceEnv(databaseUrl, fake.url)

        const first = yield* spawnService(env)
        yield* waitReady(first)
        const { bearer, teamId, runId } = yield* Effect.promise(() =>
          startTeamRun(first.baseUrl, "team-tool-crash-during@example.com", receiver.url("/orders/{{args.id}}"))
        )
        yield* Effect.promise(() =>
          eventually(() => assert.strictEqual(receiver.requests.length, 1, "the call reached the receiver"), {
            timeoutMs: 60_000
          })
        )
        yield* kill(first)
        // The killed process's connection is gone with it: the held request was never answered.
        yield* Effect.promise(() =>
          eventually(() => assert.strictEqual(receiver.closedByClient.length, 1, "the held request closed"))
        )

        const second = yield* spawnService(env)
        yield* waitReady(second)
        const readyAt = Date.now()
        const [run] = yield* Effect.promise(() => awaitRuns([second.baseUrl], bearer, teamId, [runId], 90_000))
        console.log(
          "%s: the team run completed %d ms after the new process was ready",
          "kill -9 during the call",
          Date.now() - readyAt
        )
        assert.strictEqual(run.status, "completed", JSON.stringify(run))
        assert.strictEqual(run.stopReason, "done")
        assert.strictEqual(run.result, answer)
        // Made twice at most (once more only because the first attempt was cut), with one key.
        assert.deepStrictEqual(
          receiver.requests.map((r) => [r.path, r.headers["idempotency-key"]]),
          Array(2).fill(["/orders/A-1", `${runId}:turn-0:call_1`])
        )
        // The model's reply asking for the call was kept before the call: replayed, not asked again.
        assert.strictEqual(askedFirst(fake).length, 1)
        assert.strictEqual(askedWithResult(fake).length, 1)
        assert.include(askedWithResult(fake)[0]!.body.messages.at(-1).content, "shipped")

        // The result is in the transcript, on the turn that made the call, both attempts counted.
        assert.strictEqual(run.turns, 1)
        const [turn] = run.transcript.data
        assert.strictEqual(turn.toolCalls.length, 1)
        assert.deepInclude(turn.toolCalls[0], {
          callId: "call_1",
          tool: "lookup_order",
          status: "succeeded",
          attempts: 2,
          scope: "turn-0"
        })
        assert.include(turn.toolCalls[0].result, "shipped")
        const call = yield* Effect.promise(() =>
          requestJson(`${second.baseUrl}/api/v1/teams/${teamId}/runs/${runId}/turns/0/tool-calls/call_1`, {
            headers: bearer
          })
        )
        assert.include(call.data.fullResult, "shipped")
        yield* stop(second)
      }),
    180_000
  )
})

/** An http tool `name` on `url` whose arguments are `properties`. */
const httpTool = (name: string, url: string, properties: Record<string, unknown>) => ({
  name,
  description: `${name} on the test's receiver`,
  parameters: { type: "object", properties, additionalProperties: false },
  settings: { kind: "http", method: "GET", url, allowedHosts: ["127.0.0.1"] },
  // Held calls must outlast the kill and the take-over: the test ends them, not their timeout.
  policy: { timeoutMs: 120_000 }
})

const count = 12

// The local model quotes the mission's first 119 characters in a member's
// turn: the call phrase comes after them, so that only the mission asks for it
// (a quote of it in the transcript would be a second call).
const missionOf = (input: string) =>
  `Team run ${input} on three nodes, one of them lost: the member with the tools looks the order up and ` +
  `ships it, and the other member sums it up. call lookup_order {"id": "${input}"}`

describe("durable tool calls in team runs when one node of three is lost", () => {
  it.live(
    "kill -9 of a node with calls in flight: every run completes, a completed call is made once, " +
      "one in flight at the kill twice with the same Idempotency-Key",
    () =>
      Effect.gen(function* () {
        const databaseUrl = yield* TestDatabaseUrl
        assert.isAbove(missionOf("run-0").indexOf(" call lookup_order"), 125)
        // `lookup_order` answers at once, and its answer asks (in the local model's tool rule) for
        // `ship_order`, whose first calls are held: at the kill, every run has one call completed and
        // one in flight.
        const lookups = yield* FakeReceiver.make
        lookups.script({ body: "call ship_order {}", times: 2 * count })
        const shipments = yield* FakeReceiver.make
        shipments.script({ hold: true, times: count })

        const nodes = yield* startNodes(3, {
          DATABASE_URL: databaseUrl,
          ENFORCE_DAILY_LIMITS: "false",
          // Every run in flight at once: the tenant's cap on running runs is lifted.
          FREE_MAX_RUNNING_RUNS: "0",
          // The receivers are on loopback.
          WEBHOOK_ALLOW_PRIVATE: "true"
        })
        const urls = nodes.map((node) => node.baseUrl)
        yield* shardsSettled(nodes)

        const setup = yield* Effect.promise(async () => {
          const tenant = await signUpTenant(urls[0]!, "team-tool-failover@example.com")
          const toolIds: Array<string> = []
          for (const tool of [
            httpTool("lookup_order", lookups.url("/orders/{{args.id}}"), { id: { type: "string" } }),
            httpTool("ship_order", shipments.url("/ship"), {})
          ]) {
            toolIds.push(
              (await requestJson(`${urls[0]}/api/tools`, { method: "POST", headers: tenant.session, body: tool })).id
            )
          }
          // B (no tools) speaks first: its turn 0 tells, in the logs, which node runs each run;
          // A makes the calls in turn 1; B ends the run in turn 2.
          const b = await requestJson(`${urls[0]}/api/agents`, {
            method: "POST",
            headers: tenant.session,
            body: { name: "B", model: "local" }
          })
          const a = await requestJson(`${urls[0]}/api/agents`, {
            method: "POST",
            headers: tenant.session,
            body: { name: "A", model: "local", toolIds }
          })
          const team = await requestJson(`${urls[0]}/api/teams`, {
            method: "POST",
            headers: tenant.session,
            body: {
              name: "Lookup and ship",
              members: [
                { agentId: b.id, role: "sums up" },
                { agentId: a.id, role: "looks up and ships" }
              ]
            }
          })
          const ids = await Promise.all(
            Array.from({ length: count }, async (_, i) => {
              const started = await requestJson(`${urls[i % urls.length]}/api/v1/teams/${team.id}/run`, {
                method: "POST",
                headers: tenant.bearer,
                body: { mission: missionOf(`run-${i}`) }
              })
              return started.data.runId as string
            })
          )
          return { bearer: tenant.bearer, teamId: team.id as string, a: a.id as string, ids }
        })
        const lookupKey = (id: string) => `${id}:turn-1:local_call_1`
        const shipKey = (id: string) => `${id}:turn-1:local_call_2`
        const keysOf = (receiver: FakeReceiver.FakeReceiver) => {
          const made = new Map<string, number>()
          for (const received of receiver.requests) {
            const key = received.headers["idempotency-key"] ?? "(none)"
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
        // Which node runs which run: the node that logged its turn 0.
        const ran = yield* Effect.promise(() =>
          eventually(() => {
            const lines = linesWith(nodes, "Team turn completed").filter(({ line }) => line.annotations.turn === 0)
            assert.strictEqual(new Set(lines.map(({ line }) => line.annotations.runId)).size, count)
            return lines
          })
        )
        const victim = nodes
          .map((node) => ({
            node,
            ids: [
              ...new Set(
                ran.flatMap(({ line, node: ranOn }) =>
                  ranOn === node.runnerAddress ? [line.annotations.runId as string] : []
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
        const killedAt = Date.now()
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
                "runs whose call is not made again"
              )
            },
            { timeoutMs: 90_000, intervalMs: 100 }
          )
        )
        const madeAgainAfter = Date.now() - killedAt
        shipments.releaseHeld()
        const finals = yield* Effect.promise(() => awaitRuns(survivors, setup.bearer, setup.teamId, setup.ids, 120_000))
        assert.deepStrictEqual(
          finals.map((run) => run.status),
          Array(count).fill("completed"),
          JSON.stringify(finals.filter((run) => run.status !== "completed"))
        )
        for (const run of finals) {
          assert.strictEqual(run.stopReason, "done", run.runId)
          assert.strictEqual(run.turns, 3, run.runId)
          // A's turn answered from the shipment's result.
          assert.include(run.transcript.data[1].content, "ship_order answered", run.runId)
        }

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
        // And so the runs' transcripts say, on A's turn, each attempt counted; the other turns made none.
        for (const run of finals) {
          const [b0, a1, b2] = run.transcript.data
          assert.isUndefined(b0.toolCalls, run.runId)
          assert.isUndefined(b2.toolCalls, run.runId)
          assert.strictEqual(a1.agentId, setup.a, run.runId)
          assert.deepStrictEqual(
            a1.toolCalls.map((call: any) => [call.callId, call.tool, call.status, call.attempts, call.scope]),
            [
              ["local_call_1", "lookup_order", "succeeded", 1, "turn-1"],
              ["local_call_2", "ship_order", "succeeded", shipmentsMade.get(shipKey(run.runId)), "turn-1"]
            ],
            run.runId
          )
        }
        console.log(
          `kill -9 of a node running ${victimIds.length} of ${count} team runs: its ${victimIds.length} calls ` +
            `in flight were made again on the survivors ${madeAgainAfter} ms after the kill, none of the completed ones`
        )
      }),
    300_000
  )
})
