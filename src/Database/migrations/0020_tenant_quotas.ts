import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"

// Per-plan quotas (docs/limits.md). The quotas themselves count the tenant's
// rows under a lock of its `tenants` row, so they need no table; what is new
// is a document's rechunk allowance: `rechunk_tat` is when its past rechunks
// are paid back, at one per RECHUNK_INTERVAL (GCRA), null when it has none.
// Chunk and byte totals per tenant are sums over the tenant's documents,
// which the index below reads without the documents' text.
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE knowledge_documents ADD COLUMN rechunk_tat timestamptz`
  yield* sql`CREATE INDEX knowledge_documents_tenant_usage_idx ON knowledge_documents (tenant_id) INCLUDE (status, bytes, chunk_count)`
})
