import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"

// Approvals, continued (docs/approvals.md).
// `tenant_settings.tool_policy`: the tenant's defaults for the approval fields
// of a tool's policy, applied to each tool that leaves them out.
// `waiting_since` and `held_ms` of executions and team runs: the time a run
// spends waiting for a person does not count against its timeout. While it
// waits (`waiting`), its timeout sweep leaves it alone; when it stops
// waiting, the time it waited is added to `held_ms`, and its deadline is
// `created_at + timeout_ms + held_ms`.
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE tenant_settings (
      tenant_id text PRIMARY KEY REFERENCES tenants (id) ON DELETE CASCADE,
      tool_policy jsonb NOT NULL DEFAULT '{}'::jsonb,
      updated_at timestamptz NOT NULL DEFAULT now()
    )`
  for (const table of ["executions", "team_runs"]) {
    yield* sql`ALTER TABLE ${sql(table)} ADD COLUMN waiting_since timestamptz`
    yield* sql`ALTER TABLE ${sql(table)} ADD COLUMN held_ms bigint NOT NULL DEFAULT 0`
  }
  // Runs waiting when this is applied wait from now on.
  yield* sql`UPDATE executions SET waiting_since = now() WHERE waiting AND status = 'running'`
  yield* sql`UPDATE team_runs SET waiting_since = now() WHERE waiting AND status = 'running'`
})
