import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as Tool from "effect/ai/Tool"
import * as Toolkit from "effect/ai/Toolkit"
import { SqlClient } from "effect/sql/SqlClient"
import { Agents } from "../Agents/Agents.ts"
import { AgentsV1Api, ChatRequest, ChatResponse, V1AgentList } from "../Agents/Api.ts"
import { Chat } from "../Agents/Chat.ts"
import { CurrentPrincipal, RequiredScope, type Scope } from "../Auth/Api.ts"
import { CountedToday, Quota } from "../Billing/Quota.ts"
import { AppConfig } from "../Config.ts"
import { AgentId, OrchestrationId, TeamId } from "../Domain/Ids.ts"
import { Text } from "../Domain/Input.ts"
import { PageQuery } from "../Domain/Page.ts"
import {
  BadGateway,
  BadRequest,
  Conflict,
  Forbidden,
  GatewayTimeout,
  ModelNotAllowed,
  NotFound,
  OutputInvalid,
  ServiceUnavailable,
  TokenBudgetSpent,
  TooManyRequests,
  TooManyRunningRuns
} from "../Domain/Problems.ts"
import { SearchHit, SearchRequest } from "../Knowledge/SearchApi.ts"
import { KnowledgeSearch } from "../Knowledge/Search.ts"
import {
  Execution,
  ExecuteRequest,
  ExecutionNotStarted,
  ExecutionStarted,
  ExecutionsV1Api,
  OrchestrationsV1Api,
  V1OrchestrationList
} from "../Orchestrations/Api.ts"
import { Executions } from "../Orchestrations/Executions.ts"
import { Orchestrations } from "../Orchestrations/Orchestrations.ts"
import { RunHandle, TeamsV1Api, RunNotStarted, RunRequest, TeamList, TeamRunWithTranscript } from "../Teams/Api.ts"
import { TeamRuns } from "../Teams/TeamRuns.ts"
import { Teams } from "../Teams/Teams.ts"

// Every schema below is the REST route's own (src/*/Api.ts): a tool's input is
// the route's path ids beside its payload, its output the route's success.

/** A list's page, as the REST list routes take it, with `limit` as a number (MCP arguments are JSON). */
const PageParams = Schema.Struct({
  limit: Schema.optionalKey(Schema.toType(PageQuery.limit.schema)),
  cursor: PageQuery.cursor
})

/**
 * What a tool can fail with: the problems its REST route declares, plus the
 * key's refusals (scope, daily requests). A problem's message is its detail,
 * which is what the MCP client reads in the tool error.
 */
const Problem = Schema.Union([
  NotFound,
  BadRequest,
  Forbidden,
  TooManyRequests,
  Conflict,
  ServiceUnavailable,
  BadGateway,
  GatewayTimeout,
  TokenBudgetSpent,
  ModelNotAllowed,
  OutputInvalid,
  TooManyRunningRuns,
  ExecutionNotStarted,
  RunNotStarted
])

const tool = <const Name extends string, P extends Schema.Top, S extends Schema.Top>(
  name: Name,
  options: { readonly description: string; readonly parameters: P; readonly success: S; readonly readonly: boolean }
) =>
  Tool.make(name, {
    description: options.description,
    parameters: options.parameters,
    // As JSON: the toolkit encodes a result with the schema as given, and a Date is not JSON.
    success: Schema.toCodecJson(options.success),
    failure: Problem,
    dependencies: [CurrentPrincipal]
  })
    .annotate(Tool.Readonly, options.readonly)
    .annotate(Tool.Destructive, false)

export const ListAgents = tool("list_agents", {
  description: "The tenant's active agents, without their instructions, a page at a time (`limit`, `cursor`).",
  parameters: PageParams,
  success: V1AgentList,
  readonly: true
})

export const AskAgent = tool("ask_agent", {
  description:
    "Sends a message to an agent and returns its reply. Without `conversationId` a new conversation starts; " +
    "pass the returned `conversationId` to continue it (an agent with memory remembers its earlier turns).",
  parameters: Schema.Struct({ agentId: AgentId, ...ChatRequest.fields }),
  success: ChatResponse,
  readonly: false
})

export const ListOrchestrations = tool("list_orchestrations", {
  description: "The tenant's active orchestrations, without their steps, a page at a time (`limit`, `cursor`).",
  parameters: PageParams,
  success: V1OrchestrationList,
  readonly: true
})

export const RunOrchestration = tool("run_orchestration", {
  description:
    "Starts an execution of an orchestration on `input` (and `variables`) and returns its `executionId` at " +
    "once; it runs in the background: follow it with get_execution.",
  parameters: Schema.Struct({ orchestrationId: OrchestrationId, ...ExecuteRequest.fields }),
  success: ExecutionStarted,
  readonly: false
})

export const GetExecution = tool("get_execution", {
  description: "An execution's status, output or error, tokens and duration.",
  parameters: Schema.Struct({ executionId: Text }),
  success: Execution,
  readonly: true
})

export const ListTeams = tool("list_teams", {
  description: "The tenant's active teams, a page at a time (`limit`, `cursor`).",
  parameters: PageParams,
  success: TeamList,
  readonly: true
})

export const RunTeam = tool("run_team", {
  description:
    "Starts a run of a team on a mission and returns its `runId` at once; it runs in the background: follow " +
    "it with get_team_run.",
  parameters: Schema.Struct({ teamId: TeamId, ...RunRequest.fields }),
  success: RunHandle,
  readonly: false
})

