import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"

// Daily request counts per tenant, the Stripe link of a tenant, and every
// Stripe event received (for idempotency and audit).
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE daily_usage (
      tenant_id text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
      day date NOT NULL,
      count integer NOT NULL DEFAULT 0,
      PRIMARY KEY (tenant_id, day)
    )`
  yield* sql`
    ALTER TABLE tenants
      ADD COLUMN stripe_customer_id text UNIQUE,
      ADD COLUMN stripe_subscription_id text,
      ADD COLUMN subscription_status text,
      ADD COLUMN subscription_event_at timestamptz`
  yield* sql`
    CREATE TABLE stripe_events (
      id text PRIMARY KEY,
      type text NOT NULL,
      created timestamptz NOT NULL,
      received_at timestamptz NOT NULL DEFAULT now(),
      outcome text NOT NULL CHECK (outcome IN ('processed', 'ignored', 'failed')),
      tenant_id text,
      error text
    )`
})
