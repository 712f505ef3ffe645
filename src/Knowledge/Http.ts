import * as Effect from "effect/Effect"
import * as FileSystem from "effect/FileSystem"
import * as Layer from "effect/Layer"
import * as HttpEffect from "effect/http/HttpEffect"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as HttpApiBuilder from "effect/http-api/HttpApiBuilder"
import { Api } from "../Api.ts"
import { invalidField, RechunkRateLimited } from "../Domain/Problems.ts"
import { forTenant, managementHandlers } from "../Http/Management.ts"
import type { ChunkingInput, UploadForm, UploadJson } from "./Api.ts"
import { Knowledge, type UploadFile } from "./Knowledge.ts"
import * as Traced from "../Observability/Traced.ts"

// A base64 payload is refused as a whole when it is not canonical base64, rather than decoded leniently.
const base64 = /^[A-Za-z0-9+/]*={0,2}$/

const fromJson = (payload: UploadJson) =>
  Effect.gen(function* () {
    if (payload.encoding === "base64") {
      const compact = payload.content.replace(/\s+/g, "")
      if (compact.length % 4 !== 0 || !base64.test(compact))
        return yield* invalidField("content", "Expected base64 (encoding: base64)")
      return [{ filename: payload.filename, contentType: payload.contentType, bytes: Buffer.from(compact, "base64") }]
    }
    return [
      { filename: payload.filename, contentType: payload.contentType, bytes: Buffer.from(payload.content, "utf8") }
    ]
  })

const formNumber = (raw: string | undefined) => (raw === undefined ? undefined : Number(raw))

const fromForm = (payload: UploadForm) =>
  Effect.gen(function* () {
    const fs = yield* FileSystem.FileSystem
    const files: Array<UploadFile> = []
    for (const file of payload.files) {
      files.push({
        filename: file.name || "upload",
        contentType: file.contentType,
        bytes: yield* fs.readFile(file.path)
      })
    }
    const chunking: ChunkingInput = {
      ...(payload.strategy === undefined ? {} : { strategy: payload.strategy as ChunkingInput["strategy"] & string }),
      ...(payload.chunkSize === undefined ? {} : { chunkSize: formNumber(payload.chunkSize)! }),
      ...(payload.chunkOverlap === undefined ? {} : { chunkOverlap: formNumber(payload.chunkOverlap)! })
    }
    return { files, chunking }
  })

/** Retry-After on a rechunk refused for coming too soon after the document's previous ones. */
const withRetryAfter = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.tapError(effect, (error) =>
    error instanceof RechunkRateLimited
      ? HttpEffect.appendPreResponseHandler((_request, response) =>
          Effect.succeed(HttpServerResponse.setHeader(response, "retry-after", String(error.retryAfter)))
        )
      : Effect.void
  )

export const KnowledgeHttp = HttpApiBuilder.group(
  Api,
  "knowledge",
  Traced.fn(function* (handlers) {
    const knowledge = yield* Knowledge
    return handlers.handleAll({
      ...managementHandlers(knowledge),
      upload: forTenant(
        Traced.fn(function* (tenantId, { params, payload, query }) {
          const isForm = "files" in payload
          const form = isForm ? yield* fromForm(payload as UploadForm).pipe(Effect.orDie) : undefined
          const files = form?.files ?? (yield* fromJson(payload as UploadJson))
          const uploaded = yield* knowledge.upload(tenantId, params.id, {
            files,
            chunking: form?.chunking ?? (payload as UploadJson).chunking,
            chunkingPath: isForm ? ["payload"] : ["payload", "chunking"],
            duplicates: query.duplicates ?? "reject"
          })
          // One document ingested at once is answered as itself; anything else as the list, still being processed.
          return uploaded.final
            ? HttpServerResponse.jsonUnsafe(uploaded.documents[0], { status: 201 })
            : HttpServerResponse.jsonUnsafe({ data: uploaded.documents }, { status: 202 })
        })
      ),
      documents: forTenant((tenantId, { params, query }) => knowledge.documents(tenantId, params.id, query)),
      document: forTenant((tenantId, { params }) => knowledge.document(tenantId, params.id, params.documentId)),
      removeDocument: forTenant((tenantId, { params }) =>
        knowledge.removeDocument(tenantId, params.id, params.documentId)
      ),
      rechunk: forTenant((tenantId, { params, payload }) =>
        withRetryAfter(knowledge.rechunk(tenantId, params.id, params.documentId, payload))
      ),
      chunks: forTenant((tenantId, { params, query }) => knowledge.chunks(tenantId, params.id, query))
    })
  })
)

export const layer = KnowledgeHttp.pipe(Layer.provide(Knowledge.layer))
