import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"

// Approvals (docs/approvals.md): a tool call of an execution or a team run
// that waits for a human's decision. One row per call (run, step or turn,
// call id); its decision is written once, conditional on `pending`, so that
// two deciders never both win. The run waits on a durable deferred and clock
// of its workflow, not on this row: a waiting run costs this row and its
// workflow's stored messages, nothing in memory.
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE approvals (
      id text PRIMARY KEY,
      tenant_id text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
      run_kind text NOT NULL CHECK (run_kind IN ('execution', 'team_run')),
      run_id text NOT NULL,
      scope text NOT NULL,
      call_id text NOT NULL,
      owner_kind text NOT NULL CHECK (owner_kind IN ('orchestration', 'team')),
      owner_id text NOT NULL,
      tool_id text,
      tool text NOT NULL,
      arguments jsonb NOT NULL,
      reason text,
      status text NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'approved', 'rejected', 'expired', 'cancelled')),
      requested_at timestamptz NOT NULL DEFAULT now(),
      expires_at timestamptz NOT NULL,
      on_expiry text NOT NULL CHECK (on_expiry IN ('reject', 'approve')),
      decided_by text,
      decided_at timestamptz,
      note text,
      edited_arguments jsonb,
      -- The token of the durable deferred the run awaits (effect's workflow), to wake it from any node.
      wake_token text NOT NULL,
      UNIQUE (run_id, scope, call_id)
    )`
  // The inbox (pending first, newest first) and a run's approvals.
  // Ids are UUIDv7: newest first is id order.
  yield* sql`CREATE INDEX approvals_tenant_status ON approvals (tenant_id, status, id DESC)`
  yield* sql`CREATE INDEX approvals_run ON approvals (run_id)`
  // A run waiting for a decision is `running` underneath (every sweep and
  // transition keeps reading it so) and shown as `waiting`.
  yield* sql`ALTER TABLE executions ADD COLUMN waiting boolean NOT NULL DEFAULT false`
  yield* sql`ALTER TABLE team_runs ADD COLUMN waiting boolean NOT NULL DEFAULT false`
})
