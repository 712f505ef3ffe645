import { Context, Effect, Layer, Schema } from "effect"
import { SqlClient, SqlSchema } from "effect/sql"
import type { TenantId } from "../Domain/Ids.ts"
import { searchText } from "./Segment.ts"

/** A chunk found by a search, with its score (0 to 1, higher is better). */
export const ScoredChunk = Schema.Struct({
  id: Schema.String,
  knowledgeId: Schema.String,
  documentId: Schema.String,
  filename: Schema.String,
  index: Schema.Int,
  content: Schema.String,
  tokenCount: Schema.Int,
  startOffset: Schema.Int,
  endOffset: Schema.Int,
  page: Schema.NullOr(Schema.Int),
  headingPath: Schema.Array(Schema.String),
  score: Schema.Number
})
export type ScoredChunk = typeof ScoredChunk.Type

/** The SQL of knowledge search. */
export class SearchRepo extends Context.Service<SearchRepo>()("agent-host/SearchRepo", {
  make: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    // The query is parsed like the chunks were indexed (CJK runs segmented,
    // accents removed, the base's text-search configuration), and its words
    // are OR-ed: a chunk matching any of them is a candidate, ranked by cover
    // density normalised by the chunk's length (1) and into [0, 1) (32).
    // plainto_tsquery's canonical text quotes every lexeme, so turning its
    // operators into ORs and casting back parses exactly what it produced.
    const search = SqlSchema.findAll({
      Request: Schema.Struct({
        tenantId: Schema.String,
        knowledgeIds: Schema.Array(Schema.String),
        query: Schema.String,
        topK: Schema.Int
      }),
      Result: ScoredChunk,
      execute: (request) =>
        sql`
          SELECT c.id, c.knowledge_id, c.document_id, d.filename, c.index, c.content, c.token_count,
                 c.start_offset, c.end_offset, c.page, c.heading_path,
                 ts_rank_cd(c.search_vector, q.query, 1 | 32)::float8 AS score
          FROM knowledge_bases b
          CROSS JOIN LATERAL (
            SELECT replace(replace(
              plainto_tsquery(b.language, knowledge_unaccent(${searchText(request.query)}))::text,
              ' & ', ' | '), ' <-> ', ' | ')::tsquery AS query
          ) q
          JOIN knowledge_chunks c ON c.knowledge_id = b.id AND c.search_vector @@ q.query
          JOIN knowledge_documents d ON d.id = c.document_id AND d.status = 'ready'
          WHERE b.tenant_id = ${request.tenantId} AND b.id IN ${sql.in(request.knowledgeIds)}
          ORDER BY score DESC, c.id
          LIMIT ${request.topK}`
    })

    /** The ids among `ids` that name a knowledge base of the tenant. */
    const existing = (tenantId: TenantId, ids: ReadonlyArray<string>) =>
      ids.length === 0
        ? Effect.succeed(new Set<string>())
        : sql<{ id: string }>`SELECT id FROM knowledge_bases WHERE tenant_id = ${tenantId} AND id IN ${sql.in(ids)}`.pipe(
          Effect.map((rows) => new Set(rows.map((row) => row.id)))
        )

    return {
      search: (request: typeof search extends (r: infer R) => any ? R : never) =>
        (request.knowledgeIds.length === 0 ? Effect.succeed([]) : search(request)).pipe(
          Effect.orDie,
          Effect.withSpan("SearchRepo.search")
        ),
      existing: (tenantId: TenantId, ids: ReadonlyArray<string>) =>
        existing(tenantId, ids).pipe(Effect.orDie, Effect.withSpan("SearchRepo.existing"))
    } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make)
}
