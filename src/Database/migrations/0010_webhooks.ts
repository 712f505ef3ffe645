import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"

// Outbound webhooks: one endpoint per owner (a team or an orchestration), the
// outbox of events (written in the same transaction as the final state they
// report, delivered by a cluster workflow) and the log of every attempt.
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE webhook_endpoints (
      id text PRIMARY KEY,
      tenant_id text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
      owner_kind text NOT NULL CHECK (owner_kind IN ('team', 'orchestration')),
      owner_id text NOT NULL,
      url text NOT NULL,
      enabled boolean NOT NULL DEFAULT true,
      secret text NOT NULL,
      previous_secret text,
      previous_expires_at timestamptz,
      failing_since timestamptz,
      disabled_reason text,
      disabled_at timestamptz,
      created_at timestamptz NOT NULL DEFAULT now(),
      updated_at timestamptz NOT NULL DEFAULT now(),
      UNIQUE (tenant_id, owner_kind, owner_id)
    )`
  yield* sql`
    CREATE TABLE webhook_events (
      id text PRIMARY KEY,
      tenant_id text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
      endpoint_id text NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
      subject_id text NOT NULL,
      type text NOT NULL,
      body text NOT NULL,
      status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'failed')),
      redelivery integer NOT NULL DEFAULT 0,
      started boolean NOT NULL DEFAULT false,
      outcome text,
      messages_pruned boolean NOT NULL DEFAULT false,
      created_at timestamptz NOT NULL DEFAULT now(),
      updated_at timestamptz NOT NULL DEFAULT now()
    )`
  // The sweep reads the pending events whose delivery has not been handed to the cluster.
  yield* sql`CREATE INDEX webhook_events_unstarted_idx ON webhook_events (created_at) WHERE status = 'pending' AND NOT started`
  yield* sql`CREATE INDEX webhook_events_endpoint_idx ON webhook_events (endpoint_id)`
  // Finished deliveries whose cluster messages are still stored, for the prune.
  yield* sql`CREATE INDEX webhook_events_unpruned_idx ON webhook_events (updated_at)
             WHERE NOT messages_pruned AND status <> 'pending'`
  yield* sql`
    CREATE TABLE webhook_attempts (
      id bigserial PRIMARY KEY,
      event_id text NOT NULL REFERENCES webhook_events (id) ON DELETE CASCADE,
      endpoint_id text NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
      redelivery integer NOT NULL,
      attempt integer NOT NULL,
      at timestamptz NOT NULL DEFAULT now(),
      url text NOT NULL,
      http_status integer,
      error text,
      duration_ms integer NOT NULL,
      response text
    )`
  // The delivery log of one owner, newest first.
  yield* sql`CREATE INDEX webhook_attempts_endpoint_idx ON webhook_attempts (endpoint_id, id DESC)`
  yield* sql`CREATE INDEX webhook_attempts_event_idx ON webhook_attempts (event_id)`
})
