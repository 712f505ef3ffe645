import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type { PageRequest } from "../Domain/Page.ts"
import type { Plan } from "../Auth/Api.ts"
import { TokenBudget } from "../Billing/Budget.ts"
import { Limits } from "../Billing/Limits.ts"
import { AppConfig, type TeamLimits } from "../Config.ts"
import type { TenantId } from "../Domain/Ids.ts"
import { BadRequest, NotFound } from "../Domain/Problems.ts"
import type { WebhookState } from "../Webhooks/Api.ts"
import { ownedWebhook } from "../Webhooks/Owned.ts"
import { Webhooks } from "../Webhooks/Webhooks.ts"
import {
  type CreateTeam,
  defaultMaxTurns,
  defaultResultApproval,
  defaultTimeoutMs,
  defaultTokenBudget,
  type RoomInput,
  type Team,
  type TeamView,
  type UpdateTeam
} from "./Api.ts"
import { type TeamFields, TeamsRepo } from "./Repo.ts"
import * as Traced from "../Observability/Traced.ts"

const notFound = (id: string) => new NotFound({ detail: `No team ${id}` })

const noWebhook: WebhookState = { outputWebhookUrl: null, webhookEnabled: false, webhookDisabledReason: null }

export const ownerOf = (teamId: string) => ({ kind: "team" as const, id: teamId })

// A team's limits and the settings that bound them per plan.
const limitSettings = {
  maxTurns: "TEAM_MAX_TURNS",
  tokenBudget: "TEAM_TOKEN_BUDGET",
  timeoutMs: "TEAM_TIMEOUT"
} as const
const limitUnits = { maxTurns: "turns", tokenBudget: "tokens", timeoutMs: "ms" } as const

/** A team's limits held to its plan's bounds: what a run of it may take, whenever the team was set. */
export const withinPlan = <T extends TeamLimits>(team: T, bounds: TeamLimits): T => ({
  ...team,
  maxTurns: Math.min(team.maxTurns, bounds.maxTurns),
  tokenBudget: Math.min(team.tokenBudget, bounds.tokenBudget),
  timeoutMs: Math.min(team.timeoutMs, bounds.timeoutMs)
})

interface Issue {
  readonly path: ReadonlyArray<string | number>
  readonly message: string
}

const badRequest = (issues: ReadonlyArray<Issue>) =>
  new BadRequest({
    detail: `${issues[0]!.path.join(".")}: ${issues[0]!.message}${issues.length > 1 ? ` (and ${issues.length - 1} more)` : ""}`,
    errors: issues.map((issue) => ({ path: [...issue.path], message: issue.message }))
  })

/** What a create may leave out is as here (its name and members it always sends). */
const defaults: TeamFields = {
  name: "",
  description: "",
  mode: "chat",
  status: "active",
  members: [],
  turnTaking: "round_robin",
  leaderAgentId: null,
  maxTurns: defaultMaxTurns,
  tokenBudget: defaultTokenBudget,
  timeoutMs: defaultTimeoutMs,
  resultApproval: defaultResultApproval
}

/** The team a create or an update makes: the fields sent over `current` (the defaults, for a create). */
const settle = (input: UpdateTeam, current: TeamFields): TeamFields => {
  const turnTaking = input.turnTaking ?? current.turnTaking
  return {
    name: input.name ?? current.name,
    description: input.description ?? current.description,
    mode: input.mode ?? current.mode,
    status: input.status ?? current.status,
    members:
      input.members === undefined
        ? current.members
        : input.members.map((member) => ({ agentId: member.agentId, role: member.role ?? "" })),
    turnTaking,
    // Moving to round robin drops the leader unless one is given.
    leaderAgentId:
      input.leaderAgentId !== undefined ? input.leaderAgentId : turnTaking === "leader" ? current.leaderAgentId : null,
    maxTurns: input.maxTurns ?? current.maxTurns,
    tokenBudget: input.tokenBudget ?? current.tokenBudget,
    timeoutMs: input.timeoutMs ?? current.timeoutMs,
    // What is sent of the setting over what it was.
    resultApproval: { ...current.resultApproval, ...input.resultApproval }
  }
}

