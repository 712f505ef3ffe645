import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"

// Conversation memory: one row per conversation, one per turn (the user's
// message and the reply, with the tokens and the model that answered).
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE conversations (
      tenant_id text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
      agent_id text NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
      id text NOT NULL,
      turn_count integer NOT NULL DEFAULT 1,
      created_at timestamptz NOT NULL DEFAULT now(),
      updated_at timestamptz NOT NULL DEFAULT now(),
      PRIMARY KEY (tenant_id, agent_id, id)
    )`
  yield* sql`CREATE INDEX conversations_agent_idx ON conversations (agent_id, updated_at DESC, id)`
  yield* sql`
    CREATE TABLE conversation_turns (
      tenant_id text NOT NULL,
      agent_id text NOT NULL,
      conversation_id text NOT NULL,
      seq integer NOT NULL,
      message text NOT NULL,
      reply text NOT NULL,
      model text NOT NULL,
      input_tokens integer NOT NULL,
      output_tokens integer NOT NULL,
      created_at timestamptz NOT NULL,
      completed_at timestamptz NOT NULL,
      PRIMARY KEY (tenant_id, agent_id, conversation_id, seq),
      FOREIGN KEY (tenant_id, agent_id, conversation_id)
        REFERENCES conversations (tenant_id, agent_id, id) ON DELETE CASCADE
    )`
})
