import { Effect } from "effect"
import { eventually } from "./Eventually.ts"
import { type Account, bearer, createAgent, TestClient } from "./TestServer.ts"

/** Creates a team through the management API; dies unless 201. */
export const createTeam = (account: Account, body: Record<string, unknown>) =>
  Effect.gen(function* () {
    const client = yield* TestClient
    const created = yield* client.request("POST", "/api/teams", {
      headers: bearer(account.token),
      body: { name: "Team", ...body }
    })
    if (created.status !== 201) return yield* Effect.die(new Error(`create team: ${created.status} ${created.text}`))
    return created.body as { id: string; [key: string]: any }
  })

/** `count` agents on `model`, named A, B, C..., and a team of them. */
export const teamOf = (account: Account, model: string, count: number, team: Record<string, unknown> = {}) =>
  Effect.gen(function* () {
    const agents: Array<{ id: string; name: string }> = []
    for (let i = 0; i < count; i++) {
      const name = String.fromCharCode(65 + i)
      agents.push(yield* createAgent(account, { name, model, instructions: `You are ${name}.` }))
    }
    const created = yield* createTeam(account, {
      members: agents.map((agent, i) => ({ agentId: agent.id, role: `role ${i}` })),
      ...(typeof team.turnTaking === "string" && team.turnTaking === "leader" && team.leaderAgentId === undefined
        ? { leaderAgentId: agents[0]!.id }
        : {}),
      ...team
    })
    return { team: created, agents }
  })

/** Polls the run (session route) until it is final, within `timeoutMs`. */
export const awaitRun = (account: Account, teamId: string, runId: string, timeoutMs = 30_000) =>
  Effect.flatMap(TestClient, (client) =>
    eventually(
      Effect.flatMap(
        client.request("GET", `/api/teams/${teamId}/runs/${runId}`, { headers: bearer(account.token) }),
        (got) =>
          got.status !== 200
            ? Effect.die(new Error(`get run: ${got.status} ${got.text}`))
            : ["completed", "failed", "cancelled"].includes(got.body.status)
              ? Effect.succeed(got.body)
              : Effect.die(new Error(`run not final after ${timeoutMs} ms: ${got.text}`))
      ),
      { timeoutMs, intervalMs: 100 }
    )
  )

/** Starts a run with an API key on /api/v1; dies unless 202. */
export const startRun = (key: string, teamId: string, mission: string) =>
  Effect.gen(function* () {
    const client = yield* TestClient
    const started = yield* client.request("POST", `/api/v1/teams/${teamId}/run`, {
      headers: bearer(key),
      body: { mission }
    })
    if (started.status !== 202) return yield* Effect.die(new Error(`run: ${started.status} ${started.text}`))
    return started.body.data.runId as string
  })
