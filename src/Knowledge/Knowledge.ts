import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Crypto from "node:crypto"
import { Limits, quotaReached } from "../Billing/Limits.ts"
import { AppConfig } from "../Config.ts"
import { decodeCursor } from "../Domain/Cursor.ts"
import { isId, type TenantId } from "../Domain/Ids.ts"
import {
  BadRequest,
  Conflict,
  DuplicateDocument,
  invalidField,
  NotFound,
  PayloadTooLarge,
  RechunkRateLimited,
  UnsupportedMediaType
} from "../Domain/Problems.ts"
import * as DurableRuns from "../Runtime/DurableRuns.ts"
import { defaultPageSize, type PageRequest } from "../Domain/Page.ts"
import { type ChunkingInput, type Document, isChunkKey, type KnowledgeBase } from "./Api.ts"
import { detect } from "./Extract.ts"
import { IngestionWorkflow } from "./IngestionWorkflow.ts"
import { type DocumentRow, KnowledgeRepo } from "./Repo.ts"
import { type Chunking, chunkingProblems, type ChunkingStrategy, defaultChunking } from "./Chunking.ts"
import { ExtractionSandbox } from "./Sandbox.ts"
import * as Traced from "../Observability/Traced.ts"

export const toDocument = (row: DocumentRow): Document => ({
  id: row.id,
  knowledgeId: row.knowledgeId,
  filename: row.filename,
  contentType: row.contentType,
  bytes: row.bytes,
  sha256: row.sha256,
  status: row.status,
  error: row.errorCode === null ? null : { code: row.errorCode, message: row.errorMessage ?? "" },
  chunking: {
    strategy: row.chunkStrategy as ChunkingStrategy,
    chunkSize: row.chunkSize,
    chunkOverlap: row.chunkOverlap
  },
  chunkCount: row.chunkCount,
  tokenCount: row.tokenCount,
  createdAt: row.createdAt,
  updatedAt: row.updatedAt,
  ...(row.waiting === null ? {} : { waiting: row.waiting })
})

const notFound = (id: string) => new NotFound({ detail: `No knowledge base ${id}` })

/** Settings over `base`: the given ones, checked together; a 400 names each bad one under `path`. */
const chunkingOver = (base: Chunking, input: ChunkingInput | undefined, path: ReadonlyArray<string>) => {
  const merged = {
    strategy: input?.strategy ?? base.strategy,
    chunkSize: input?.chunkSize ?? base.chunkSize,
    chunkOverlap: input?.chunkOverlap ?? base.chunkOverlap
  }
  const problems = chunkingProblems(merged)
  if (problems.length === 0) return Effect.succeed<Chunking>(merged)
  const errors = problems.map((message) => ({ path: [...path, message.split(" ")[0]!], message }))
  return Effect.fail(
    new BadRequest({ detail: errors.map((e) => `${e.path.join(".")}: ${e.message}`).join("; "), errors })
  )
}

/** One file of an upload, as received. */
export interface UploadFile {
  readonly filename: string
  readonly contentType: string | undefined
  readonly bytes: Uint8Array
}

