import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"

// The chunks' full-text index (GIN) takes new entries into a list of pending
// ones, merged into the index only when the list outgrows
// gin_pending_list_limit (4 MB by default) or when the table is vacuumed, and
// every search reads the whole list. Under the default, right after an
// ingestion, a search over 50,000 chunks took up to seven times longer at p95
// (about 110 ms against 15, `npm run bench:search`), and a table that grows
// too slowly for autovacuum kept it so. A list of 256 kB bounds what a search
// reads to a sixteenth, at the cost of merging more often (seeding the bench's
// chunks took 30 s instead of 21). What is pending now is merged at once.
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER INDEX knowledge_chunks_search_idx SET (gin_pending_list_limit = 256)`
  yield* sql`SELECT gin_clean_pending_list('knowledge_chunks_search_idx'::regclass)`
})
