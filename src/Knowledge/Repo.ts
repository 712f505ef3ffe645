import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as Struct from "effect/Struct"
import * as SqlClient from "effect/sql/SqlClient"
import { limitFor } from "../Billing/Limits.ts"
import { chunksOfTenant, lockTenantPlan } from "../Billing/Repo.ts"
import { AppConfig } from "../Config.ts"
import { forEachChunk } from "../Database/Chunks.ts"
import * as DurableRunRepo from "../Database/DurableRunRepo.ts"
import { tenantPage } from "../Database/Page.ts"
import * as TenantRepo from "../Database/TenantRepo.ts"
import { encodeCursor } from "../Domain/Cursor.ts"
import { isId, newId, type TenantId } from "../Domain/Ids.ts"
import { RunWaiting } from "../Domain/RunQueue.ts"
import { Chunk, Document, type DocumentStatus, KnowledgeBase } from "./Api.ts"
import { searchText } from "./Segment.ts"
import type { Chunking } from "./Chunking.ts"
import type { Chunk as SplitChunk, Heading } from "./Splitter.ts"
import * as Traced from "../Observability/Traced.ts"

/** A document's row: the fields of `Document` that are columns as they are, and the columns of the others. */
export const DocumentRow = Schema.Struct({
  ...Struct.omit(Document.fields, ["error", "chunking", "waiting"]),
  errorCode: Schema.NullOr(Schema.String),
  errorMessage: Schema.NullOr(Schema.String),
  chunkStrategy: Schema.String,
  chunkSize: Schema.Int,
  chunkOverlap: Schema.Int,
  /** Set while the document waits for one of its tenant's extraction places. */
  waiting: Schema.NullOr(RunWaiting)
})
export type DocumentRow = typeof DocumentRow.Type

/** The tenant's extraction cap for its current plan, as SQL text (the caps are settings, validated integers, never input); `takeExtractionSlot` reads it the same way. */
const extractionCapOf = (tenantColumn: string, caps: readonly [number, number, number]) =>
  `(SELECT CASE t.plan WHEN 'free' THEN ${caps[0]} WHEN 'pro' THEN ${caps[1]} ELSE ${caps[2]} END
    FROM tenants t WHERE t.id = ${tenantColumn})`

/**
 * The columns of a document read from `knowledge_documents` (unaliased).
 * `waiting` is read with them: set only while the document is processing
 * without an extraction place and its tenant's places are all taken (or
 * promised to older documents), as `takeExtractionSlot` decides.
 */
const documentColumnsFor = (caps: readonly [number, number, number]) =>
  `id, knowledge_id, filename, content_type, bytes, sha256, status, error_code, error_message,
  chunk_strategy, chunk_size, chunk_overlap, chunk_count, token_count, created_at, updated_at,
  CASE WHEN knowledge_documents.status = 'processing' AND knowledge_documents.extraction_slot_at IS NULL THEN (
    SELECT CASE WHEN q.held + q.ahead >= q.cap
                THEN json_build_object('reason', 'tenant_concurrency', 'ahead', q.ahead, 'limit', q.cap) END
    FROM (SELECT count(*) FILTER (WHERE o.extraction_slot_at IS NOT NULL)::int AS held,
                 count(*) FILTER (WHERE o.extraction_slot_at IS NULL
                   AND (o.created_at, o.id) < (knowledge_documents.created_at, knowledge_documents.id))::int AS ahead,
                 ${extractionCapOf("knowledge_documents.tenant_id", caps)} AS cap
          FROM knowledge_documents o
          WHERE o.tenant_id = knowledge_documents.tenant_id AND o.status = 'processing') q
  ) END AS waiting`

