import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"

// Tenants, their users, sessions, API keys and agents. Secrets (passwords,
// session tokens, API keys) are stored only as hashes.
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE tenants (
      id text PRIMARY KEY,
      name text NOT NULL,
      plan text NOT NULL DEFAULT 'free' CHECK (plan IN ('free', 'pro', 'business')),
      created_at timestamptz NOT NULL DEFAULT now(),
      updated_at timestamptz NOT NULL DEFAULT now()
    )`
  yield* sql`
    CREATE TABLE users (
      id text PRIMARY KEY,
      tenant_id text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
      email text NOT NULL,
      name text,
      password_hash text NOT NULL,
      role text NOT NULL DEFAULT 'owner' CHECK (role IN ('owner', 'member')),
      created_at timestamptz NOT NULL DEFAULT now()
    )`
  yield* sql`CREATE UNIQUE INDEX users_email_key ON users (lower(email))`
  yield* sql`CREATE INDEX users_tenant_idx ON users (tenant_id)`
  yield* sql`
    CREATE TABLE sessions (
      id text PRIMARY KEY,
      tenant_id text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
      user_id text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
      token_hash text NOT NULL UNIQUE,
      created_at timestamptz NOT NULL DEFAULT now(),
      expires_at timestamptz NOT NULL,
      revoked_at timestamptz
    )`
  yield* sql`CREATE INDEX sessions_user_idx ON sessions (user_id)`
  yield* sql`
    CREATE TABLE api_keys (
      id text PRIMARY KEY,
      tenant_id text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
      name text NOT NULL,
      prefix text NOT NULL,
      key_hash text NOT NULL UNIQUE,
      scopes text[],
      created_at timestamptz NOT NULL DEFAULT now(),
      revoked_at timestamptz
    )`
  yield* sql`CREATE INDEX api_keys_tenant_idx ON api_keys (tenant_id, id) WHERE revoked_at IS NULL`
  yield* sql`
    CREATE TABLE agents (
      id text PRIMARY KEY,
      tenant_id text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
      name text NOT NULL,
      description text NOT NULL DEFAULT '',
      model text NOT NULL,
      instructions text NOT NULL DEFAULT '',
      status text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'inactive')),
      memory_enabled boolean NOT NULL DEFAULT true,
      created_at timestamptz NOT NULL DEFAULT now(),
      updated_at timestamptz NOT NULL DEFAULT now()
    )`
  yield* sql`CREATE INDEX agents_tenant_idx ON agents (tenant_id, id)`
  yield* sql`CREATE INDEX agents_tenant_active_idx ON agents (tenant_id, id) WHERE status = 'active'`
})
