import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"

// The read model of executions: what clients poll. The workflow writes every
// status change here as it happens; the definition is copied in at the start,
// so editing an orchestration never changes a run already under way.
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE executions (
      id text PRIMARY KEY,
      tenant_id text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
      orchestration_id text NOT NULL,
      status text NOT NULL CHECK (status IN ('pending', 'running', 'completed', 'failed', 'cancelled')),
      input text NOT NULL,
      variables jsonb NOT NULL,
      steps jsonb NOT NULL,
      timeout_ms integer NOT NULL,
      output text,
      error text,
      tokens_used integer NOT NULL DEFAULT 0,
      idempotency_key text,
      request_hash text,
      created_at timestamptz NOT NULL DEFAULT now(),
      started_at timestamptz,
      completed_at timestamptz
    )`
  yield* sql`CREATE INDEX executions_tenant_idx ON executions (tenant_id, id DESC)`
  yield* sql`CREATE UNIQUE INDEX executions_idempotency_key ON executions (tenant_id, idempotency_key)`
  yield* sql`CREATE INDEX executions_unfinished_idx ON executions (created_at) WHERE status IN ('pending', 'running')`
})
