import * as Schema from "effect/Schema"
import * as Model from "effect/schema/Model"
import * as HttpApiEndpoint from "effect/http-api/HttpApiEndpoint"
import * as HttpApiGroup from "effect/http-api/HttpApiGroup"
import * as HttpApiSchema from "effect/http-api/HttpApiSchema"
import * as OpenApi from "effect/http-api/OpenApi"
import * as Multipart from "effect/http/Multipart"
import { SessionAuth, sessionCredential, SessionQuota } from "../Auth/Api.ts"
import { operation } from "../Domain/ApiDocs.ts"
import * as Entity from "../Domain/Entity.ts"
import { managementEndpoints } from "../Domain/Management.ts"
import { PageOf, pageQuery, PageQuery } from "../Domain/Page.ts"
import { DocumentId, isId, KnowledgeId } from "../Domain/Ids.ts"
import { boundedArray, text } from "../Domain/Input.ts"
import { RunWaiting } from "../Domain/RunQueue.ts"
import {
  BadRequest,
  Conflict,
  DuplicateDocument,
  NotFound,
  PayloadTooLarge,
  QuotaReached,
  RechunkRateLimited,
  StorageQuotaExceeded,
  UnsupportedMediaType
} from "../Domain/Problems.ts"
import { ChunkingStrategy, maxChunkSize, minChunkSize } from "./Chunking.ts"

const Name = text(Schema.isMinLength(1, { message: "Expected a non-empty name" }), Schema.isMaxLength(200))
const Description = text(Schema.isMaxLength(2000))
const Language = text(
  Schema.isMinLength(1),
  Schema.isMaxLength(63),
  Schema.isPattern(/^[a-z_][a-z0-9_]*$/, {
    message: "Expected the name of a text-search configuration, such as simple or english"
  })
).annotate({
  description: "The Postgres text-search configuration of the base's words (`simple`, `english`, `french`...)."
})

export const Chunking = Schema.Struct({
  strategy: ChunkingStrategy,
  chunkSize: Schema.Int.annotate({ description: `Most tokens in a chunk, ${minChunkSize} to ${maxChunkSize}.` }),
  chunkOverlap: Schema.Int.annotate({ description: "Tokens consecutive chunks share, at most half the size." })
})

/** Chunking settings as a request gives them: any left out keep their default; checked together by the service. */
export const ChunkingInput = Schema.Struct({
  strategy: Schema.optionalKey(ChunkingStrategy),
  chunkSize: Schema.optionalKey(Schema.Int),
  chunkOverlap: Schema.optionalKey(Schema.Int)
})
export type ChunkingInput = typeof ChunkingInput.Type

/**
 * A knowledge base: its row, its JSON, and what a client sends to create
 * (`KnowledgeBase.jsonCreate`) or update it (`KnowledgeBase.jsonUpdate`).
 * The counts are those of its ready documents, read with it.
 */
export class KnowledgeBase extends Model.Class<KnowledgeBase>("KnowledgeBase")({
  id: Entity.id(KnowledgeId),
  name: Entity.required(Schema.String, Name),
  description: Entity.withDefault(Schema.String, "", Description),
  // `simple` when omitted.
  language: Entity.createOnly(Schema.String, Language),
  chunking: Entity.composite(
    Chunking.annotate({ description: "The chunking of new uploads (each upload may give its own)." }),
    ChunkingInput
  ),
  chunkStrategy: Entity.stored(ChunkingStrategy),
  chunkSize: Entity.stored(Schema.Int),
  chunkOverlap: Entity.stored(Schema.Int),
  documentCount: Entity.generated(Schema.Int),
  chunkCount: Entity.generated(Schema.Int),
  tokenCount: Entity.generated(Schema.Int),
  createdAt: Entity.generated(Schema.Date),
  updatedAt: Entity.generated(Schema.Date)
}) {}

export const DocumentStatus = Schema.Literals(["processing", "ready", "failed"])
export type DocumentStatus = typeof DocumentStatus.Type

export const DocumentError = Schema.Struct({
  code: Schema.String.annotate({
    description:
      "`no_text`, `unsupported_type`, `parse_error`, `too_large` or `timeout`; `chunk_limit` when its chunks would pass the plan's MAX_CHUNKS."
  }),
  message: Schema.String
})

