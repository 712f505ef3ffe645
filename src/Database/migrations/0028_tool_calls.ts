import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"

// The tool loop's records (issue 36). A loop runs for one chat turn, one
// execution step or one team member's turn: `run_id` is the turn's,
// execution's or team run's id and `scope` the step id or turn within it.
// Each of the model's replies in a loop is kept (tool_loop_turns) and each
// call it asked for (tool_calls), so that a step run again after a crash
// replays them: a model turn that was answered is not asked again (its tool
// call ids stay the same), and a call that ended is not made again. A call
// still `running` when its node died is made again, with the same
// Idempotency-Key.
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE tool_loop_turns (
      run_id text NOT NULL,
      scope text NOT NULL,
      turn int NOT NULL,
      tenant_id text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
      reply jsonb NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now(),
      PRIMARY KEY (run_id, scope, turn)
    )`
  yield* sql`
    CREATE TABLE tool_calls (
      run_id text NOT NULL,
      scope text NOT NULL,
      call_id text NOT NULL,
      tenant_id text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
      run_kind text NOT NULL CHECK (run_kind IN ('execution', 'team_run', 'chat')),
      turn int NOT NULL,
      seq int NOT NULL,
      tool_id text,
      tool_name text NOT NULL,
      arguments jsonb NOT NULL,
      status text NOT NULL CHECK (status IN ('running', 'succeeded', 'failed', 'cancelled')),
      result text,
      full_result text,
      error text,
      error_kind text,
      attempts int NOT NULL DEFAULT 1,
      duration_ms int,
      started_at timestamptz NOT NULL DEFAULT now(),
      finished_at timestamptz,
      PRIMARY KEY (run_id, scope, call_id)
    )`
  yield* sql`CREATE INDEX tool_calls_run_idx ON tool_calls (run_id, seq)`
  yield* sql`CREATE INDEX tool_calls_tenant_started_idx ON tool_calls (tenant_id, started_at)`
})
