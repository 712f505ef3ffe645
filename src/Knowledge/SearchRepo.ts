import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as SqlClient from "effect/sql/SqlClient"
import { chunksOf, maxIdsPerStatement } from "../Database/Chunks.ts"
import type { TenantId } from "../Domain/Ids.ts"
import { SearchHit } from "./SearchApi.ts"
import { searchText } from "./Segment.ts"
import * as Traced from "../Observability/Traced.ts"

/** A chunk found by a search, with its score (0 to 1, higher is better). */
export const ScoredChunk = Schema.Struct({ ...SearchHit.fields, filename: Schema.String })
export type ScoredChunk = typeof ScoredChunk.Type

/** Bases searched with the same queries, and the documents of theirs that are not ready. */
interface Group {
  readonly ranked: string
  readonly candidates: string
  readonly commonOnly: boolean
  readonly ids: Array<string>
  readonly hidden: Array<string>
}

/** The SQL of knowledge search. */
export class SearchRepo extends Context.Service<SearchRepo>()("agent-host/SearchRepo", {
  make: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient

    // The query is parsed like the chunks were indexed (CJK runs segmented,
    // accents removed, each base's text-search configuration), and its words
    // are OR-ed: a chunk matching any of them ranks, by cover density
    // normalised by the chunk's length (1) and into [0, 1) (32).
    // plainto_tsquery's canonical text quotes every lexeme, so turning its
    // operators into ORs and casting back parses exactly what it produced.
    //
    // Candidates are found with the query's uncommon words only: a word in a
    // large share of the tenant's chunks (`common`, see commonLexemes)
    // would make nearly every chunk a candidate to rank, and says little
    // about which is best. A query of common words only needs every one of
    // them (AND), and ranks at most `commonOnlyCandidates` of the chunks that
    // have them all. Each uncommon lexeme is quoted for tsquery input (quotes
    // and backslashes doubled). The queries are built first, so that the
    // search itself sees them as constants and reads the GIN index. The
    // documents not (or no longer) ready are read first too, and left out by
    // id: a join on the documents' status lets a planner with stale
    // statistics of a new base walk every chunk of it.
    const queries = (request: {
      readonly tenantId: string
      readonly knowledgeIds: ReadonlyArray<string>
      readonly text: string
      readonly common: ReadonlyArray<string>
    }) =>
      sql<{ id: string; ranked: string; rare: string | null; plain: string; hidden: ReadonlyArray<string> }>`
        SELECT b.id,
               ARRAY(SELECT d.id FROM knowledge_documents d WHERE d.knowledge_id = b.id AND d.status <> 'ready') AS hidden,
               replace(replace(plainto_tsquery(b.language, knowledge_unaccent(${request.text}))::text, ' & ', ' | '), ' <-> ', ' | ') AS ranked,
               plainto_tsquery(b.language, knowledge_unaccent(${request.text}))::text AS plain,
               (SELECT string_agg(chr(39) || replace(replace(l, chr(92), chr(92) || chr(92)), chr(39), chr(39) || chr(39)) || chr(39), ' | ')
                FROM unnest(tsvector_to_array(to_tsvector(b.language, knowledge_unaccent(${request.text})))) AS l
                WHERE l <> ALL (${request.common}::text[])) AS rare
        FROM knowledge_bases b
        WHERE b.tenant_id = ${request.tenantId} AND b.id IN ${sql.in(request.knowledgeIds)}`

    const commonOnlyCandidates = 300
    // The documents left out, an array of at most 1,000 ids per condition (one for the usual few).
    const notHidden = (hidden: ReadonlyArray<string>) =>
      hidden.length <= maxIdsPerStatement
        ? [sql`document_id <> ALL (${hidden}::text[])`]
        : chunksOf(hidden).map((chunk) => sql`document_id <> ALL (${chunk}::text[])`)
    const decodeChunks = Schema.decodeUnknownEffect(Schema.Array(ScoredChunk))
    // Ranked on the search vectors alone; only the best rows are read whole.
    const searchBases = (group: Group, topK: number) =>
      sql`
        SELECT c.id, c.knowledge_id, c.document_id, d.filename, c.index, c.content, c.token_count,
               c.start_offset, c.end_offset, c.page, c.heading_path, best.score
        FROM (
          SELECT hit.id, ts_rank_cd(hit.search_vector, ${group.ranked}::tsquery, 1 | 32)::float8 AS score
          FROM (
            SELECT id, search_vector FROM knowledge_chunks
            WHERE knowledge_id IN ${sql.in(group.ids)} AND search_vector @@ ${group.candidates}::tsquery
              AND ${sql.and(notHidden(group.hidden))}
            ${group.commonOnly ? sql`LIMIT ${commonOnlyCandidates}` : sql``}
          ) hit
          ORDER BY score DESC, hit.id
          LIMIT ${topK}
        ) best
        JOIN knowledge_chunks c ON c.id = best.id
        JOIN knowledge_documents d ON d.id = c.document_id
        ORDER BY best.score DESC, c.id`.pipe(Effect.flatMap(decodeChunks))

    const search = (request: {
      readonly tenantId: string
      readonly knowledgeIds: ReadonlyArray<string>
      readonly query: string
      readonly topK: number
      readonly common: ReadonlyArray<string>
    }) =>
      Effect.gen(function* () {
        const built = yield* queries({ ...request, text: searchText(request.query) })
        // Bases whose configurations give the same queries are searched together.
        const groups = new Map<string, Group>()
        for (const base of built) {
          if (base.plain.trim() === "") continue
          const candidates = base.rare ?? base.plain
          const key = `${base.ranked}\u0000${candidates}`
          const group = groups.get(key)
          if (group === undefined) {
            groups.set(key, {
              ranked: base.ranked,
              candidates,
              commonOnly: base.rare === null,
              ids: [base.id],
              hidden: [...base.hidden]
            })
          } else {
            group.ids.push(base.id)
            group.hidden.push(...base.hidden)
          }
        }
        const found = yield* Effect.forEach(groups.values(), (group) => searchBases(group, request.topK))
        return found
          .flat()
          .sort((a, b) => b.score - a.score || (a.id < b.id ? -1 : 1))
          .slice(0, request.topK)
      })

    /**
     * Lexemes in more than `share` of the tenant's chunks (of its ready
     * documents), at most `limit` of them, commonest first; none while the
     * tenant has fewer than `minChunks` (a small tenant's bases are ranked
     * whole). Counted on a sample of `sample` chunks: whole documents in the
     * order of their ids, which are random, until they hold that many; the
     * same documents give the same words every time. Only the tenant's rows
     * are read: another tenant's documents cannot change which words are
     * common here, and so which chunks a search of this tenant considers.
     */
    const commonLexemes = (
      tenantId: TenantId,
      options: {
        readonly share: number
        readonly minChunks: number
        readonly sample: number
        readonly limit: number
      }
    ) =>
      Effect.gen(function* () {
        const [total] = yield* sql<{ chunks: number }>`
          SELECT COALESCE(sum(chunk_count), 0)::float8 AS chunks FROM knowledge_documents
          WHERE tenant_id = ${tenantId} AND status = 'ready'`
        if (total === undefined || total.chunks < options.minChunks) return [] as ReadonlyArray<string>
        const rows = yield* sql<{ lexeme: string }>`
          WITH drawn AS (
            SELECT knowledge_id, id, sum(chunk_count) OVER (ORDER BY id) - chunk_count AS before
            FROM knowledge_documents
            WHERE tenant_id = ${tenantId} AND status = 'ready' AND chunk_count > 0
          ), sample AS MATERIALIZED (
            SELECT c.search_vector
            FROM (SELECT knowledge_id, id FROM drawn WHERE before < ${options.sample} ORDER BY id) d
            CROSS JOIN LATERAL (
              SELECT search_vector FROM knowledge_chunks
              WHERE tenant_id = ${tenantId} AND knowledge_id = d.knowledge_id AND document_id = d.id
              ORDER BY index
            ) c
            LIMIT ${options.sample}
          )
          SELECT l AS lexeme
          FROM sample, unnest(tsvector_to_array(sample.search_vector)) AS l
          GROUP BY l
          HAVING count(*) > ${options.share}::float8 * (SELECT count(*) FROM sample)
          ORDER BY count(*) DESC, l
          LIMIT ${options.limit}`
        return rows.map((row) => row.lexeme)
      }).pipe(Effect.orDie, Traced.withSpan("SearchRepo.commonLexemes"))

    /** The ids among `ids` that name a knowledge base of the tenant. */
    const existing = (tenantId: TenantId, ids: ReadonlyArray<string>) =>
      ids.length === 0
        ? Effect.succeed(new Set<string>())
        : sql<{
            id: string
          }>`SELECT id FROM knowledge_bases WHERE tenant_id = ${tenantId} AND id IN ${sql.in(ids)}`.pipe(
            Effect.map((rows) => new Set(rows.map((row) => row.id)))
          )

    return {
      commonLexemes,
      search: (request: Parameters<typeof search>[0]) =>
        (request.knowledgeIds.length === 0 ? Effect.succeed([]) : search(request)).pipe(
          Effect.orDie,
          Traced.withSpan("SearchRepo.search")
        ),
      existing: (tenantId: TenantId, ids: ReadonlyArray<string>) =>
        existing(tenantId, ids).pipe(Effect.orDie, Traced.withSpan("SearchRepo.existing"))
    } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make)
}
