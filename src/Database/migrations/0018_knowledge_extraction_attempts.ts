import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"

// Extraction runs in a sandbox process, and what each attempt did is kept on
// the document, so that one whose extraction brought its process down is
// failed at the next attempt instead of being parsed again:
// - extraction_attempts: attempts started, counted before the bytes reach the sandbox;
// - extraction_strain: what the sandbox's watchdog saw when the attempt was past
//   half its memory or time ({ code, detail }), cleared when an attempt starts;
// - extraction_slot_at: when the document took one of its tenant's extraction
//   places (EXTRACTION_CONCURRENCY_PER_TENANT); a document processing with a
//   place holds it until it is ready or failed; the others wait, oldest first.
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE knowledge_documents
    ADD COLUMN extraction_attempts integer NOT NULL DEFAULT 0,
    ADD COLUMN extraction_strain jsonb,
    ADD COLUMN extraction_slot_at timestamptz`
  // A tenant's documents in processing, oldest first: the places they hold and the queue before a document
  // are counted at every take.
  yield* sql`CREATE INDEX knowledge_documents_tenant_processing_idx ON knowledge_documents (tenant_id, created_at, id)
    WHERE status = 'processing'`
})
