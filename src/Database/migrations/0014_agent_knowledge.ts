import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"

// The knowledge bases an agent is grounded on: its chats, the orchestration
// steps it runs and its team turns retrieve from them. A base deleted later
// simply stops grounding: retrieval skips ids that no longer name a base.
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE agents ADD COLUMN knowledge_ids text[] NOT NULL DEFAULT '{}'`
})