export const GetTeamRun = tool("get_team_run", {
  description: "A team run's status, result or error, stop reason, tokens, and the first page of its transcript.",
  parameters: Schema.Struct({ teamId: Text, runId: Text }),
  success: TeamRunWithTranscript,
  readonly: true
})

export const SearchKnowledge = tool("search_knowledge", {
  description:
    "The chunks of a knowledge base's ready documents that best match the query, best first (`topK`, default 5).",
  parameters: Schema.Struct({ base: Text.check(Schema.isMaxLength(64)), ...SearchRequest.fields }),
  success: Schema.Struct({ data: Schema.Array(SearchHit) }),
  readonly: true
})

export const McpToolkit = Toolkit.make(
  ListAgents,
  AskAgent,
  ListOrchestrations,
  RunOrchestration,
  GetExecution,
  ListTeams,
  RunTeam,
  GetTeamRun,
  SearchKnowledge
)

/** The scope a key route requires, read from the route's declaration (keyOperation in src/Auth/Api.ts). */
const scopeOf = (endpoint: { readonly annotations: Context.Context<never> }) =>
  Context.get(endpoint.annotations, RequiredScope)

/** The key scope each tool needs: the scope of the REST route it stands for. */
export const toolScopes = {
  list_agents: scopeOf(AgentsV1Api.endpoints.list),
  ask_agent: scopeOf(AgentsV1Api.endpoints.chat),
  list_orchestrations: scopeOf(OrchestrationsV1Api.endpoints.list),
  run_orchestration: scopeOf(OrchestrationsV1Api.endpoints.execute),
  get_execution: scopeOf(ExecutionsV1Api.endpoints.get),
  list_teams: scopeOf(TeamsV1Api.endpoints.list),
  run_team: scopeOf(TeamsV1Api.endpoints.run),
  get_team_run: scopeOf(TeamsV1Api.endpoints.getRun),
  // Search has no key route (its twin is the session's /api/knowledge/{id}/search): it reads, as listing does.
  search_knowledge: "read"
} satisfies Record<keyof typeof McpToolkit.tools, Scope>

/** The tools' handlers: each calls the service its REST route calls, with the key's tenant. */
export const layer = McpToolkit.toLayer(
  Effect.gen(function* () {
    const agents = yield* Agents
    const chat = yield* Chat
    const orchestrations = yield* Orchestrations
    const executions = yield* Executions
    const teams = yield* Teams
    const runs = yield* TeamRuns
    const knowledge = yield* KnowledgeSearch
    const quota = yield* Quota
    const { enforceDailyLimits } = yield* AppConfig
    // Some reads (a team run's) take the database from their caller, as the REST handlers' context gives it.
    const sql = yield* SqlClient

    /**
     * A call as a key request: refused without the tool's scope, then counted
     * against the plan's daily requests like every key route (a refusal is
     * not counted), with the tenant of the key.
     */
    const asKey =
      (name: keyof typeof toolScopes) =>
      <A, E, R>(handle: (tenantId: CurrentPrincipal["Service"]["tenantId"]) => Effect.Effect<A, E, R>) =>
        Effect.provideService(
          Effect.gen(function* () {
            const principal = yield* CurrentPrincipal
            const required = toolScopes[name]
            if (principal._tag !== "ApiKey" || !principal.scopes.includes(required)) {
              return yield* new Forbidden({
                detail: `This API key lacks the "${required}" scope`,
                requiredScope: required
              })
            }
            if (!enforceDailyLimits) return yield* handle(principal.tenantId)
            const allowance = yield* quota.consume(principal.tenantId)
            return yield* Effect.provideService(handle(principal.tenantId), CountedToday, allowance.counted)
          }),
          SqlClient,
          sql
        )

    return {
      list_agents: (page) => asKey("list_agents")((tenantId) => agents.list(tenantId, page, { activeOnly: true })),
      ask_agent: ({ agentId, ...request }) => asKey("ask_agent")((tenantId) => chat.send(tenantId, agentId, request)),
      list_orchestrations: (page) =>
        asKey("list_orchestrations")((tenantId) => orchestrations.list(tenantId, page, { activeOnly: true })),
      run_orchestration: ({ orchestrationId, ...payload }) =>
        asKey("run_orchestration")((tenantId) => executions.start(tenantId, orchestrationId, { payload, headers: {} })),
      get_execution: ({ executionId }) => asKey("get_execution")((tenantId) => executions.get(tenantId, executionId)),
      list_teams: (page) => asKey("list_teams")((tenantId) => teams.list(tenantId, page, { activeOnly: true })),
      run_team: ({ teamId, ...payload }) =>
        asKey("run_team")((tenantId) => runs.start(tenantId, teamId, { payload, headers: {} })),
      get_team_run: ({ teamId, runId }) => asKey("get_team_run")((tenantId) => runs.get(tenantId, teamId, runId)),
      search_knowledge: ({ base, query, topK }) =>
        asKey("search_knowledge")((tenantId) =>
          Effect.gen(function* () {
            // As the REST search route: another tenant's base is not found.
            const missing = yield* knowledge.missing(tenantId, [base])
            if (missing.length > 0) return yield* new NotFound({ detail: `No knowledge base ${base}` })
            const found = yield* knowledge.search({ tenantId, knowledgeIds: [base], query, topK: topK ?? 5 })
            return { data: found.map(({ filename: _, ...hit }) => hit) }
          })
        )
    }
  })
).pipe(
  Layer.provide([Agents.layer, Chat.layer, Orchestrations.layer, Executions.layer, KnowledgeSearch.layer]),
  Layer.provide(TeamRuns.layer),
  Layer.provideMerge(Teams.layer)
)
