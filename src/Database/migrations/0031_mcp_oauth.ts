import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"

// OAuth 2.1 for `mcp` tools (docs/mcp.md#oauth): a tool's connection to its
// server's authorization server (the client registered there, then its
// tokens), and the authorizations started and not yet come back. Every secret (client secret, tokens, PKCE verifier) is sealed by
// the secrets vault; a state is stored only as its hash. Both go with the tool.
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE mcp_oauth_connections (
      tool_id text PRIMARY KEY REFERENCES tools (id) ON DELETE CASCADE,
      tenant_id text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
      resource text NOT NULL,
      issuer text NOT NULL,
      token_endpoint text NOT NULL,
      client_id text NOT NULL,
      client_secret text,
      redirect_uri text NOT NULL,
      access_token text,
      refresh_token text,
      key_version integer NOT NULL,
      expires_at timestamptz,
      scope text,
      connected_at timestamptz,
      updated_at timestamptz NOT NULL DEFAULT now()
    )`
  yield* sql`CREATE INDEX mcp_oauth_connections_tenant_idx ON mcp_oauth_connections (tenant_id, tool_id)`
  yield* sql`
    CREATE TABLE mcp_oauth_pending (
      state_hash text PRIMARY KEY,
      tenant_id text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
      tool_id text NOT NULL REFERENCES tools (id) ON DELETE CASCADE,
      resource text NOT NULL,
      issuer text NOT NULL,
      token_endpoint text NOT NULL,
      client_id text NOT NULL,
      client_secret text,
      verifier text NOT NULL,
      key_version integer NOT NULL,
      redirect_uri text NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now()
    )`
  yield* sql`CREATE INDEX mcp_oauth_pending_created_idx ON mcp_oauth_pending (created_at)`
  yield* sql`CREATE INDEX mcp_oauth_pending_tool_idx ON mcp_oauth_pending (tool_id)`
})
