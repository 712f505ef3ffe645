import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"

// What happened in an execution, in order: what GET /api/v1/executions/{id}/events
// replays to a client that connects late, then follows.
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE execution_events (
      id bigserial PRIMARY KEY,
      execution_id text NOT NULL REFERENCES executions (id) ON DELETE CASCADE,
      type text NOT NULL,
      step_id text,
      data jsonb NOT NULL DEFAULT '{}',
      created_at timestamptz NOT NULL DEFAULT now()
    )`
  yield* sql`CREATE INDEX execution_events_execution_idx ON execution_events (execution_id, id)`
})
