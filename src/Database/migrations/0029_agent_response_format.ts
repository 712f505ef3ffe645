import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"

// An agent's structured output (docs/tools.md#structured-output): the JSON
// Schema its replies must match, as `{type, name, schema}`; NULL for plain
// text. Checked by the service when saved. An orchestration step's own format
// lives in the step, inside the steps document.
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE agents ADD COLUMN response_format jsonb
             CHECK (response_format IS NULL OR jsonb_typeof(response_format) = 'object')`
})
