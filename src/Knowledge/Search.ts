import * as Cache from "effect/Cache"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { AppConfig } from "../Config.ts"
import type { TenantId } from "../Domain/Ids.ts"
import { fitSources, type GroundingSource, toSource, withSources } from "./Grounding.ts"
import { type ScoredChunk, SearchRepo } from "./SearchRepo.ts"
import * as Traced from "../Observability/Traced.ts"

// A query longer than this is cut (at a space when there is one): grounding
// queries are whole prompts, and a few hundred words already match any chunk
// worth finding; an OR of thousands of lexemes would only cost time.
const maxQueryChars = 2_000

// Any word of a query matches, and Postgres ranks without weighing how rare a
// word is; so in the `simple` configuration (no stop words of its own) "how
// do I report a vulnerability" would rank every chunk with "a" or "I" beside
// the one about vulnerabilities, and make every chunk a candidate to rank.
// The commonest function words of a few languages are dropped from queries
// (never from the index), unless the query has nothing else.
const stopWords = new Set(
  (
    "a an and are as at be but by can do does for from how i if in into is it its me my no not of on or our so " +
    "than that the their them then there these they this to was we were what when where which who why will with " +
    "you your le la les un une des de du et ou est en au aux ce il elle on pour par sur dans que qui el los las " +
    "y o es por con para del al der die das ein eine und oder ist zu mit von den dem im"
  ).split(" ")
)

const queryOf = (text: string) => {
  const cut = text.lastIndexOf(" ", maxQueryChars)
  const bounded = text.length <= maxQueryChars ? text : text.slice(0, cut > maxQueryChars / 2 ? cut : maxQueryChars)
  const words = bounded.split(/(\s+)/)
  const kept = words.filter(
    (word) => !stopWords.has(word.toLowerCase().replace(/^[^\p{L}\p{N}]+|[^\p{L}\p{N}]+$/gu, ""))
  )
  return kept.join("").trim() === "" ? bounded : kept.join("")
}

/** Full-text retrieval over a tenant's knowledge bases: the search route and grounding both use it. */
export class KnowledgeSearch extends Context.Service<KnowledgeSearch>()("agent-host/KnowledgeSearch", {
  make: Effect.gen(function* () {
    const repo = yield* SearchRepo
    const config = yield* AppConfig
    // Per tenant: words in over 1% of the tenant's chunks, once it has
    // 20,000 (counted on a sample of 5,000); read again after
    // KNOWLEDGE_SEARCH_STATS_TTL. The tenants searched most recently are kept.
    const common = yield* Cache.make({
      lookup: (tenantId: TenantId) =>
        repo.commonLexemes(tenantId, { share: 0.01, minChunks: 20_000, sample: 5_000, limit: 1_000 }),
      capacity: 1_000,
      timeToLive: config.knowledgeSearchStatsTtl
    })

    /** The best `topK` chunks of the given bases (those that exist and are the tenant's) for `query`, best first. */
    const search = Traced.fn("KnowledgeSearch.search")(function* (input: {
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
        topK: input.topK ?? config.knowledgeTopK,
        common: yield* Cache.get(common, input.tenantId)
      })
    })

    /** The ids among `ids` that are not knowledge bases of the tenant. */
    const missing = Traced.fn("KnowledgeSearch.missing")(function* (tenantId: TenantId, ids: ReadonlyArray<string>) {
      const found = yield* repo.existing(tenantId, ids)
      return ids.filter((id) => !found.has(id))
    })

    /**
     * An agent's system prompt grounded on what its knowledge bases hold for
     * `query`: its instructions, then the best sources that fit in `budget()`
     * tokens. An agent without knowledge bases keeps its instructions (and
     * `budget`, which counts tokens, is not asked).
     */
    const ground = Traced.fn("KnowledgeSearch.ground")(function* (input: {
      readonly tenantId: TenantId
      readonly instructions: string
      readonly knowledgeIds: ReadonlyArray<string>
      readonly query: string
      readonly budget: () => number
    }) {
      if (input.knowledgeIds.length === 0) {
        return { system: input.instructions, sources: [] as ReadonlyArray<GroundingSource> }
      }
      const found = yield* search({ tenantId: input.tenantId, knowledgeIds: input.knowledgeIds, query: input.query })
      const sources = fitSources(found.map(toSource), input.budget())
      return { system: withSources(input.instructions, sources), sources }
    })

    return { search, missing, ground } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make).pipe(Layer.provide(SearchRepo.layer))
}