/** What ingestion reads of a document: the upload itself, or the text it was extracted to. */
export interface IngestSource {
  readonly tenantId: TenantId
  readonly knowledgeId: string
  readonly language: string
  readonly filename: string
  readonly contentType: string
  readonly status: typeof DocumentStatus.Type
  readonly content: Uint8Array | null
  readonly text: string | null
  readonly layout: {
    readonly kind: string
    readonly headings: ReadonlyArray<Heading>
    readonly pages?: ReadonlyArray<number>
  } | null
  readonly chunking: Chunking
  /** Extraction attempts started so far. */
  readonly extractionAttempts: number
  /** What the sandbox's watchdog saw of the last attempt, when it was past half its memory or time. */
  readonly extractionStrain: ExtractionStrain | null
  /** Seconds since the document took its extraction place, or since its upload while it has none. */
  readonly ageSeconds: number
}

export interface ExtractionStrain {
  readonly code: string
  readonly detail: string
}

// A document's ingestion is a durable run while the document is processing;
// its stored messages are pruned counted from the document's last change.
const sweptDocuments: DurableRunRepo.Conditions = {
  unfinished: "status = 'processing'",
  notStarted: "status = 'processing'",
  finished: "status <> 'processing'",
  finishedAt: "updated_at"
}

const chunkKey = (documentId: string, index: number) => `${documentId}/${index}`

