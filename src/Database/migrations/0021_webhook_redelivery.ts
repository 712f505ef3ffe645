import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"

// Redelivery of webhook events, bounded (issue 33, N-M2):
// - each redelivery's delivery workflow id (its entity id in effect's cluster
//   tables) is stored when the redelivery is made, so the prune finds an
//   event's stored messages from these rows instead of enumerating every
//   redelivery number; a row goes once its messages are pruned;
// - a leaky bucket of redeliveries per tenant, updated in the statement that
//   admits a redelivery, so the rate holds across nodes;
// - the prune's read of due events walks (updated_at, id), so a failing event
//   can be stepped over.

/** Redeliveries of one event made before this migration whose ids are stored: the most recent ones. */
export const backfilledPerEvent = 10_000

/**
 * The ids of redeliveries made before this migration, of events whose
 * messages are still stored. A workflow's id is effect's (4.x)
 * `makeHashDigest("<tag length>:<tag>:<idempotency key>")`: the first 16
 * bytes of a SHA-256, in hex; the delivery workflow's tag is
 * `WebhookDelivery` and its key `<event id>:<redelivery>`. Idempotent.
 */
export const backfill = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    INSERT INTO webhook_redeliveries (event_id, redelivery, entity_id)
    SELECT e.id, r.n, left(encode(sha256(convert_to('15:WebhookDelivery:' || e.id || ':' || r.n, 'UTF8')), 'hex'), 32)
    FROM webhook_events e
    CROSS JOIN LATERAL generate_series(GREATEST(1, e.redelivery - ${backfilledPerEvent - 1}), e.redelivery) AS r (n)
    WHERE NOT e.messages_pruned AND e.redelivery > 0
    ON CONFLICT DO NOTHING`
})

export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE webhook_redeliveries (
      event_id text NOT NULL REFERENCES webhook_events (id) ON DELETE CASCADE,
      redelivery integer NOT NULL,
      entity_id text NOT NULL,
      PRIMARY KEY (event_id, redelivery)
    )`
  yield* sql`
    CREATE TABLE webhook_redelivery_buckets (
      tenant_id text PRIMARY KEY REFERENCES tenants (id) ON DELETE CASCADE,
      level double precision NOT NULL,
      refused boolean NOT NULL DEFAULT false,
      updated_at timestamptz NOT NULL
    )`
  yield* sql`CREATE INDEX webhook_redelivery_buckets_updated_at_idx ON webhook_redelivery_buckets (updated_at)`
  yield* sql`CREATE INDEX webhook_events_unpruned_key_idx ON webhook_events (updated_at, id)
             WHERE NOT messages_pruned AND status <> 'pending'`
  yield* sql`DROP INDEX webhook_events_unpruned_idx`
  yield* backfill
})
