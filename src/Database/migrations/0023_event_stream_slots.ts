import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"

// Event streams (executions, team runs, streamed chats) are capped per tenant
// across the cluster: every open stream holds a row here, under a lease its
// node renews while the stream is open, so a dead node's streams give their
// places back once their lease runs out. A stream that follows a run names
// it (`run_id`): only then do the run's new events send a notification
// (`run_events`, payload: the run's id), which wakes the streams waiting on
// it on every node. Runs nobody follows notify nobody, so their commits do
// not queue on PostgreSQL's notification lock.
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE event_stream_slots (
      id text PRIMARY KEY,
      tenant_id text NOT NULL,
      node text NOT NULL,
      run_id text,
      lease_until timestamptz NOT NULL
    )`
  yield* sql`CREATE INDEX event_stream_slots_tenant_idx ON event_stream_slots (tenant_id)`
  yield* sql`CREATE INDEX event_stream_slots_run_idx ON event_stream_slots (run_id) WHERE run_id IS NOT NULL`

  // One statement takes a place or refuses. The tenant's takers go one at a
  // time (an advisory lock until the statement's transaction ends), and each
  // statement of a VOLATILE function reads with a fresh snapshot, so the
  // count sees every place committed by the taker before.
  yield* sql`
    CREATE FUNCTION take_event_stream_slot(
      slot_id text, tenant text, node_id text, followed_run text, cap integer, lease interval
    ) RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
    BEGIN
      PERFORM pg_advisory_xact_lock(1702261620, hashtext(tenant));
      DELETE FROM event_stream_slots WHERE tenant_id = tenant AND lease_until < now();
      IF (SELECT count(*) FROM event_stream_slots WHERE tenant_id = tenant) >= cap THEN
        RETURN false;
      END IF;
      INSERT INTO event_stream_slots (id, tenant_id, node, run_id, lease_until)
      VALUES (slot_id, tenant, node_id, followed_run, now() + lease);
      RETURN true;
    END
    $$`

  // Once per inserting statement, not per row: each followed run of the
  // statement's events is notified once.
  yield* sql`
    CREATE FUNCTION notify_execution_events() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      PERFORM pg_notify('run_events', written.execution_id)
      FROM (SELECT DISTINCT execution_id FROM new_events) written
      WHERE EXISTS (SELECT 1 FROM event_stream_slots s WHERE s.run_id = written.execution_id);
      RETURN NULL;
    END
    $$`
  yield* sql`
    CREATE TRIGGER execution_events_notify AFTER INSERT ON execution_events
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION notify_execution_events()`
  yield* sql`
    CREATE FUNCTION notify_team_run_events() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      PERFORM pg_notify('run_events', written.run_id)
      FROM (SELECT DISTINCT run_id FROM new_events) written
      WHERE EXISTS (SELECT 1 FROM event_stream_slots s WHERE s.run_id = written.run_id);
      RETURN NULL;
    END
    $$`
  yield* sql`
    CREATE TRIGGER team_run_events_notify AFTER INSERT ON team_run_events
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION notify_team_run_events()`
})