/** Knowledge bases, their documents and chunks, uploads and their ingestion, and its sweeps. */
export class Knowledge extends Context.Service<Knowledge>()("agent-host/Knowledge", {
  make: Effect.gen(function* () {
    const ingestion = yield* DurableRuns.workflowCalls(IngestionWorkflow, (documentId) => ({ documentId }))
    const repo = yield* KnowledgeRepo
    const sandbox = yield* ExtractionSandbox
    const config = yield* AppConfig
    const limits = yield* Limits

    const findBase = Traced.fn("Knowledge.findBase")(function* (tenantId: TenantId, id: string) {
      const base = yield* repo.bases.findById(tenantId, id)
      if (Option.isNone(base)) return yield* notFound(id)
      return base.value
    })

    /** The chunking's columns. */
    const stored = (chunking: Chunking) => ({
      chunkStrategy: chunking.strategy,
      chunkSize: chunking.chunkSize,
      chunkOverlap: chunking.chunkOverlap
    })

    const list = (tenantId: TenantId, page: PageRequest) => repo.bases.list(tenantId, page)

    const create = Traced.fn("Knowledge.create")(function* (
      tenantId: TenantId,
      input: typeof KnowledgeBase.jsonCreate.Type
    ) {
      const chunking = yield* chunkingOver(defaultChunking, input.chunking, ["payload", "chunking"])
      const language = input.language ?? "simple"
      if (!(yield* repo.languageExists(language))) {
        return yield* invalidField(
          "language",
          `No text-search configuration ${JSON.stringify(language)} (try simple, english, french, german...)`
        )
      }
      const { chunking: _, ...fields } = input
      return yield* limits.admit(
        tenantId,
        "knowledgeBases",
        repo.bases.insert(tenantId, { ...fields, language, ...stored(chunking) })
      )
    })

    const update = Traced.fn("Knowledge.update")(function* (
      tenantId: TenantId,
      id: string,
      input: typeof KnowledgeBase.jsonUpdate.Type
    ) {
      const base = yield* findBase(tenantId, id)
      const { chunking, ...fields } = input
      const changes =
        chunking === undefined
          ? fields
          : { ...fields, ...stored(yield* chunkingOver(base.chunking, chunking, ["payload", "chunking"])) }
      const updated = yield* repo.bases.update(tenantId, id, changes)
      if (Option.isNone(updated)) return yield* notFound(id)
      return updated.value
    })

    const remove = Traced.fn("Knowledge.remove")(function* (tenantId: TenantId, id: string) {
      if (!(yield* repo.bases.remove(tenantId, id))) return yield* notFound(id)
    })

    // --- uploads -------------------------------------------------------------

    /**
     * Stores each file as a document and starts its ingestion; every file is
     * checked (size, type, duplicate) before any is stored. Waits up to about
     * 2 s for them to be ingested: `final` says whether they all were.
     */
    const upload = Traced.fn("Knowledge.upload")(function* (
      tenantId: TenantId,
      knowledgeId: string,
      input: {
        readonly files: ReadonlyArray<UploadFile>
        readonly chunking: ChunkingInput | undefined
        readonly chunkingPath: ReadonlyArray<string>
        readonly duplicates: "reject" | "allow"
      }
    ) {
      const base = yield* findBase(tenantId, knowledgeId)
      const chunking = yield* chunkingOver(base.chunking, input.chunking, input.chunkingPath)
      if (input.files.length === 0) return yield* invalidField("files", "Expected at least one file")
      if (input.files.length > config.maxUploadFiles) {
        return yield* invalidField("files", `Expected at most ${config.maxUploadFiles} files (MAX_UPLOAD_FILES)`)
      }
      const checked: Array<UploadFile & { readonly sha256: string; readonly contentType: string }> = []
      for (const file of input.files) {
        if (file.bytes.length > config.maxUploadBytes) {
          return yield* new PayloadTooLarge({
            detail: `${file.filename} has ${file.bytes.length} bytes; at most ${config.maxUploadBytes} are accepted (MAX_UPLOAD_BYTES)`,
            limit: config.maxUploadBytes
          })
        }
        const kind = detect(file)
        if (typeof kind !== "string")
          return yield* new UnsupportedMediaType({ detail: `${file.filename}: ${kind.message}` })
        const sha256 = Crypto.createHash("sha256").update(file.bytes).digest("hex")
        if (input.duplicates === "reject") {
          const existing = yield* repo.findDuplicate(knowledgeId, sha256)
          const twice = checked.find((other) => other.sha256 === sha256)
          if (Option.isSome(existing) || twice !== undefined) {
            const documentId = Option.isSome(existing) ? existing.value : "(another file of this upload)"
            return yield* new DuplicateDocument({
              detail: `${file.filename} is already in this knowledge base as document ${documentId}; add ?duplicates=allow to store it again`,
              documentId
            })
          }
        }
        checked.push({
          ...file,
          sha256,
          contentType: (file.contentType ?? "").split(";")[0]!.trim().toLowerCase() || "application/octet-stream"
        })
      }
      // Stored together, under the tenant's quotas of documents and bytes: all of them or none.
      const inserted = yield* limits.admitUpload(
        tenantId,
        { documents: checked.length, bytes: checked.reduce((sum, file) => sum + file.bytes.length, 0) },
        Effect.forEach(checked, (file) =>
          repo.insertDocument(tenantId, {
            knowledgeId,
            filename: file.filename,
            contentType: file.contentType,
            content: file.bytes,
            sha256: file.sha256,
            chunking
          })
        )
      )
      const ids: Array<string> = []
      for (const documentId of inserted) {
        const stored = yield* DurableRuns.startStored({
          insert: Effect.succeed({ id: documentId, fresh: true }),
          start: ingestion.start,
          timeout: config.clusterCallTimeout,
          // Stored but its start not confirmed: the sweeps start it, and the answer shows it processing.
          notStarted: (id) => id,
          what: "A document's ingestion",
          workflow: IngestionWorkflow._tag
        }).pipe(
          Effect.map((claimed) => claimed.id),
          Effect.catch((id) => Effect.succeed(id))
        )
        ids.push(stored)
      }
      // Small uploads are usually ingested at once: wait a little for them.
      const deadline = Date.now() + Duration.toMillis(config.uploadReadyWait)
      let final = false
      while (!final && Date.now() < deadline) {
        const statuses = yield* repo.statusOf(ids)
        final = ids.every((id) => statuses.get(id) !== undefined && statuses.get(id) !== "processing")
        if (!final) yield* Effect.sleep("25 millis")
      }
      const documents: Array<Document> = []
      for (const id of ids) {
        const row = yield* repo.findDocument(tenantId, knowledgeId, id)
        if (Option.isSome(row)) documents.push(toDocument(row.value))
      }
      return { documents, final: final && documents.length === 1 && input.files.length === 1 }
    })

    // --- documents and chunks ------------------------------------------------

    const findDocument = Traced.fn("Knowledge.findDocument")(function* (
      tenantId: TenantId,
      knowledgeId: string,
      id: string
    ) {
      yield* findBase(tenantId, knowledgeId)
      const row = yield* repo.findDocument(tenantId, knowledgeId, id)
      if (Option.isNone(row))
        return yield* new NotFound({ detail: `No document ${id} in knowledge base ${knowledgeId}` })
      return row.value
    })

    const documents = Traced.fn("Knowledge.documents")(function* (
      tenantId: TenantId,
      knowledgeId: string,
      page: PageRequest
    ) {
      yield* findBase(tenantId, knowledgeId)
      const after = yield* decodeCursor(page.cursor, isId)
      const rows = yield* repo.listDocuments(tenantId, knowledgeId, { after, limit: page.limit ?? defaultPageSize })
      return { ...rows, data: rows.data.map(toDocument) }
    })

    const document = Traced.fn("Knowledge.document")(function* (tenantId: TenantId, knowledgeId: string, id: string) {
      return toDocument(yield* findDocument(tenantId, knowledgeId, id))
    })

    const removeDocument = Traced.fn("Knowledge.removeDocument")(function* (
      tenantId: TenantId,
      knowledgeId: string,
      id: string
    ) {
      yield* findBase(tenantId, knowledgeId)
      if (!(yield* repo.removeDocument(tenantId, knowledgeId, id))) {
        return yield* new NotFound({ detail: `No document ${id} in knowledge base ${knowledgeId}` })
      }
    })

    const rechunk = Traced.fn("Knowledge.rechunk")(function* (
      tenantId: TenantId,
      knowledgeId: string,
      id: string,
      input: ChunkingInput
    ) {
      const base = yield* findBase(tenantId, knowledgeId)
      const row = yield* findDocument(tenantId, knowledgeId, id)
      if (row.status !== "ready") {
        return yield* new Conflict({
          detail: `Document ${id} is ${row.status}; only a ready document can be rechunked`
        })
      }
      const chunking = yield* chunkingOver(base.chunking, input, ["payload"])
      // Each rechunk rewrites every chunk of the document: RECHUNK_BURST at once, then one per RECHUNK_INTERVAL.
      const wait = yield* repo.takeRechunkSlot(
        tenantId,
        id,
        Duration.toSeconds(config.rechunkInterval),
        config.rechunkBurst
      )
      if (wait > 0) {
        const retryAfter = Math.max(1, Math.ceil(wait))
        return yield* new RechunkRateLimited({
          detail:
            `Document ${id} may be rechunked ${config.rechunkBurst} times at once, then once every ` +
            `${Duration.format(config.rechunkInterval)} (RECHUNK_BURST, RECHUNK_INTERVAL); try again in ${retryAfter} s`,
          retryAfter
        })
      }
      const source = yield* repo.ingestSource(id).pipe(Effect.orDie)
      if (Option.isNone(source) || source.value.text === null) {
        return yield* new Conflict({ detail: `Document ${id} has no stored text to rechunk` })
      }
      const layout = source.value.layout
      // Split in the extraction sandbox: a long text would hold this node's event loop for seconds.
      const splitAgain = yield* sandbox.split({
        kind: "split",
        input: {
          text: source.value.text,
          kind: layout?.kind as never,
          headings: layout?.headings,
          pages: layout?.pages
        },
        chunking
      })
      if (!splitAgain.ok)
        return yield* new Conflict({ detail: `Document ${id} could not be split again: ${splitAgain.message}` })
      const chunks = splitAgain.chunks
      const replaced = yield* repo.replaceChunks(id, source.value, chunking, chunks)
      if (replaced._tag === "Changed")
        return yield* new Conflict({ detail: `Document ${id} changed meanwhile; try again` })
      if (replaced._tag === "OverChunkLimit") {
        return yield* quotaReached(replaced.plan, "chunks", replaced.limit, replaced.used, chunks.length)
      }
      return yield* document(tenantId, knowledgeId, id)
    })

    const chunks = Traced.fn("Knowledge.chunks")(function* (
      tenantId: TenantId,
      knowledgeId: string,
      query: {
        readonly limit?: number | undefined
        readonly cursor?: string | undefined
        readonly documentId?: string | undefined
      }
    ) {
      yield* findBase(tenantId, knowledgeId)
      const after = yield* decodeCursor(query.cursor, isChunkKey)
      return yield* repo.listChunks(tenantId, knowledgeId, {
        documentId: query.documentId,
        after,
        limit: query.limit ?? defaultPageSize
      })
    })

    // --- sweeps --------------------------------------------------------------

    const sweeps: DurableRuns.Sweeps = {
      unfinished: repo.processing,
      notStarted: repo.processingSince,
      start: ingestion.start,
      reap: Effect.gen(function* () {
        const ids = yield* repo.failStuck(Duration.toSeconds(config.ingestionTimeout))
        if (ids.length === 0) return
        yield* Effect.logWarning("Documents still processing past INGESTION_TIMEOUT failed by the sweep").pipe(
          Effect.annotateLogs({ count: ids.length })
        )
      }),
      unpruned: (limit) => repo.unpruned(Duration.toSeconds(config.ingestionMessagesRetention), limit),
      prune: (ids) => ingestion.prune(ids, repo.markPruned(ids))
    }

    return {
      list,
      create,
      get: findBase,
      update,
      remove,
      upload,
      documents,
      document,
      removeDocument,
      rechunk,
      chunks,
      sweeps
    } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make).pipe(
    Layer.provide([KnowledgeRepo.layer, Limits.layer, ExtractionSandbox.layer])
  )

  /** The sweeps of ingestions (DurableRuns.sweeper), a cluster singleton. */
  static readonly sweeper = DurableRuns.sweeper(
    "IngestionSweep",
    "Ingestions",
    Effect.gen(function* () {
      return (yield* Knowledge).sweeps
    })
  )
}
