import { Effect, Schema } from "effect"
import { TeamId } from "../../src/Domain/Ids.ts"
import { Team } from "../../src/Teams/Api.ts"
import { eventually } from "./Eventually.ts"
import { type Account, apiClient, createAgent } from "./TestServer.ts"

/** A team to create as a client sends it (ids as plain strings); `name` defaults to "Team". */
export type TeamBody = Omit<typeof Team.jsonCreate.Encoded, "name"> & { readonly name?: string }

/** Creates a team through the management API's typed client; dies unless it is created. */
export const createTeam = (account: Account, body: TeamBody) =>
  Effect.gen(function* () {
    const payload = yield* Schema.decodeEffect(Team.jsonCreate)({ name: "Team", ...body })
    return yield* (yield* apiClient(account.token)).teams.create({ payload })
  }).pipe(Effect.orDie)

/** `count` agents on `model`, named A, B, C..., and a team of them (led by A for `leader` unless told). */
export const teamOf = (account: Account, model: string, count: number, team: Partial<TeamBody> = {}) =>
  Effect.gen(function* () {
    const agents: Array<{ id: string; name: string }> = []
    for (let i = 0; i < count; i++) {
      const name = String.fromCharCode(65 + i)
      agents.push(yield* createAgent(account, { name, model, instructions: `You are ${name}.` }))
    }
    const created = yield* createTeam(account, {
      members: agents.map((agent, i) => ({ agentId: agent.id, role: `role ${i}` })),
      ...(team.turnTaking === "leader" && team.leaderAgentId === undefined ? { leaderAgentId: agents[0]!.id } : {}),
      ...team
    })
    return { team: created, agents }
  })

const final: ReadonlyArray<string> = ["completed", "failed", "cancelled"]

/** Polls the run (session route) until it is final, within `timeoutMs`; the run with its transcript. */
export const awaitRun = (account: Account, teamId: string, runId: string, timeoutMs = 30_000) =>
  Effect.flatMap(apiClient(account.token), (api) =>
    eventually(
      Effect.flatMap(Effect.orDie(api.teams.getRun({ params: { id: TeamId.make(teamId), runId } })), (run) =>
        final.includes(run.status)
          ? Effect.succeed(run)
          : Effect.die(new Error(`run not final after ${timeoutMs} ms: ${JSON.stringify(run)}`))
      ),
      { timeoutMs, intervalMs: 100 }
    )
  )

/** Starts a run with an API key on /api/v1; dies unless it is accepted. Its id. */
export const startRun = (key: string, teamId: string, mission: string) =>
  Effect.gen(function* () {
    const api = yield* apiClient(key)
    const started = yield* api.v1Teams.run({ params: { id: TeamId.make(teamId) }, headers: {}, payload: { mission } })
    return started.data.runId
  }).pipe(Effect.orDie)
