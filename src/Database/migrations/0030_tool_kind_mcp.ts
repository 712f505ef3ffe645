import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"

// Tools of kind `mcp` (docs/mcp.md): an MCP server's tools,
// listed when saved and kept in the settings. Only the kinds' check changes.
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE tools DROP CONSTRAINT tools_settings_check`
  yield* sql`ALTER TABLE tools ADD CONSTRAINT tools_settings_check
             CHECK (settings->>'kind' IN ('http', 'knowledge', 'agent', 'mcp'))`
})
