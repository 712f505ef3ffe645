import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"

// Webhook signing secrets are sealed with their owner as additional data (the
// `v2` format, issue 34): a sealed secret copied into another endpoint's row
// no longer opens there. Each node re-seals the v1 values it finds at start;
// the first pass to find none left writes a row here, and from then on every
// node refuses v1, so a v1 value written into a row later never opens.
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE webhook_secret_upgrades (
      version text PRIMARY KEY,
      completed_at timestamptz NOT NULL DEFAULT now()
    )`
})
