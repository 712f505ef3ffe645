import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import { AgentsRepo } from "../Agents/Repo.ts"
import { ApprovalDefaults, applyDefaults } from "../Approvals/Defaults.ts"
import { TokenBudget } from "../Billing/Budget.ts"
import { AgentId, type TenantId } from "../Domain/Ids.ts"
import { KnowledgeSearch } from "../Knowledge/Search.ts"
import { Models } from "../Models/Models.ts"
import type { RunKind } from "./CallsRepo.ts"
import type { CallContext } from "./Invoke.ts"
import { type LoopModelRequest, requestTokens, ToolLoop } from "./Loop.ts"
import { ToolsRepo } from "./Repo.ts"
import type { Tool } from "./Tool.ts"

/**
 * What the runs need to give an agent its tools: the tools themselves (the
 * agent's, narrowed by a step's), and how an `agent` tool asks another agent.
 */
export class AgentTools extends Context.Service<AgentTools>()("agent-host/AgentTools", {
  make: Effect.gen(function* () {
    const tools = yield* ToolsRepo
    const agents = yield* AgentsRepo
    const models = yield* Models
    const budget = yield* TokenBudget
    const knowledge = yield* KnowledgeSearch
    const loop = yield* ToolLoop
    const approvalDefaults = yield* ApprovalDefaults

    /**
     * The active tools of `toolIds` (in their order), narrowed to `only`
     * when given. A tool deleted or made inactive since the agent was saved
     * is left out, as a tool the agent no longer has. The tenant's approval
     * defaults fill what a tool's policy leaves out.
     */
    const toolsOf = (tenantId: TenantId, toolIds: ReadonlyArray<string>, only?: ReadonlyArray<string> | undefined) =>
      Effect.gen(function* () {
        const wanted = only === undefined ? toolIds : toolIds.filter((id) => only.includes(id))
        if (wanted.length === 0) return []
        const [found, defaults] = yield* Effect.all(
          [
            Effect.forEach(wanted, (id) => tools.findById(tenantId, id), { concurrency: 8 }),
            approvalDefaults.stored(tenantId)
          ],
          { concurrency: "unbounded" }
        )
        const active = found.flatMap(
          (tool): Array<Tool> => (Option.isSome(tool) && tool.value.status === "active" ? [tool.value] : [])
        )
        return applyDefaults(defaults, active)
      })

    /** One model call under a reservation of the tenant's tokens, settled with what it used. */
    const reservedCall = (tenantId: TenantId, model: string) => (request: LoopModelRequest) =>
      budget.reserving(
        budget.reserve(tenantId, { model, promptTokens: requestTokens(models, model, request) }),
        (held) => models.generate({ ...request, model, maxOutputTokens: held.maxOutputTokens }),
        (reply, held) => Effect.as(budget.settle(held, reply.inputTokens + reply.outputTokens), reply)
      )

    /**
     * How an `agent` tool of a run asks another agent: the agent answers the
     * message from its instructions, its knowledge and its own tools (the
     * chain grows by it, so depth and self-reach stay bounded), spending the
     * tenant's tokens. Its loop is not replayed: the call that asked it is.
     */
    const askAgent =
      (run: {
        readonly tenantId: TenantId
        readonly runKind: RunKind
        readonly runId: string
        readonly scope: string
      }) =>
      (agentId: string, message: string, chain: ReadonlyArray<string>): Effect.Effect<string, string> =>
        Effect.gen(function* () {
          const found = yield* agents.findById(run.tenantId, AgentId.make(agentId))
          if (Option.isNone(found) || found.value.status !== "active") {
            return yield* Effect.fail(`Agent ${agentId} is missing or inactive`)
          }
          const agent = found.value
          const model = agent.model ?? ""
          const { system } = yield* knowledge.ground({
            tenantId: run.tenantId,
            instructions: agent.instructions,
            knowledgeIds: agent.knowledgeIds,
            query: message,
            budget: () =>
              Math.floor(
                (models.contextBudget(model) - models.countTokens(agent.instructions) - models.countTokens(message)) / 2
              )
          })
          const nestedChain = [...chain, agentId]
          const nested = crypto.randomUUID()
          const outcome = yield* loop.run({
            key: { ...run, scope: `${run.scope}/${nestedChain.join(">")}#${nested}` },
            durable: false,
            // Its calls are numbered from 1 again: told apart from the asking loop's by an id of its own.
            idempotencyScope: nested,
            system,
            messages: [{ role: "user", content: message }],
            tools: yield* toolsOf(run.tenantId, agent.toolIds),
            agentChain: nestedChain,
            askAgent: askAgent(run),
            callModel: reservedCall(run.tenantId, model)
          })
          return outcome.reply.text
        }).pipe(
          Effect.catch((error) =>
            Effect.fail(
              typeof error === "string"
                ? error
                : "detail" in error && typeof error.detail === "string"
                  ? error.detail
                  : "message" in error && typeof error.message === "string"
                    ? error.message
                    : `The agent could not answer (${error._tag})`
            )
          ),
          Effect.catchDefect(() => Effect.fail("The agent could not answer"))
        )

    return { toolsOf, askAgent, reservedCall } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make)
}

export type AskAgent = NonNullable<CallContext["askAgent"]>
