import * as Cause from "effect/Cause"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import { isSqlError } from "effect/sql/SqlError"
import * as Activity from "effect/workflow/Activity"
import * as Workflow from "effect/workflow/Workflow"
import { AppConfig } from "../Config.ts"
import { isTransient, retryTransient } from "../Database/Errors.ts"
import { storable } from "../Domain/Text.ts"
import { extract } from "./Extract.ts"
import { KnowledgeRepo } from "./Repo.ts"
import { split } from "./Splitter.ts"
import * as Traced from "../Platform/Traced.ts"

/**
 * The ingestion of one uploaded document is a durable workflow of effect's
 * cluster, started once the document (with the upload's bytes) is stored.
 * Its one activity extracts the text, splits it and writes the chunks with
 * the status `ready` in one transaction, or the status `failed` with the
 * reason: after a crash or a lost node the activity runs again (the write is
 * idempotent) on whichever node takes the workflow over, and a document that
 * still does not finish is failed by the sweep at INGESTION_TIMEOUT.
 */
export const IngestionWorkflow = Workflow.make("Ingestion", {
  payload: { documentId: Schema.String },
  idempotencyKey: ({ documentId }) => documentId
})

const ingest = (documentId: string) =>
  Effect.gen(function*() {
    const repo = yield* KnowledgeRepo
    const config = yield* AppConfig
    const found = yield* retryTransient(repo.ingestSource(documentId))
    // Deleted, or finished already (a replay after the write).
    if (Option.isNone(found) || found.value.status !== "processing") return
    const source = found.value
    if (source.content === null) {
      return yield* retryTransient(repo.finishFailed(documentId, "parse_error", "The upload's bytes are missing."))
    }
    const extracted = yield* extract(
      { bytes: source.content, contentType: source.contentType, filename: source.filename },
      {
        maxBytes: config.maxUploadBytes,
        maxPages: config.maxUploadPages,
        maxChars: config.maxDocumentChars,
        timeout: config.extractionTimeout
      }
    ).pipe(
      Effect.catchDefect((defect) => {
        // A crash inside an extractor is a file it cannot read, never a document left processing.
        return Effect.fail({ code: "parse_error", message: storable(`The file could not be read: ${String(defect).slice(0, 300)}`) })
      }),
      Effect.result
    )
    if (extracted._tag === "Failure") {
      return yield* retryTransient(repo.finishFailed(documentId, extracted.failure.code, storable(extracted.failure.message)))
    }
    const document = extracted.success
    const chunks = split({ text: document.text, kind: document.kind, headings: document.headings, pages: document.pages }, source.chunking)
    yield* retryTransient(repo.finishReady(documentId, source, {
      contentType: document.contentType,
      text: storable(document.text),
      layout: { kind: document.kind, headings: document.headings, ...(document.pages === undefined ? {} : { pages: document.pages }) },
      chunks
    }))
  }).pipe(Traced.withSpan("Knowledge.ingest", { attributes: { documentId } }))

export const layer = IngestionWorkflow.toLayer(({ documentId }) =>
  Activity.make({ name: "ingest", execute: Effect.orDie(ingest(documentId)) }).pipe(
    Effect.catchCause((cause) =>
      Cause.hasInterrupts(cause)
        ? Effect.interrupt
        : Effect.gen(function*() {
          const repo = yield* KnowledgeRepo
          yield* Effect.logError("Ingestion failed unexpectedly", cause).pipe(Effect.annotateLogs({ documentId }))
          // A database still unreachable after the retries: the sweeps take the document up again.
          const error = Cause.squash(cause)
          if (isSqlError(error) && isTransient(error)) return
          yield* retryTransient(repo.finishFailed(documentId, "parse_error", "The document could not be ingested.")).pipe(
            Effect.timeout(Duration.minutes(1)),
            Effect.ignore
          )
        })
    )
  )
).pipe(Layer.provide(KnowledgeRepo.layer))
