import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"

// Once an execution has finished, the cluster's stored messages of its
// workflow are no longer needed (the read model keeps its result); they are
// deleted a while later. This marks the executions whose messages are gone,
// and indexes those still waiting.
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE executions ADD COLUMN messages_pruned boolean NOT NULL DEFAULT false`
  yield* sql`
    CREATE INDEX executions_unpruned_idx ON executions (completed_at)
    WHERE NOT messages_pruned AND status IN ('completed', 'failed', 'cancelled')`
})
