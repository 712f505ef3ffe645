import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"

// Orchestration definitions. The steps are one jsonb document: they are
// always read and written whole, and validated as a whole before writing.
// Agents named by steps are not foreign keys: they live inside the document,
// and an agent removed later is refused when an execution starts.
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE orchestrations (
      id text PRIMARY KEY,
      tenant_id text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
      name text NOT NULL,
      description text NOT NULL DEFAULT '',
      status text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'inactive')),
      steps jsonb NOT NULL CHECK (jsonb_typeof(steps) = 'array'),
      timeout_ms integer NOT NULL DEFAULT 300000 CHECK (timeout_ms > 0),
      created_at timestamptz NOT NULL DEFAULT now(),
      updated_at timestamptz NOT NULL DEFAULT now()
    )`
  yield* sql`CREATE INDEX orchestrations_tenant_idx ON orchestrations (tenant_id, id)`
  yield* sql`CREATE INDEX orchestrations_tenant_active_idx ON orchestrations (tenant_id, id) WHERE status = 'active'`
})
