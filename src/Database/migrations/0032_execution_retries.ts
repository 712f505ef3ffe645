import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"

// A retry is a new execution of a failed or cancelled one (`retry_of`): it
// runs on the first's steps, input and variables, and the steps that had
// completed are carried over rather than run again. `carried` holds them,
// in step order, as `[{ stepId, output, tokens }]`; NULL on an execution
// that is no retry. Both are set once, when the retry is accepted.
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE executions ADD COLUMN retry_of text, ADD COLUMN carried jsonb`
})
