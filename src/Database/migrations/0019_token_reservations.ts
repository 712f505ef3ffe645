import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"

// Model tokens reserved by calls in flight, beside those they used: a call
// reserves its worst case (prompt plus max_tokens) in the statement that
// checks the budget, and gives back the reservation when it settles its real
// count (Billing/Budget.ts). Per day, like the count: a reservation a killed
// process never settled counts until its day ends, never longer.
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE daily_usage ADD COLUMN reserved bigint NOT NULL DEFAULT 0`
})