/** All SQL of knowledge bases, documents and chunks (search has its own, SearchRepo.ts). */
export class KnowledgeRepo extends Context.Service<KnowledgeRepo>()("agent-host/KnowledgeRepo", {
  make: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const config = yield* AppConfig
    const extractionCaps = [
      config.freeExtractionConcurrency,
      config.proExtractionConcurrency,
      config.businessExtractionConcurrency
    ] as const
    const documentColumns = documentColumnsFor(extractionCaps)
    const ingestions = DurableRunRepo.make(sql, {
      table: "knowledge_documents",
      spanPrefix: "KnowledgeRepo",
      conditions: sweptDocuments
    })

    /**
     * Whether `adding` chunks in place of `documentId`'s would take the
     * tenant past its plan's MAX_CHUNKS. Takes the tenant's lock (held until
     * the caller's transaction ends, so that writes of one tenant's chunks,
     * from any node, count one after the other): call it first in the
     * transaction, as every quota check does.
     */
    const overChunkLimit = (tenantId: TenantId, documentId: string, adding: number) =>
      Effect.gen(function* () {
        const plan = yield* lockTenantPlan(sql, tenantId)
        const limit = limitFor(config.planQuotas, plan, "chunks")
        if (limit === null) return undefined
        const used = yield* chunksOfTenant(sql, tenantId, documentId)
        return used + adding > limit ? { plan, limit, used } : undefined
      })

    // The counts are those of the base's ready documents, read with the base.
    const bases = yield* TenantRepo.make(KnowledgeBase, {
      table: "knowledge_bases",
      spanPrefix: "KnowledgeRepo.bases",
      expressions: {
        language: "language::text",
        chunking:
          "json_build_object('strategy', chunk_strategy, 'chunkSize', chunk_size, 'chunkOverlap', chunk_overlap)",
        documentCount: "(SELECT count(*)::int FROM knowledge_documents d WHERE d.knowledge_id = knowledge_bases.id)",
        chunkCount: `(SELECT COALESCE(sum(chunk_count), 0)::int FROM knowledge_documents d
          WHERE d.knowledge_id = knowledge_bases.id AND d.status = 'ready')`,
        tokenCount: `(SELECT COALESCE(sum(token_count), 0)::int FROM knowledge_documents d
          WHERE d.knowledge_id = knowledge_bases.id AND d.status = 'ready')`
      }
    })

    const languageExists = (language: string) =>
      sql<{ found: boolean }>`SELECT EXISTS (SELECT 1 FROM pg_ts_config WHERE cfgname = ${language}) AS found`.pipe(
        Effect.map((rows) => rows[0]?.found === true),
        Effect.orDie
      )

    // --- documents -----------------------------------------------------------

    const listDocuments = (
      tenantId: TenantId,
      knowledgeId: string,
      page: { readonly after: string | null; readonly limit: number }
    ) =>
      tenantPage({
        table: "knowledge_documents",
        columns: documentColumns,
        row: DocumentRow,
        tenantId,
        filters: [sql`knowledge_id = ${knowledgeId}`],
        after: page.after,
        limit: page.limit
      }).pipe(Effect.orDie, Traced.withSpan("KnowledgeRepo.listDocuments"))

    const decodeDocument = Schema.decodeUnknownEffect(DocumentRow)
    const findDocument = (tenantId: TenantId, knowledgeId: string, id: string) =>
      !isId(id)
        ? Effect.succeed(Option.none<DocumentRow>())
        : sql`SELECT ${sql.literal(documentColumns)} FROM knowledge_documents
              WHERE tenant_id = ${tenantId} AND knowledge_id = ${knowledgeId} AND id = ${id}`.pipe(
            Effect.flatMap((rows) =>
              rows.length === 0 ? Effect.succeed(Option.none()) : Effect.map(decodeDocument(rows[0]), Option.some)
            ),
            Effect.orDie,
            Traced.withSpan("KnowledgeRepo.findDocument")
          )

    const findDuplicate = (knowledgeId: string, sha256: string) =>
      sql<{ id: string }>`SELECT id FROM knowledge_documents WHERE knowledge_id = ${knowledgeId} AND sha256 = ${sha256}
                          ORDER BY id LIMIT 1`.pipe(
        Effect.map((rows) => Option.fromNullishOr(rows[0]?.id)),
        Effect.orDie
      )

    /** Stores an upload as a document being processed; its bytes stay with it until it is ingested. */
    const insertDocument = (
      tenantId: TenantId,
      input: {
        readonly knowledgeId: string
        readonly filename: string
        readonly contentType: string
        readonly content: Uint8Array
        readonly sha256: string
        readonly chunking: Chunking
      }
    ) =>
      Effect.gen(function* () {
        const id = newId()
        yield* sql`INSERT INTO knowledge_documents (id, tenant_id, knowledge_id, filename, content_type, bytes, sha256, status,
                     chunk_strategy, chunk_size, chunk_overlap, content)
          VALUES (${id}, ${tenantId}, ${input.knowledgeId}, ${input.filename}, ${input.contentType}, ${input.content.length},
                  ${input.sha256}, 'processing', ${input.chunking.strategy}, ${input.chunking.chunkSize},
                  ${input.chunking.chunkOverlap}, ${Buffer.from(input.content.buffer, input.content.byteOffset, input.content.length)})`
        return id
      }).pipe(Traced.withSpan("KnowledgeRepo.insertDocument"))

    const removeDocument = (tenantId: TenantId, knowledgeId: string, id: string) =>
      !isId(id)
        ? Effect.succeed(false)
        : sql`DELETE FROM knowledge_documents
          WHERE tenant_id = ${tenantId} AND knowledge_id = ${knowledgeId} AND id = ${id} RETURNING id`.pipe(
            Effect.map((rows) => rows.length > 0),
            Effect.orDie,
            Traced.withSpan("KnowledgeRepo.removeDocument")
          )

    const statusOf = (ids: ReadonlyArray<string>) =>
      sql<{ id: string; status: string }>`SELECT id, status FROM knowledge_documents WHERE id IN ${sql.in(ids)}`.pipe(
        Effect.map((rows) => new Map(rows.map((row) => [row.id, row.status]))),
        Effect.orDie
      )

    // --- ingestion -----------------------------------------------------------

    const ingestSource = (id: string) =>
      sql<{
        tenantId: TenantId
        knowledgeId: string
        language: string
        filename: string
        contentType: string
        status: typeof DocumentStatus.Type
        content: Uint8Array | null
        text: string | null
        layout: IngestSource["layout"]
        chunkStrategy: Chunking["strategy"]
        chunkSize: number
        chunkOverlap: number
        extractionAttempts: number
        extractionStrain: ExtractionStrain | string | null
        ageSeconds: number
      }>`SELECT d.tenant_id, d.knowledge_id, b.language::text AS language, d.filename, d.content_type, d.status, d.content,
                d.text, d.layout, d.chunk_strategy, d.chunk_size, d.chunk_overlap, d.extraction_attempts, d.extraction_strain,
                extract(epoch FROM now() - COALESCE(d.extraction_slot_at, d.created_at))::float8 AS age_seconds
         FROM knowledge_documents d JOIN knowledge_bases b ON b.id = d.knowledge_id WHERE d.id = ${id}`.pipe(
        Effect.map((rows) => {
          const row = rows[0]
          if (row === undefined) return Option.none<IngestSource>()
          const layout = typeof row.layout === "string" ? JSON.parse(row.layout) : row.layout
          const strain =
            typeof row.extractionStrain === "string" ? JSON.parse(row.extractionStrain) : row.extractionStrain
          return Option.some<IngestSource>({
            ...row,
            layout,
            extractionStrain: strain,
            chunking: { strategy: row.chunkStrategy, chunkSize: row.chunkSize, chunkOverlap: row.chunkOverlap }
          })
        }),
        Traced.withSpan("KnowledgeRepo.ingestSource")
      )

    /**
     * Replaces a document's chunks with these, indexed for search (in the caller's transaction); `indexed`,
     * when given, is the chunk's search text made already (by the extraction sandbox, off this thread).
     */
    const writeChunks = (
      source: { readonly tenantId: TenantId; readonly knowledgeId: string; readonly language: string },
      documentId: string,
      chunks: ReadonlyArray<SplitChunk & { readonly indexed?: string }>
    ) =>
      Effect.gen(function* () {
        yield* sql`DELETE FROM knowledge_chunks WHERE document_id = ${documentId}`
        // 1,000 chunks a statement, all in the caller's transaction.
        yield* forEachChunk(
          chunks,
          (part) =>
            sql`
            INSERT INTO knowledge_chunks (id, tenant_id, knowledge_id, document_id, index, content, token_count,
              start_offset, end_offset, page, heading_path, search_vector)
            SELECT c.id, ${source.tenantId}, ${source.knowledgeId}, ${documentId}, c.index, c.content, c.tokens, c.start_offset,
                   c.end_offset, NULLIF(c.page, '')::int, c.heading_path::jsonb, to_tsvector(${source.language}::regconfig, knowledge_unaccent(c.indexed))
            FROM unnest(${part.map(() => newId())}::text[], ${part.map((c) => c.index)}::int[],
                        ${part.map((c) => c.content)}::text[], ${part.map((c) => c.tokenCount)}::int[],
                        ${part.map((c) => c.startOffset)}::int[], ${part.map((c) => c.endOffset)}::int[],
                        ${part.map((c) => (c.page === undefined ? "" : String(c.page)))}::text[],
                        ${part.map((c) => JSON.stringify(c.headingPath))}::text[],
                        ${part.map((c) => c.indexed ?? searchText(c.content))}::text[])
              AS c (id, index, content, tokens, start_offset, end_offset, page, heading_path, indexed)`
        )
      })

    /**
     * The end of a document's ingestion, in one transaction: its chunks, its
     * extracted text and its status `ready`, the upload's bytes dropped. Only
     * a document still processing is written (not one deleted or finished
     * meanwhile); returns whether it was.
     */
    const finishReady = (
      documentId: string,
      source: IngestSource,
      result: {
        readonly contentType: string
        readonly text: string
        readonly layout: NonNullable<IngestSource["layout"]>
        readonly chunks: ReadonlyArray<SplitChunk & { readonly indexed?: string }>
      }
    ) =>
      Effect.gen(function* () {
        const over = yield* overChunkLimit(source.tenantId, documentId, result.chunks.length)
        const claimed =
          yield* sql`SELECT id FROM knowledge_documents WHERE id = ${documentId} AND status = 'processing' FOR UPDATE`
        if (claimed.length === 0) return false
        if (over !== undefined) {
          yield* finishFailed(
            documentId,
            "chunk_limit",
            `The document's ${result.chunks.length} chunks would take the tenant past ` +
              `the ${over.plan} plan's ${over.limit} chunks (${over.plan.toUpperCase()}_MAX_CHUNKS; its other documents hold ${over.used}).`
          )
          return false
        }
        yield* writeChunks(source, documentId, result.chunks)
        yield* sql`UPDATE knowledge_documents SET status = 'ready', content = NULL, text = ${result.text},
                     layout = ${JSON.stringify(result.layout)}::jsonb, content_type = ${result.contentType},
                     chunk_count = ${result.chunks.length},
                     token_count = ${result.chunks.reduce((sum, chunk) => sum + chunk.tokenCount, 0)}, updated_at = now()
                   WHERE id = ${documentId}`
        return true
      }).pipe(sql.withTransaction, Traced.withSpan("KnowledgeRepo.finishReady"))

    const finishFailed = (documentId: string, code: string, message: string) =>
      sql`UPDATE knowledge_documents SET status = 'failed', error_code = ${code}, error_message = ${message},
            content = NULL, updated_at = now()
          WHERE id = ${documentId} AND status = 'processing'`.pipe(
        Effect.asVoid,
        Traced.withSpan("KnowledgeRepo.finishFailed")
      )

    /**
     * Takes one of the tenant's extraction places for the document while the
     * tenant holds fewer than its plan's cap (FREE_EXTRACTION_CONCURRENCY...,
     * read with the counts, so a plan change counts from the next take) and no
     * older document of the tenant waits for one (a document holding one
     * keeps it); the takes of one tenant are serialised by an advisory lock,
     * so concurrent takers on any node never pass the cap. `gone`: no longer processing.
     */
    const takeExtractionSlot = (documentId: string, tenantId: TenantId) =>
      Effect.gen(function* () {
        yield* sql`SELECT pg_advisory_xact_lock(hashtextextended(${`knowledge-extraction:${tenantId}`}, 0))`
        const [document] = yield* sql<{ status: string; holds: boolean }>`
          SELECT status, extraction_slot_at IS NOT NULL AS holds FROM knowledge_documents WHERE id = ${documentId}`
        if (document === undefined || document.status !== "processing") return "gone" as const
        if (document.holds) return "taken" as const
        const [counted] = yield* sql<{ held: number; ahead: number; cap: number | null }>`
          SELECT count(*) FILTER (WHERE extraction_slot_at IS NOT NULL)::int AS held,
                 count(*) FILTER (WHERE extraction_slot_at IS NULL
                   AND (created_at, id) < (SELECT created_at, id FROM knowledge_documents WHERE id = ${documentId}))::int AS ahead,
                 (SELECT CASE plan WHEN 'free' THEN ${extractionCaps[0]}::int WHEN 'pro' THEN ${extractionCaps[1]}::int
                         ELSE ${extractionCaps[2]}::int END FROM tenants WHERE id = ${tenantId}) AS cap
          FROM knowledge_documents WHERE tenant_id = ${tenantId} AND status = 'processing'`
        // No tenant row (deleted meanwhile): the free plan's cap.
        if ((counted?.held ?? 0) + (counted?.ahead ?? 0) >= (counted?.cap ?? extractionCaps[0])) return "wait" as const
        yield* sql`UPDATE knowledge_documents SET extraction_slot_at = now() WHERE id = ${documentId}`
        return "taken" as const
      }).pipe(sql.withTransaction, Traced.withSpan("KnowledgeRepo.takeExtractionSlot"))

    /**
     * Counts an extraction attempt, before its bytes reach the sandbox: the
     * number of attempts it makes, or none when the document is no longer processing.
     */
    const beginExtraction = (documentId: string) =>
      sql<{ attempts: number }>`UPDATE knowledge_documents
          SET extraction_attempts = extraction_attempts + 1, extraction_strain = NULL, extraction_slot_at = now()
          WHERE id = ${documentId} AND status = 'processing' RETURNING extraction_attempts AS attempts`.pipe(
        Effect.map((rows) => Option.fromNullishOr(rows[0]?.attempts)),
        Traced.withSpan("KnowledgeRepo.beginExtraction")
      )

    /** Records what the sandbox's watchdog saw of the running attempt (past half its memory or time). */
    const strainExtraction = (documentId: string, strain: ExtractionStrain) =>
      sql`UPDATE knowledge_documents SET extraction_strain = ${JSON.stringify(strain)}::jsonb
          WHERE id = ${documentId} AND status = 'processing'`.pipe(
        Effect.asVoid,
        Traced.withSpan("KnowledgeRepo.strainExtraction")
      )

    /**
     * An ingestion interrupted by its own process (a shutdown) gives its place
     * back and, when its attempt had begun, the attempt too: the document did
     * not stop that process.
     */
    const giveBackExtraction = (documentId: string, attempt: boolean) =>
      sql`UPDATE knowledge_documents SET extraction_slot_at = NULL,
            extraction_attempts = CASE WHEN ${attempt} THEN greatest(extraction_attempts - 1, 0) ELSE extraction_attempts END,
            extraction_strain = CASE WHEN ${attempt} THEN NULL ELSE extraction_strain END
          WHERE id = ${documentId} AND status = 'processing'`.pipe(
        Effect.asVoid,
        Traced.withSpan("KnowledgeRepo.giveBackExtraction")
      )

    /** A ready document's chunks replaced with these, with its settings and counts, in one transaction. */
    /**
     * A ready document's chunks replaced with these, with its settings and
     * counts, in one transaction; not when the document changed meanwhile, or
     * when the chunks would take the tenant past its plan's MAX_CHUNKS.
     */
    const replaceChunks = (
      documentId: string,
      source: IngestSource,
      chunking: Chunking,
      chunks: ReadonlyArray<SplitChunk>
    ) =>
      Effect.gen(function* () {
        const over = yield* overChunkLimit(source.tenantId, documentId, chunks.length)
        const claimed =
          yield* sql`SELECT id FROM knowledge_documents WHERE id = ${documentId} AND status = 'ready' FOR UPDATE`
        if (claimed.length === 0) return { _tag: "Changed" } as const
        if (over !== undefined) return { _tag: "OverChunkLimit", ...over } as const
        yield* writeChunks(source, documentId, chunks)
        yield* sql`UPDATE knowledge_documents SET chunk_strategy = ${chunking.strategy}, chunk_size = ${chunking.chunkSize},
                     chunk_overlap = ${chunking.chunkOverlap}, chunk_count = ${chunks.length},
                     token_count = ${chunks.reduce((sum, chunk) => sum + chunk.tokenCount, 0)}, updated_at = now()
                   WHERE id = ${documentId}`
        return { _tag: "Replaced" } as const
      }).pipe(sql.withTransaction, Effect.orDie, Traced.withSpan("KnowledgeRepo.replaceChunks"))

    /**
     * Takes a rechunk of the document, at most `burst` at once and then one
     * per `intervalSeconds` (GCRA: `rechunk_tat` is when the document's
     * rechunks would be all paid back), in one statement, so rechunks from
     * any node add up. Returns 0 when taken, else the seconds to wait.
     */
    const takeRechunkSlot = (tenantId: TenantId, documentId: string, intervalSeconds: number, burst: number) =>
      sql<{ waitSeconds: number }>`
        WITH doc AS (
          SELECT id, GREATEST(COALESCE(rechunk_tat, now()), now()) AS tat FROM knowledge_documents
          WHERE tenant_id = ${tenantId} AND id = ${documentId} FOR UPDATE
        ),
        taken AS (
          UPDATE knowledge_documents d SET rechunk_tat = doc.tat + make_interval(secs => ${intervalSeconds})
          FROM doc WHERE d.id = doc.id AND doc.tat <= now() + make_interval(secs => ${intervalSeconds * Math.max(0, burst - 1)})
          RETURNING d.id
        )
        SELECT CASE WHEN EXISTS (SELECT 1 FROM taken) THEN 0
                    ELSE extract(epoch FROM doc.tat - now() - make_interval(secs => ${intervalSeconds * Math.max(0, burst - 1)}))
               END::float8 AS wait_seconds
        FROM doc`.pipe(
        // A document gone meanwhile takes nothing: the rechunk finds it gone.
        Effect.map((rows) => Math.max(0, rows[0]?.waitSeconds ?? 0)),
        Effect.orDie,
        Traced.withSpan("KnowledgeRepo.takeRechunkSlot")
      )

    // --- chunks --------------------------------------------------------------

    const decodeChunks = Schema.decodeUnknownEffect(Schema.Array(Chunk))
    /** A page of a base's chunks in document order; the cursor is the last chunk's document and index. */
    const listChunks = (
      tenantId: TenantId,
      knowledgeId: string,
      options: {
        readonly documentId: string | undefined
        readonly after: string | null
        readonly limit: number
      }
    ) =>
      Effect.gen(function* () {
        const scope = sql.and([
          sql`tenant_id = ${tenantId}`,
          sql`knowledge_id = ${knowledgeId}`,
          ...(options.documentId === undefined ? [] : [sql`document_id = ${options.documentId}`])
        ])
        const slash = options.after?.indexOf("/") ?? -1
        const after =
          options.after === null
            ? sql``
            : sql`AND (document_id, index) > (${options.after.slice(0, slash)}, ${Number(options.after.slice(slash + 1))})`
        const rows = yield* sql`
          SELECT id, knowledge_id, document_id, index, content, token_count, start_offset, end_offset, page, heading_path
          FROM knowledge_chunks WHERE ${scope} ${after}
          ORDER BY document_id, index LIMIT ${options.limit + 1}`
        const [counted] = yield* sql<{
          total: number
        }>`SELECT count(*)::int AS total FROM knowledge_chunks WHERE ${scope}`
        const data = yield* decodeChunks(
          rows.slice(0, options.limit).map((row: any) => ({
            ...row,
            headingPath: typeof row.headingPath === "string" ? JSON.parse(row.headingPath) : row.headingPath
          }))
        )
        const last = data[data.length - 1]
        return {
          data,
          total: counted?.total ?? 0,
          nextCursor:
            rows.length > options.limit && last !== undefined
              ? encodeCursor(chunkKey(last.documentId, last.index))
              : null
        }
      }).pipe(sql.withTransaction, Effect.orDie, Traced.withSpan("KnowledgeRepo.listChunks"))

    // --- sweeps --------------------------------------------------------------

    /**
     * Fails what is still processing past `seconds` (a crash loop, a stuck extractor): never processing
     * forever. Counted from the document's extraction place once it has one: waiting behind its tenant's
     * other documents (FREE_EXTRACTION_CONCURRENCY...) is not being stuck, and attempts are bounded.
     */
    const failStuck = (seconds: number) =>
      sql<{ id: string }>`UPDATE knowledge_documents SET status = 'failed', error_code = 'timeout',
            error_message = ${`Ingestion did not finish within ${seconds} s`}, content = NULL, updated_at = now()
          WHERE status = 'processing' AND COALESCE(extraction_slot_at, created_at) < now() - make_interval(secs => ${seconds})
          RETURNING id`.pipe(
        Effect.map((rows) => rows.map((row) => row.id)),
        Effect.orDie
      )

    return {
      bases,
      languageExists,
      listDocuments,
      findDocument,
      findDuplicate,
      insertDocument,
      removeDocument,
      statusOf,
      ingestSource,
      finishReady,
      finishFailed,
      takeExtractionSlot,
      beginExtraction,
      strainExtraction,
      giveBackExtraction,
      replaceChunks,
      takeRechunkSlot,
      listChunks,
      processing: ingestions.unfinished,
      processingSince: ingestions.notStarted,
      failStuck,
      unpruned: ingestions.unpruned,
      markPruned: ingestions.markPruned
    } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make)
}