export const Document = Schema.Struct({
  id: DocumentId,
  knowledgeId: KnowledgeId,
  filename: Schema.String,
  contentType: Schema.String,
  bytes: Schema.Int,
  sha256: Schema.String,
  status: DocumentStatus,
  error: Schema.NullOr(DocumentError),
  chunking: Chunking,
  chunkCount: Schema.Int,
  tokenCount: Schema.Int,
  createdAt: Schema.Date,
  updatedAt: Schema.Date,
  waiting: Schema.optionalKey(
    RunWaiting.annotate({
      description:
        "Present while the document is `processing` and waits for one of its tenant's extraction places " +
        "(the plan's FREE_/PRO_/BUSINESS_EXTRACTION_CONCURRENCY, here `limit`; `ahead`: the tenant's documents waiting " +
        "before it, extracted in upload order); gone once its extraction starts."
    })
  )
})
export type Document = typeof Document.Type

export const Chunk = Schema.Struct({
  id: Schema.String,
  knowledgeId: KnowledgeId,
  documentId: DocumentId,
  index: Schema.Int,
  content: Schema.String,
  tokenCount: Schema.Int,
  startOffset: Schema.Int.annotate({
    description: "Where the chunk starts in the document's extracted text (UTF-16 units)."
  }),
  endOffset: Schema.Int,
  page: Schema.NullOr(Schema.Int).annotate({ description: "The PDF page the chunk starts on; null for other types." }),
  headingPath: Schema.Array(Schema.String).annotate({
    description: "The headings the chunk sits under (Markdown, HTML, DOCX)."
  })
})
export type Chunk = typeof Chunk.Type

export const maxFilenameChars = 255

export const UploadJson = Schema.Struct({
  content: text().annotate({ description: "The file: its text, or its bytes in base64 with `encoding: base64`." }),
  filename: text(Schema.isMinLength(1, { message: "Expected a filename" }), Schema.isMaxLength(maxFilenameChars)),
  contentType: Schema.optionalKey(text(Schema.isMaxLength(200))),
  encoding: Schema.optionalKey(Schema.Literals(["utf8", "base64"])),
  chunking: Schema.optionalKey(ChunkingInput)
})
export type UploadJson = typeof UploadJson.Type

const numberField = text(Schema.isMaxLength(10), Schema.isPattern(/^\d+$/, { message: "Expected a whole number" }))

// The parts themselves are bounded while the body is parsed (MAX_UPLOAD_FILES); so is the list.
export const UploadForm = Schema.Struct({
  files: boundedArray(Multipart.PersistedFileSchema, { max: 64, tooMany: "Expected at most 64 files" }),
  strategy: Schema.optionalKey(text(Schema.isMaxLength(20))),
  chunkSize: Schema.optionalKey(numberField),
  chunkOverlap: Schema.optionalKey(numberField)
}).pipe(HttpApiSchema.asMultipart())
export type UploadForm = typeof UploadForm.Type

export const UploadQuery = {
  duplicates: Schema.optionalKey(
    Schema.Literals(["reject", "allow"]).annotate({
      description: "`reject` (default): the same bytes already in the base are a 409; `allow`: stored again."
    })
  )
}

export const Uploaded = Schema.Struct({ data: Schema.Array(Document) })

export const RechunkRequest = ChunkingInput

export const DocumentList = PageOf(Document)
export const ChunkList = PageOf(Chunk)

/** A chunk list's cursor holds `<documentId>/<index>`. */
export const isChunkKey = (key: string) => {
  const slash = key.indexOf("/")
  return slash > 0 && isId(key.slice(0, slash)) && /^(0|[1-9]\d{0,8})$/.test(key.slice(slash + 1))
}

const byId = { id: KnowledgeId }
const byDocument = { id: KnowledgeId, documentId: DocumentId }
const notTheTenants = "404 when the knowledge base is not the tenant's."

