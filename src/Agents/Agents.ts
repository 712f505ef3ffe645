import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import { TokenBudget } from "../Billing/Budget.ts"
import { Limits } from "../Billing/Limits.ts"
import { AppConfig } from "../Config.ts"
import type { AgentId, TenantId } from "../Domain/Ids.ts"
import type { PageRequest } from "../Domain/Page.ts"
import { invalidField, invalidFields, NotFound } from "../Domain/Problems.ts"
import { KnowledgeSearch } from "../Knowledge/Search.ts"
import { ToolsRepo } from "../Tools/Repo.ts"
import type { Agent } from "./Api.ts"
import { AgentsRepo } from "./Repo.ts"
import { formatIssues } from "../Tools/ResponseFormatCheck.ts"
import * as Traced from "../Observability/Traced.ts"

const notFound = (id: string) => new NotFound({ detail: `No agent ${id}` })

/** Agent definitions of a tenant. */
export class Agents extends Context.Service<Agents>()("agent-host/Agents", {
  make: Effect.gen(function* () {
    const repo = yield* AgentsRepo
    const config = yield* AppConfig
    const budget = yield* TokenBudget
    const knowledge = yield* KnowledgeSearch
    const limits = yield* Limits
    const tools = yield* ToolsRepo

    /** The ids once each, in order, when every one is a knowledge base of the tenant. */
    const checkKnowledge = Traced.fn("Agents.checkKnowledge")(function* (
      tenantId: TenantId,
      ids: ReadonlyArray<string>
    ) {
      const unique = [...new Set(ids)]
      const missing = yield* knowledge.missing(tenantId, unique)
      if (missing.length > 0) {
        return yield* invalidField(
          "knowledgeIds",
          `No knowledge base ${missing.map((id) => JSON.stringify(id)).join(", ")}`
        )
      }
      return unique
    })

    /** The ids once each, in order, when every one is an active tool of the tenant; else a 400 naming each other. */
    const checkTools = Traced.fn("Agents.checkTools")(function* (tenantId: TenantId, ids: ReadonlyArray<string>) {
      const active = yield* tools.activeIds(tenantId, ids)
      const issues = ids.flatMap((id, i) =>
        active.has(id) ? [] : [{ path: ["toolIds", i], message: `No active tool ${JSON.stringify(id)}` }]
      )
      if (issues.length > 0) return yield* invalidFields(issues)
      return [...new Set(ids)]
    })

    /** A page of the tenant's agents; the key-authenticated list shows the active ones only. */
    const list = (tenantId: TenantId, page: PageRequest, options?: { readonly activeOnly: boolean }) =>
      repo.list(tenantId, page, options?.activeOnly ? "active" : undefined)

    /** A 400 naming where the response format's schema does not compile. */
    const checkFormat = (format: Parameters<typeof formatIssues>[0]) => {
      const issues = formatIssues(format, ["responseFormat"])
      return issues.length > 0 ? Effect.fail(invalidFields(issues)) : Effect.void
    }

    const create = Traced.fn("Agents.create")(function* (tenantId: TenantId, input: typeof Agent.jsonCreate.Type) {
      yield* checkFormat(input.responseFormat)
      const model = input.model ?? config.defaultModel
      yield* budget.checkModel(tenantId, model)
      const knowledgeIds = yield* checkKnowledge(tenantId, input.knowledgeIds ?? [])
      const toolIds = yield* checkTools(tenantId, input.toolIds ?? [])
      return yield* limits.admit(tenantId, "agents", repo.insert(tenantId, { ...input, model, knowledgeIds, toolIds }))
    })

    const get = Traced.fn("Agents.get")(function* (tenantId: TenantId, id: AgentId) {
      const agent = yield* repo.findById(tenantId, id)
      if (Option.isNone(agent)) return yield* notFound(id)
      return agent.value
    })

    const update = Traced.fn("Agents.update")(function* (
      tenantId: TenantId,
      id: AgentId,
      input: typeof Agent.jsonUpdate.Type
    ) {
      yield* checkFormat(input.responseFormat)
      if (input.model !== undefined) yield* budget.checkModel(tenantId, input.model)
      const knowledgeIds =
        input.knowledgeIds === undefined ? undefined : yield* checkKnowledge(tenantId, input.knowledgeIds)
      const toolIds = input.toolIds === undefined ? undefined : yield* checkTools(tenantId, input.toolIds)
      const agent = yield* repo.update(tenantId, id, {
        ...input,
        ...(knowledgeIds === undefined ? {} : { knowledgeIds }),
        ...(toolIds === undefined ? {} : { toolIds })
      })
      if (Option.isNone(agent)) return yield* notFound(id)
      return agent.value
    })

    const remove = Traced.fn("Agents.remove")(function* (tenantId: TenantId, id: AgentId) {
      const removed = yield* repo.remove(tenantId, id)
      if (!removed) return yield* notFound(id)
    })

    return { list, create, get, update, remove } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make).pipe(
    Layer.provide([AgentsRepo.layer, TokenBudget.layer, KnowledgeSearch.layer, Limits.layer, ToolsRepo.layer])
  )
}
