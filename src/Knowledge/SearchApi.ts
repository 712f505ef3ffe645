import * as Schema from "effect/Schema"
import * as HttpApiEndpoint from "effect/http-api/HttpApiEndpoint"
import * as HttpApiGroup from "effect/http-api/HttpApiGroup"
import * as OpenApi from "effect/http-api/OpenApi"
import { SessionAuth, sessionCredential, SessionQuota } from "../Auth/Api.ts"
import { operation } from "../Domain/ApiDocs.ts"
import { text } from "../Domain/Input.ts"
import { NotFound } from "../Domain/Problems.ts"

export const maxTopK = 50
export const maxQueryChars = 2_000

export const SearchRequest = Schema.Struct({
  query: text(
    Schema.isMinLength(1, { message: "Expected a non-empty query" }),
    Schema.isMaxLength(maxQueryChars, { message: `Expected at most ${maxQueryChars} characters` })
  ).annotate({ description: "What to look for: chunks matching any of its words rank by how well they match." }),
  topK: Schema.optionalKey(
    Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: maxTopK })).annotate({
      description: `How many chunks, 1 to ${maxTopK} (default 5).`
    })
  )
})

export const SearchHit = Schema.Struct({
  id: Schema.String,
  knowledgeId: Schema.String,
  documentId: Schema.String,
  index: Schema.Int,
  content: Schema.String,
  tokenCount: Schema.Int,
  startOffset: Schema.Int,
  endOffset: Schema.Int,
  page: Schema.NullOr(Schema.Int),
  headingPath: Schema.Array(Schema.String),
  score: Schema.Number.annotate({ description: "Relevance from 0 to 1: higher is better." })
})

export class KnowledgeSearchApi extends HttpApiGroup.make("knowledgeSearch")
  .add(
    HttpApiEndpoint.post("search", "/:id/search", {
      params: { id: text(Schema.isMaxLength(64)) },
      payload: SearchRequest,
      success: Schema.Struct({ data: Schema.Array(SearchHit) }),
      error: NotFound
    })
      .middleware(SessionQuota)
      .annotateMerge(
        operation({
          summary: "Search a knowledge base",
          description:
            "The chunks of the base's ready documents that best match the query, best first. Any word " +
            "of the query matches; accents are ignored; Chinese, Japanese and Thai are split into words; words are " +
            "stemmed in the base's `language`. A query without a searchable word finds nothing.",
          credential: sessionCredential,
          errors:
            "400 on invalid fields. 404 when the knowledge base is not the tenant's. Counted against the plan's " +
            "daily requests: 429 past them."
        })
      )
  )
  .middleware(SessionAuth)
  .prefix("/api/knowledge")
  .annotateMerge(
    OpenApi.annotations({
      title: "Knowledge search",
      description: "Full-text retrieval over a knowledge base: what grounding gives an agent's model, to test."
    })
  ) {}