export class KnowledgeApi extends HttpApiGroup.make("knowledge")
  .add(
    ...managementEndpoints({
      name: "knowledge base",
      model: KnowledgeBase,
      credential: sessionCredential,
      errors: { create: [BadRequest, QuotaReached], update: [NotFound, BadRequest] },
      docs: {
        list: { description: "The tenant's knowledge bases, oldest first, a page at a time (`limit`, `cursor`)." },
        create: {
          description:
            "A knowledge base with its text-search `language` (default `simple`) and the chunking of its " +
            "uploads (default `auto`, 512 tokens, 64 of overlap).",
          errors:
            "400 on invalid fields, naming each. 429 when the tenant has as many knowledge bases as its plan " +
            "allows (MAX_KNOWLEDGE_BASES)."
        },
        get: { description: "The knowledge base with its counts of documents, chunks and tokens." },
        update: {
          description:
            "Changes the given fields. New chunking settings apply to later uploads; rechunk a document to " +
            "apply them to it.",
          errors: `400 on invalid fields. ${notTheTenants}`
        },
        remove: {
          description: "Deletes the base with its documents and chunks; agents grounded on it stop retrieving from it."
        }
      }
    }),
    HttpApiEndpoint.post("upload", "/:id/upload", {
      params: byId,
      query: UploadQuery,
      payload: [UploadJson, UploadForm],
      success: [Document.pipe(HttpApiSchema.status(201)), Uploaded.pipe(HttpApiSchema.status(202))],
      error: [
        NotFound,
        BadRequest,
        DuplicateDocument,
        PayloadTooLarge,
        UnsupportedMediaType,
        QuotaReached,
        StorageQuotaExceeded
      ]
    })
      .middleware(SessionQuota)
      .annotateMerge(
        operation({
          summary: "Upload documents",
          description:
            "JSON `{ content, filename, contentType?, encoding?, chunking? }` or `multipart/form-data` with " +
            "one or more `files` (and optional `strategy`, `chunkSize`, `chunkOverlap` fields). Plain text, Markdown, " +
            "HTML, JSON, CSV, PDF and DOCX, known by their content and declared type. Each file becomes a document, " +
            "ingested in the background: 201 with the document when one upload was ingested within UPLOAD_READY_WAIT, 2 s by default (ready, " +
            "or failed with its error), else 202 with `{ data: [Document] }`, each `processing` until it is `ready` or " +
            "`failed`.",
          credential: sessionCredential,
          errors:
            "400 on invalid fields. 404 when the base is not the tenant's. 409 when the same bytes are already " +
            "in the base (naming the document; `?duplicates=allow` stores them again). 413 beyond MAX_UPLOAD_BYTES, " +
            "or when the tenant's documents would pass its plan's MAX_STORED_BYTES. 415 for an unsupported type. 429 " +
            "when the upload would pass the plan's MAX_DOCUMENTS, or its ready documents hold MAX_CHUNKS chunks " +
            "already. Counted against the plan's daily requests: 429 past them."
        })
      ),
    HttpApiEndpoint.get("documents", "/:id/documents", {
      params: byId,
      query: PageQuery,
      success: DocumentList,
      error: NotFound
    }).annotateMerge(
      operation({
        summary: "List a base's documents",
        description: "The documents of the base, oldest first, a page at a time, with their status and counts.",
        credential: sessionCredential,
        errors: notTheTenants
      })
    ),
    HttpApiEndpoint.get("document", "/:id/documents/:documentId", {
      params: byDocument,
      success: Document,
      error: NotFound
    }).annotateMerge(
      operation({
        summary: "Get a document",
        description: "The document with its status, its error when it failed, and its counts.",
        credential: sessionCredential,
        errors: "404 when the base or the document is not the tenant's."
      })
    ),
    HttpApiEndpoint.delete("removeDocument", "/:id/documents/:documentId", {
      params: byDocument,
      success: HttpApiSchema.NoContent,
      error: NotFound
    }).annotateMerge(
      operation({
        summary: "Delete a document",
        description: "Deletes the document and its chunks.",
        credential: sessionCredential,
        errors: "404 when the base or the document is not the tenant's."
      })
    ),
    HttpApiEndpoint.post("rechunk", "/:id/documents/:documentId/rechunk", {
      params: byDocument,
      payload: RechunkRequest,
      success: Document,
      error: [NotFound, BadRequest, Conflict, QuotaReached, RechunkRateLimited]
    })
      .middleware(SessionQuota)
      .annotateMerge(
        operation({
          summary: "Rechunk a document",
          description:
            "Splits the document's text again with these settings (the base's for those left out) and " +
            "replaces its chunks in one transaction: readers see the old chunks or the new ones, never a mix.",
          credential: sessionCredential,
          errors:
            "400 on invalid settings. 404 when the base or the document is not the tenant's. 409 while the " +
            "document is still processing, or when it failed. 429 when the new chunks would pass the plan's " +
            "MAX_CHUNKS, or when the document was rechunked RECHUNK_BURST times within RECHUNK_INTERVAL (with " +
            "Retry-After). Counted against the plan's daily requests: 429 past them."
        })
      ),
    HttpApiEndpoint.get("chunks", "/:id/chunks", {
      params: byId,
      query: { ...pageQuery(isChunkKey), documentId: Schema.optionalKey(DocumentId) },
      success: ChunkList,
      error: NotFound
    }).annotateMerge(
      operation({
        summary: "List a base's chunks",
        description:
          "The chunks of the base's documents in document order (documents oldest first, then by index), " +
          "a page at a time; `documentId` keeps one document's.",
        credential: sessionCredential,
        errors: `400 on a bad \`limit\` or \`cursor\`. ${notTheTenants}`
      })
    )
  )
  .middleware(SessionAuth)
  .prefix("/api/knowledge")
  .annotateMerge(
    OpenApi.annotations({
      title: "Knowledge bases",
      description:
        "Knowledge bases, their uploaded documents (ingested in the background) and the chunks they are " +
        "split into."
    })
  ) {}