/** Team definitions of a tenant, with their rooms' webhooks. */
export class Teams extends Context.Service<Teams>()("agent-host/Teams", {
  make: Effect.gen(function* () {
    const repo = yield* TeamsRepo
    const webhooks = yield* Webhooks
    const limits = yield* Limits
    const budget = yield* TokenBudget
    const config = yield* AppConfig

    /** The plan's bounds on a team's limits (read now: a plan change applies at once). */
    const boundsOf = Effect.fnUntraced(function* (tenantId: TenantId) {
      const { plan } = yield* budget.standing(tenantId)
      return { plan, bounds: config.teamLimits[plan] }
    })

    /** The limits sent that pass the plan's bounds, each named with the setting that bounds it. */
    const overPlan = (plan: Plan, bounds: TeamLimits, sent: Partial<TeamLimits>): ReadonlyArray<Issue> =>
      (["maxTurns", "tokenBudget", "timeoutMs"] as const).flatMap((limit) => {
        const value = sent[limit]
        return value === undefined || value <= bounds[limit]
          ? []
          : [
              {
                path: ["payload", limit],
                message:
                  `The ${plan} plan allows at most ${bounds[limit]} ${limitUnits[limit]} ` +
                  `(${plan.toUpperCase()}_${limitSettings[limit]})`
              }
            ]
      })

    const withRoom = (row: Team, room: WebhookState, signingSecret: string | null = null): TeamView => ({
      ...row,
      room: signingSecret === null ? room : { ...room, signingSecret }
    })

    /**
     * What is wrong with a team whose fields have the right shape: members
     * that are not distinct agents of the tenant, a leader that is missing,
     * not a member, or given for round robin.
     */
    const issuesOf = Traced.fn("Teams.validate")(function* (tenantId: TenantId, team: TeamFields) {
      const issues: Array<Issue> = []
      const agents = yield* repo.agentsAmong(
        tenantId,
        team.members.map((member) => member.agentId)
      )
      const seen = new Set<string>()
      team.members.forEach((member, i) => {
        if (seen.has(member.agentId)) {
          issues.push({ path: ["payload", "members", i, "agentId"], message: "Expected each agent at most once" })
        } else if (!agents.has(member.agentId)) {
          issues.push({
            path: ["payload", "members", i, "agentId"],
            message: `No agent ${member.agentId} in this account`
          })
        }
        seen.add(member.agentId)
      })
      if (team.turnTaking === "leader") {
        if (team.leaderAgentId === null) {
          issues.push({
            path: ["payload", "leaderAgentId"],
            message: "Expected the leader's agentId for `leader` turn-taking"
          })
        } else if (!seen.has(team.leaderAgentId)) {
          issues.push({ path: ["payload", "leaderAgentId"], message: "Expected one of the members' agentIds" })
        }
      } else if (team.leaderAgentId !== null) {
        issues.push({
          path: ["payload", "leaderAgentId"],
          message: "Expected null: only `leader` turn-taking has a leader"
        })
      }
      return issues
    })

    const validate = (tenantId: TenantId, team: TeamFields) =>
      Effect.flatMap(issuesOf(tenantId, team), (issues) =>
        issues.length > 0 ? Effect.fail(badRequest(issues)) : Effect.void
      )

    const configureRoom = (tenantId: TenantId, teamId: string, room: RoomInput | undefined) =>
      room === undefined || (room.outputWebhookUrl === undefined && room.webhookEnabled === undefined)
        ? Effect.map(webhooks.state(tenantId, ownerOf(teamId)), (state) => ({ state, signingSecret: null }))
        : webhooks.configure(tenantId, ownerOf(teamId), { url: room.outputWebhookUrl, enabled: room.webhookEnabled }, [
            "payload",
            "room",
            "outputWebhookUrl"
          ])

    /** A page of the tenant's teams with their rooms; the key-authenticated list shows the active ones only. */
    const list = Traced.fn("Teams.list")(function* (
      tenantId: TenantId,
      query: PageRequest,
      options?: {
        readonly activeOnly: boolean
      }
    ) {
      const page = yield* repo.list(tenantId, query, options?.activeOnly ? "active" : undefined)
      const rooms =
        page.data.length === 0
          ? new Map<string, WebhookState>()
          : yield* webhooks.states(
              tenantId,
              "team",
              page.data.map((team) => team.id)
            )
      return { ...page, data: page.data.map((row) => withRoom(row, rooms.get(row.id) ?? noWebhook)) }
    })

    const create = Traced.fn("Teams.create")(function* (tenantId: TenantId, input: CreateTeam) {
      const fields = settle(input, defaults)
      // Limits past the plan's are refused; a default past them is the plan's bound.
      const { bounds, plan } = yield* boundsOf(tenantId)
      const over = overPlan(plan, bounds, input)
      if (over.length > 0) return yield* badRequest(over)
      yield* validate(tenantId, withinPlan(fields, bounds))
      const row = yield* limits.admit(tenantId, "teams", repo.insert(tenantId, withinPlan(fields, bounds)))
      // A refused webhook URL leaves no team behind.
      const room = yield* configureRoom(tenantId, row.id, input.room).pipe(
        Effect.tapError(() => repo.remove(tenantId, row.id))
      )
      return withRoom(row, room.state, room.signingSecret)
    })

    const find = (tenantId: TenantId, id: string) =>
      Effect.flatMap(repo.findById(tenantId, id), (row) =>
        Option.isNone(row) ? Effect.fail(notFound(id)) : Effect.succeed(row.value)
      )

    const get = Traced.fn("Teams.get")(function* (tenantId: TenantId, id: string) {
      const row = yield* find(tenantId, id)
      return withRoom(row, yield* webhooks.state(tenantId, ownerOf(id)))
    })

    /** An active team of the tenant, for a run; anything else is not found. */
    const active = Traced.fn("Teams.active")(function* (tenantId: TenantId, id: string) {
      const row = yield* repo.findById(tenantId, id)
      if (Option.isNone(row) || row.value.status !== "active")
        return yield* new NotFound({ detail: `No active team ${id}` })
      return row.value
    })

    const update = Traced.fn("Teams.update")(function* (tenantId: TenantId, id: string, input: UpdateTeam) {
      const fields = settle(input, yield* find(tenantId, id))
      // Only the limits sent are checked: a team set under a larger plan keeps
      // its limits, and its runs are held to the plan's bounds (TeamRuns.start).
      if (input.maxTurns !== undefined || input.tokenBudget !== undefined || input.timeoutMs !== undefined) {
        const { bounds, plan } = yield* boundsOf(tenantId)
        const over = overPlan(plan, bounds, input)
        if (over.length > 0) return yield* badRequest(over)
      }
      yield* validate(tenantId, fields)
      // The room first: a refused URL changes nothing else.
      const room = yield* configureRoom(tenantId, id, input.room)
      const row = yield* repo.update(tenantId, id, fields)
      if (Option.isNone(row)) return yield* notFound(id)
      return withRoom(row.value, room.state, room.signingSecret)
    })

    const remove = Traced.fn("Teams.remove")(function* (tenantId: TenantId, id: string) {
      const removed = yield* repo.remove(tenantId, id)
      if (!removed) return yield* notFound(id)
      yield* webhooks.remove(tenantId, ownerOf(id))
    })

    const webhook = ownedWebhook({ service: "Teams", webhooks, owner: ownerOf, find })

    return { list, create, get, active, update, remove, ...webhook, boundsOf } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make).pipe(
    Layer.provide([TeamsRepo.layer, Limits.layer, TokenBudget.layer])
  )
}
