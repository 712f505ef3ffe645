import { Context, Effect, Layer, Option } from "effect"
import { AppConfig } from "../Config.ts"
import type { AgentId, TenantId } from "../Domain/Ids.ts"
import { BadRequest, NotFound } from "../Domain/Problems.ts"
import { type CreateAgent, defaultPageSize, type UpdateAgent } from "./Api.ts"
import { AgentsRepo } from "./Repo.ts"

// Cursors are opaque to clients: the last id of the page, base64url-encoded.
const encodeCursor = (id: string) => Buffer.from(id, "utf8").toString("base64url")
const decodeCursor = (cursor: string): Option.Option<string> => {
  const id = Buffer.from(cursor, "base64url").toString("utf8")
  return encodeCursor(id) === cursor && id.length > 0 ? Option.some(id) : Option.none()
}

const invalidCursor = new BadRequest({
  detail: "query.cursor: not a cursor returned by this API",
  errors: [{ path: ["query", "cursor"], message: "Expected the nextCursor of a previous page" }]
})

const notFound = (id: string) => new NotFound({ detail: `No agent ${id}` })

/** Agent definitions of a tenant. */
export class Agents extends Context.Service<Agents>()("agent-host/Agents", {
  make: Effect.gen(function*() {
    const repo = yield* AgentsRepo
    const config = yield* AppConfig

    const list = Effect.fn("Agents.list")(function*(tenantId: TenantId, options: {
      readonly activeOnly: boolean
      readonly limit?: number | undefined
      readonly cursor?: string | undefined
    }) {
      let after: string | null = null
      if (options.cursor !== undefined) {
        const decoded = decodeCursor(options.cursor)
        if (Option.isNone(decoded)) return yield* invalidCursor
        after = decoded.value
      }
      const page = yield* repo.list(tenantId, {
        activeOnly: options.activeOnly,
        after,
        limit: options.limit ?? defaultPageSize
      })
      return {
        data: page.data,
        total: page.total,
        nextCursor: page.lastId === null ? null : encodeCursor(page.lastId)
      }
    })

    const create = Effect.fn("Agents.create")(function*(tenantId: TenantId, input: CreateAgent) {
      return yield* repo.insert(tenantId, {
        name: input.name,
        description: input.description ?? "",
        model: input.model ?? config.defaultModel,
        instructions: input.instructions ?? "",
        status: input.status ?? "active",
        memoryEnabled: input.memoryEnabled ?? true
      })
    })

    const get = Effect.fn("Agents.get")(function*(tenantId: TenantId, id: AgentId) {
      const agent = yield* repo.findById(tenantId, id)
      if (Option.isNone(agent)) return yield* notFound(id)
      return agent.value
    })

    const update = Effect.fn("Agents.update")(function*(tenantId: TenantId, id: AgentId, input: UpdateAgent) {
      const agent = yield* repo.update(tenantId, id, input)
      if (Option.isNone(agent)) return yield* notFound(id)
      return agent.value
    })

    const remove = Effect.fn("Agents.remove")(function*(tenantId: TenantId, id: AgentId) {
      const removed = yield* repo.remove(tenantId, id)
      if (!removed) return yield* notFound(id)
    })

    return { list, create, get, update, remove } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make).pipe(Layer.provide(AgentsRepo.layer))
}
