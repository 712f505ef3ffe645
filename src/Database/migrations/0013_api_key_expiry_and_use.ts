import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"

// API keys may expire, and show when they were last used (written in batches,
// so it is exact to within the flush interval, never on every request).
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE api_keys ADD COLUMN expires_at timestamptz, ADD COLUMN last_used_at timestamptz`
})
