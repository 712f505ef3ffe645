import { Context, Effect, Layer } from "effect"
import { AppConfig } from "../Config.ts"
import type { TenantId } from "../Domain/Ids.ts"
import { type ScoredChunk, SearchRepo } from "./SearchRepo.ts"

// A query longer than this is cut (at a space when there is one): grounding
// queries are whole prompts, and a few hundred words already match any chunk
// worth finding; an OR of thousands of lexemes would only cost time.
const maxQueryChars = 2_000

const queryOf = (text: string) => {
  if (text.length <= maxQueryChars) return text
  const cut = text.lastIndexOf(" ", maxQueryChars)
  return text.slice(0, cut > maxQueryChars / 2 ? cut : maxQueryChars)
}

/** Full-text retrieval over a tenant's knowledge bases: the search route and grounding both use it. */
export class KnowledgeSearch extends Context.Service<KnowledgeSearch>()("agent-host/KnowledgeSearch", {
  make: Effect.gen(function*() {
    const repo = yield* SearchRepo
    const config = yield* AppConfig

    /** The best `topK` chunks of the given bases (those that exist and are the tenant's) for `query`, best first. */
    const search = Effect.fn("KnowledgeSearch.search")(function*(input: {
      readonly tenantId: TenantId
      readonly knowledgeIds: ReadonlyArray<string>
      readonly query: string
      readonly topK?: number | undefined
    }) {
      const query = queryOf(input.query)
      if (input.knowledgeIds.length === 0 || query.trim() === "") return [] as ReadonlyArray<ScoredChunk>
      return yield* repo.search({
        tenantId: input.tenantId,
        knowledgeIds: [...new Set(input.knowledgeIds)],
        query,
        topK: input.topK ?? config.knowledgeTopK
      })
    })

    /** The ids among `ids` that are not knowledge bases of the tenant. */
    const missing = Effect.fn("KnowledgeSearch.missing")(function*(tenantId: TenantId, ids: ReadonlyArray<string>) {
      const found = yield* repo.existing(tenantId, ids)
      return ids.filter((id) => !found.has(id))
    })

    return { search, missing } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make).pipe(Layer.provide(SearchRepo.layer))
}
