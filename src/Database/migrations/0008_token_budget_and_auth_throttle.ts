import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"

// Model tokens per tenant and UTC day, beside the request count, for the
// plans' daily token budgets; and the leaky buckets that throttle logins and
// registrations per client address and per e-mail, shared by every node.
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE daily_usage ADD COLUMN tokens bigint NOT NULL DEFAULT 0`
  yield* sql`
    CREATE TABLE auth_throttle (
      key text PRIMARY KEY,
      level double precision NOT NULL,
      refused boolean NOT NULL DEFAULT false,
      updated_at timestamptz NOT NULL
    )`
  yield* sql`CREATE INDEX auth_throttle_updated_at_idx ON auth_throttle (updated_at)`
})
