import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"

// Approvals, continued (docs/approvals.md). `woken_at`: when the run waiting
// on a decided approval was woken (its deferred completed); a decision left
// without it (its node died between the two) is woken again by the wake
// sweep. `kind`: a tool call's approval, or a team's final result waiting for
// a person before its room's webhook is sent (the team's `resultApproval`).
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE approvals ADD COLUMN woken_at timestamptz`
  yield* sql`ALTER TABLE approvals ADD COLUMN kind text NOT NULL DEFAULT 'tool_call'
    CHECK (kind IN ('tool_call', 'result'))`
  // What the wake sweep reads: decisions whose run was not seen woken.
  yield* sql`CREATE INDEX approvals_unwoken ON approvals (decided_at)
    WHERE woken_at IS NULL AND status IN ('approved', 'rejected')`
  // Teams saved before it read as not requiring it.
  yield* sql`ALTER TABLE teams ADD COLUMN result_approval jsonb NOT NULL
    DEFAULT '{"required": false, "timeoutMs": 86400000, "onExpiry": "reject"}'::jsonb`
})
