import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"

// Tools (issue 36): what an agent may call, defined once per tenant. The
// kind-specific settings and the policy are jsonb, checked by the service
// when saved; the name is what the model calls the tool by, so it is unique
// within the tenant. Agents name theirs in `tool_ids`, checked when an agent
// is saved (a tool in use cannot be deleted).
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE tools (
      id text PRIMARY KEY,
      tenant_id text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
      name text NOT NULL,
      description text NOT NULL,
      parameters jsonb NOT NULL,
      settings jsonb NOT NULL CHECK (settings->>'kind' IN ('http', 'knowledge', 'agent')),
      policy jsonb NOT NULL,
      status text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'inactive')),
      created_at timestamptz NOT NULL DEFAULT now(),
      updated_at timestamptz NOT NULL DEFAULT now(),
      CONSTRAINT tools_tenant_name_key UNIQUE (tenant_id, name)
    )`
  yield* sql`CREATE INDEX tools_tenant_idx ON tools (tenant_id, id)`
  yield* sql`ALTER TABLE agents ADD COLUMN tool_ids text[] NOT NULL DEFAULT '{}'`
})
