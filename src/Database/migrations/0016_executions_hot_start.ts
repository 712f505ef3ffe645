import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"

// A run's start (pending to running) changes only columns no index names,
// so PostgreSQL can write it as a heap-only (HOT) update: no new entry in any
// of the table's indexes, and less WAL. The sweeps' two partial indexes named
// `status` in their predicates, which ruled that out for every status change;
// they now name `completed_at`, which is set exactly when a run finishes (the
// check below holds the two together). Pages are left a fifth empty so that
// the started row finds room on its own page.
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    UPDATE executions SET completed_at = COALESCE(started_at, created_at)
    WHERE completed_at IS NULL AND status IN ('completed', 'failed', 'cancelled')`
  yield* sql`UPDATE executions SET completed_at = NULL WHERE completed_at IS NOT NULL AND status IN ('pending', 'running')`
  yield* sql`
    ALTER TABLE executions ADD CONSTRAINT executions_completed_when_finished
    CHECK ((completed_at IS NULL) = (status IN ('pending', 'running')))`
  yield* sql`CREATE INDEX executions_open_idx ON executions (created_at) WHERE completed_at IS NULL`
  yield* sql`
    CREATE INDEX executions_finished_unpruned_idx ON executions (completed_at)
    WHERE NOT messages_pruned AND completed_at IS NOT NULL`
  yield* sql`DROP INDEX executions_unfinished_idx`
  yield* sql`DROP INDEX executions_unpruned_idx`
  yield* sql`ALTER TABLE executions SET (fillfactor = 80)`
})
