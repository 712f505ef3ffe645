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
import { type IngestSource, KnowledgeRepo } from "./Repo.ts"
import { ExtractionSandbox } from "./Sandbox.ts"
import { defaultZipLimits } from "./Zip.ts"
import * as Traced from "../Observability/Traced.ts"

/**
 * The ingestion of one uploaded document is a durable workflow of effect's
 * cluster, started once the document (with the upload's bytes) is stored.
 * Its one activity takes one of the tenant's extraction places, then one of
 * the node's, has the sandbox (Sandbox.ts: a child process, killed past its
 * memory bound or deadline) extract the text and split it, and writes the
 * chunks with the status `ready` in one transaction, or the status `failed`
 * with the reason. After a crash or a lost node the activity runs again (the
 * write is idempotent) on whichever node takes the workflow over, unless the
 * attempt the node died in was under strain or the attempts are spent (see
 * `unfinished`); a document that still does not finish is failed by the
 * sweep at INGESTION_TIMEOUT.
 */
export const IngestionWorkflow = Workflow.make("Ingestion", {
  payload: { documentId: Schema.String },
  idempotencyKey: ({ documentId }) => documentId
})

/** The reason a document whose earlier attempt never finished is failed with, unread. */
const unfinished = (source: IngestSource, maxAttempts: number) =>
  source.extractionStrain !== null
    ? {
        code: source.extractionStrain.code,
        message:
          `Extraction did not finish: the process running it stopped during an earlier attempt, while ` +
          `${source.extractionStrain.detail}; the document is not read again.`
      }
    : {
        code: "timeout",
        message:
          `Extraction did not finish in ${source.extractionAttempts} attempt${source.extractionAttempts === 1 ? "" : "s"} ` +
          `(EXTRACTION_MAX_ATTEMPTS is ${maxAttempts}): the process running it stopped each time; the document is not read again.`
      }

const ingest = (documentId: string) =>
  Effect.gen(function* () {
    const repo = yield* KnowledgeRepo
    const config = yield* AppConfig
    const sandbox = yield* ExtractionSandbox
    const found = yield* retryTransient(repo.ingestSource(documentId))
    // Deleted, or finished already (a replay after the write).
    if (Option.isNone(found)) return
    const source = found.value
    yield* Effect.annotateCurrentSpan({ "knowledge_base.id": source.knowledgeId, "tenant.id": source.tenantId })
    if (source.status !== "processing") return
    const fail = (code: string, message: string) =>
      retryTransient(repo.finishFailed(documentId, code, storable(message)))
    if (source.content === null) return yield* fail("parse_error", "The upload's bytes are missing.")
    // What the reaper would do, done before anything else: whoever resumes this ingestion (the sweep, or the
    // cluster replaying it when a node takes the shard over), a document past its time is not parsed.
    const timeoutSeconds = Duration.toSeconds(config.ingestionTimeout)
    if (source.ageSeconds > timeoutSeconds)
      return yield* fail("timeout", `Ingestion did not finish within ${timeoutSeconds} s`)
    // An earlier attempt started and never finished: its process stopped. Under strain (past half its memory
    // or time) the document is taken to be the cause; otherwise it is tried again, up to the bound.
    if (source.extractionStrain !== null || source.extractionAttempts >= config.extractionMaxAttempts) {
      const reason = unfinished(source, config.extractionMaxAttempts)
      return yield* fail(reason.code, reason.message)
    }
    // One of the tenant's places first, waited for durably (the document stays processing; the sweeps
    // resume it after a restart); then one of the node's.
    let began = false
    const reply = yield* Effect.gen(function* () {
      // Asked again less and less often (up to every 2 s): a tenant's long queue costs the database little.
      for (let pause = 250; ; pause = Math.min(2_000, pause * 1.5)) {
        const slot = yield* retryTransient(repo.takeExtractionSlot(documentId, source.tenantId))
        if (slot === "gone") return Option.none()
        if (slot === "taken") break
        yield* Effect.sleep(Duration.millis(Math.round(pause * (0.75 + Math.random() / 2))))
      }
      return yield* sandbox.extract(
        {
          kind: "extract",
          bytes: source.content!,
          contentType: source.contentType,
          filename: source.filename,
          maxBytes: config.maxUploadBytes,
          maxPages: config.maxUploadPages,
          maxChars: config.maxDocumentChars,
          zip: {
            ...defaultZipLimits,
            maxEntryBytes: config.extractionZipMaxEntryBytes,
            maxTotalBytes: 2 * config.extractionZipMaxEntryBytes,
            maxRatio: config.extractionZipMaxRatio
          },
          chunking: source.chunking
        },
        {
          begin: Effect.gen(function* () {
            const attempts = yield* retryTransient(repo.beginExtraction(documentId))
            if (Option.isNone(attempts)) return false
            began = true
            // Another run of this ingestion counted an attempt meanwhile.
            if (attempts.value > config.extractionMaxAttempts) {
              yield* fail(
                "timeout",
                unfinished({ ...source, extractionAttempts: attempts.value - 1 }, config.extractionMaxAttempts).message
              )
              return false
            }
            return true
          }),
          strained: (strain) =>
            repo.strainExtraction(documentId, strain).pipe(
              Effect.catchCause((cause) =>
                Effect.logWarning("The strain of an extraction could not be recorded", cause)
              ),
              Effect.annotateLogs({ documentId })
            )
        }
      )
    }).pipe(
      // A shutdown of this process is no fault of the document: its place, and its attempt, are given back.
      Effect.onInterrupt(() =>
        repo.giveBackExtraction(documentId, began).pipe(Effect.timeout(Duration.seconds(5)), Effect.ignore)
      )
    )
    if (Option.isNone(reply)) return
    const result = reply.value
    if (!result.ok) return yield* fail(result.code, result.message)
    const document = result.document
    yield* retryTransient(
      repo.finishReady(documentId, source, {
        contentType: document.contentType,
        text: document.text,
        layout: {
          kind: document.kind,
          headings: document.headings,
          ...(document.pages === undefined ? {} : { pages: document.pages })
        },
        chunks: result.chunks
      })
    )
  }).pipe(Traced.withSpan("Knowledge.ingest", { attributes: { "document.id": documentId } }))

export const layer = IngestionWorkflow.toLayer(({ documentId }) =>
  Activity.make({ name: "ingest", execute: Effect.orDie(ingest(documentId)) }).pipe(
    Effect.catchCause((cause) =>
      Cause.hasInterrupts(cause)
        ? Effect.interrupt
        : Effect.gen(function* () {
            const repo = yield* KnowledgeRepo
            yield* Effect.logError("Ingestion failed unexpectedly", cause).pipe(Effect.annotateLogs({ documentId }))
            // A database still unreachable after the retries: the sweeps take the document up again.
            const error = Cause.squash(cause)
            if (isSqlError(error) && isTransient(error)) return
            yield* retryTransient(
              repo.finishFailed(documentId, "parse_error", "The document could not be ingested.")
            ).pipe(Effect.timeout(Duration.minutes(1)), Effect.ignore)
          })
    )
  )
).pipe(Layer.provide([KnowledgeRepo.layer, ExtractionSandbox.layer]))
