import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fs from "node:fs"
import { storable } from "../Domain/Text.ts"
import type { Chunking } from "./Chunking.ts"
import { type ExtractedDocument, extract } from "./Extract.ts"
import { searchText } from "./Segment.ts"
import { type Chunk, split, type SplitInput } from "./Splitter.ts"
import type { ZipLimits } from "./Zip.ts"

/**
 * The sandbox's child process (see Sandbox.ts): it reads one job at a time
 * from its parent (a document to extract, split and prepare for search, or a
 * stored text to split again) and answers with the result or the reason it
 * failed. All the
 * work that parses untrusted bytes happens here, where the parent's memory
 * bound and deadline can end it by killing the process. Node runs this file
 * directly (type stripping), so it uses only erasable TypeScript.
 */

export interface ExtractRequest {
  readonly kind: "extract"
  readonly bytes: Uint8Array
  readonly contentType: string
  readonly filename: string
  readonly maxBytes: number
  readonly maxPages: number
  readonly maxChars: number
  readonly zip: ZipLimits
  readonly chunking: Chunking
}

/** A chunk with the text its search vector is made of. */
export interface IndexedChunk extends Chunk {
  readonly indexed: string
}

/** A document's stored text split again with other settings (a rechunk). */
export interface SplitRequest {
  readonly kind: "split"
  readonly input: SplitInput
  readonly chunking: Chunking
}

/** Why a job failed: an extraction error's code, or the sandbox's (`too_large`, `timeout`, `parse_error`). */
export interface JobFailure {
  readonly ok: false
  readonly code: string
  readonly message: string
}

export type ExtractReply =
  | { readonly ok: true; readonly document: ExtractedDocument; readonly chunks: ReadonlyArray<IndexedChunk> }
  | JobFailure

export type SplitReply = { readonly ok: true; readonly chunks: ReadonlyArray<IndexedChunk> } | JobFailure

const indexed = (chunks: ReadonlyArray<Chunk>): Array<IndexedChunk> =>
  chunks.map((chunk) => ({ ...chunk, indexed: searchText(chunk.content) }))

const describe = (cause: unknown) =>
  (cause instanceof Error ? cause.message : String(cause)).split("\n")[0]!.slice(0, 300)

export const handle = (request: ExtractRequest): Promise<ExtractReply> =>
  extract(
    { bytes: request.bytes, contentType: request.contentType, filename: request.filename },
    // The parent's deadline kills this process: no timer of its own is needed.
    {
      maxBytes: request.maxBytes,
      maxPages: request.maxPages,
      maxChars: request.maxChars,
      timeout: Duration.infinity,
      zip: request.zip
    }
  ).pipe(
    Effect.map((document): ExtractReply => {
      const text = storable(document.text)
      const chunks = split(
        { text, kind: document.kind, headings: document.headings, pages: document.pages },
        request.chunking
      )
      return { ok: true, document: { ...document, text }, chunks: indexed(chunks) }
    }),
    Effect.catch((error) => Effect.succeed<ExtractReply>({ ok: false, code: error.code, message: error.message })),
    // A crash inside an extractor is a file it cannot read.
    Effect.catchDefect((defect) =>
      Effect.succeed<ExtractReply>({
        ok: false,
        code: "parse_error",
        message: `The file could not be read: ${describe(defect)}`
      })
    ),
    Effect.runPromise
  )

const splitAgain = (request: SplitRequest): Promise<SplitReply> =>
  Promise.resolve().then(() => ({ ok: true, chunks: indexed(split(request.input, request.chunking)) }))

if (process.send !== undefined && process.argv[2] === "--extract-child") {
  // Under memory pressure the kernel kills this process before the service.
  try {
    Fs.writeFileSync("/proc/self/oom_score_adj", "1000")
  } catch {
    // Not Linux, or not allowed: the parent's watchdog still bounds the memory.
  }
  // The parent is gone: nothing will read the answer.
  process.on("disconnect", () => process.exit(0))
  process.on("message", (request: ExtractRequest | SplitRequest) => {
    ;(request.kind === "split" ? splitAgain(request) : handle(request)).then(
      (reply) => process.send!(reply),
      (cause) =>
        process.send!({ ok: false, code: "parse_error", message: `The file could not be read: ${describe(cause)}` })
    )
  })
  process.send({ ready: true })
}
