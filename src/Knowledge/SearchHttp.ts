import * as Layer from "effect/Layer"
import * as HttpApiBuilder from "effect/http-api/HttpApiBuilder"
import { Api } from "../Api.ts"
import { CurrentPrincipal } from "../Auth/Api.ts"
import { NotFound } from "../Domain/Problems.ts"
import { KnowledgeSearch } from "./Search.ts"
import * as Traced from "../Observability/Traced.ts"

export const KnowledgeSearchHttp = HttpApiBuilder.group(
  Api,
  "knowledgeSearch",
  Traced.fn(function* (handlers) {
    const knowledge = yield* KnowledgeSearch
    return handlers.handle(
      "search",
      Traced.fn(function* ({ params, payload }) {
        const { tenantId } = yield* CurrentPrincipal
        const missing = yield* knowledge.missing(tenantId, [params.id])
        if (missing.length > 0) return yield* new NotFound({ detail: `No knowledge base ${params.id}` })
        const found = yield* knowledge.search({
          tenantId,
          knowledgeIds: [params.id],
          query: payload.query,
          topK: payload.topK ?? 5
        })
        return { data: found.map(({ filename: _, ...hit }) => hit) }
      })
    )
  })
)

export const layer = KnowledgeSearchHttp.pipe(Layer.provide(KnowledgeSearch.layer))
