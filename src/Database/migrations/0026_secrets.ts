import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"

// The tenants' secrets vault (docs/secrets.md). A value is stored sealed
// (AES-256-GCM, bound to its tenant and id) under the key of `key_version`;
// only its last four characters are kept in the clear, to tell secrets apart.
// The index on `key_version` serves the pass that re-seals values of older
// keys at start.
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE tenant_secrets (
      id text PRIMARY KEY,
      tenant_id text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
      name text NOT NULL,
      sealed_value text NOT NULL,
      key_version integer NOT NULL,
      last_four text NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now(),
      rotated_at timestamptz,
      UNIQUE (tenant_id, name)
    )`
  yield* sql`CREATE INDEX tenant_secrets_tenant_idx ON tenant_secrets (tenant_id, id)`
  yield* sql`CREATE INDEX tenant_secrets_key_version_idx ON tenant_secrets (key_version)`
})
