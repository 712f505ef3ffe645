import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"

// Running executions and team runs are capped per tenant by plan, across the
// cluster (Platform/RunSlots.ts). A run holds a row here from the moment its
// workflow asks for a slot until it ends: waiting (`granted_at` null), in the
// order of the runs' creation, then holding its slot. A holder's node renews
// its lease while the run goes on, so the slots of a dead node's runs come
// back once their lease runs out; a slot whose run has reached a final status
// (cancelled, failed by the sweep) is free at once. A slot granted to a
// waiting run is announced on `run_signals` (`granted:<run id>`), which wakes
// its workflow on whichever node it waits.
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE run_slots (
      run_id text PRIMARY KEY,
      kind text NOT NULL CHECK (kind IN ('execution', 'team_run')),
      tenant_id text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
      queued_at timestamptz NOT NULL,
      granted_at timestamptz,
      lease_until timestamptz NOT NULL
    )`
  yield* sql`CREATE INDEX run_slots_waiting_idx ON run_slots (tenant_id, queued_at, run_id) WHERE granted_at IS NULL`
  yield* sql`CREATE INDEX run_slots_held_idx ON run_slots (tenant_id) WHERE granted_at IS NOT NULL`

  // Whether a slot's run still needs it: its row is unfinished. A slot taken
  // for a run about to be stored (a request that would not wait) has no row
  // yet: it counts for a minute.
  yield* sql`
    CREATE FUNCTION run_slot_live(slot_kind text, slot_run text, slot_queued timestamptz) RETURNS boolean
    LANGUAGE sql STABLE AS $$
      SELECT COALESCE(
        CASE slot_kind
          WHEN 'execution' THEN (SELECT completed_at IS NULL FROM executions WHERE id = slot_run)
          WHEN 'team_run' THEN (SELECT status IN ('pending', 'running') FROM team_runs WHERE id = slot_run)
        END,
        slot_queued > now() - interval '1 minute')
    $$`

  // The tenant's cap by its plan: caps[1] free, caps[2] pro, caps[3] business; 0 or less is no cap.
  yield* sql`
    CREATE FUNCTION run_slot_cap(tenant text, caps integer[]) RETURNS integer LANGUAGE sql STABLE AS $$
      SELECT COALESCE(
        (SELECT CASE plan WHEN 'free' THEN caps[1] WHEN 'pro' THEN caps[2] ELSE caps[3] END FROM tenants WHERE id = tenant),
        caps[1])
    $$`

  // Grants free slots to the tenant's oldest waiting runs, and announces each
  // (but `quiet`, the caller's own run, which hears it in the answer). The
  // caller holds the tenant's lock. Slots whose holders stopped renewing are
  // taken back; when the tenant is at its cap with runs waiting, so are the
  // slots of runs already final. Waiting runs already final leave the queue.
  yield* sql`
    CREATE FUNCTION run_slots_grant(tenant text, cap integer, lease interval, quiet text) RETURNS void
    LANGUAGE plpgsql VOLATILE AS $$
    DECLARE
      held integer;
      candidate record;
    BEGIN
      IF cap <= 0 THEN cap := 2147483647; END IF;
      DELETE FROM run_slots WHERE tenant_id = tenant AND granted_at IS NOT NULL AND lease_until < now();
      SELECT count(*) INTO held FROM run_slots WHERE tenant_id = tenant AND granted_at IS NOT NULL;
      IF held >= cap AND EXISTS (SELECT 1 FROM run_slots WHERE tenant_id = tenant AND granted_at IS NULL) THEN
        DELETE FROM run_slots s WHERE s.tenant_id = tenant AND s.granted_at IS NOT NULL
          AND NOT run_slot_live(s.kind, s.run_id, s.queued_at);
        SELECT count(*) INTO held FROM run_slots WHERE tenant_id = tenant AND granted_at IS NOT NULL;
      END IF;
      FOR candidate IN
        SELECT run_id, kind, queued_at FROM run_slots
        WHERE tenant_id = tenant AND granted_at IS NULL ORDER BY queued_at, run_id
      LOOP
        EXIT WHEN held >= cap;
        IF run_slot_live(candidate.kind, candidate.run_id, candidate.queued_at) THEN
          UPDATE run_slots SET granted_at = now(), lease_until = now() + lease WHERE run_id = candidate.run_id;
          IF candidate.run_id IS DISTINCT FROM quiet THEN
            PERFORM pg_notify('run_signals', 'granted:' || candidate.run_id);
          END IF;
          held := held + 1;
        ELSE
          DELETE FROM run_slots WHERE run_id = candidate.run_id;
        END IF;
      END LOOP;
    END
    $$`

  // A run asks for its slot: 'granted' (it holds one, now or already),
  // 'waiting' (it is queued), 'refused:<cap>' (it would have to wait and
  // `wait` is false: not queued), 'finished' (its run is final or gone: nothing held)
  // or 'unlimited' (its plan has no cap: nothing held). Without `tenant` the
  // run's own row gives the tenant and the queue's order (its creation).
  // Asked again, it keeps its place or its slot and renews its lease.
  yield* sql`
    CREATE FUNCTION run_slot_acquire(
      slot_kind text, slot_run text, tenant text, queued timestamptz, caps integer[], lease interval, wait boolean
    ) RETURNS text LANGUAGE plpgsql VOLATILE AS $$
    DECLARE
      live boolean := true;
      cap integer;
      held timestamptz;
    BEGIN
      IF tenant IS NULL THEN
        IF slot_kind = 'execution' THEN
          SELECT tenant_id, created_at, completed_at IS NULL INTO tenant, queued, live FROM executions WHERE id = slot_run;
        ELSE
          SELECT tenant_id, created_at, status IN ('pending', 'running') INTO tenant, queued, live FROM team_runs WHERE id = slot_run;
        END IF;
        IF tenant IS NULL OR NOT live THEN
          PERFORM run_slot_release(slot_run, caps, lease);
          RETURN 'finished';
        END IF;
      END IF;
      cap := run_slot_cap(tenant, caps);
      IF cap <= 0 THEN RETURN 'unlimited'; END IF;
      PERFORM pg_advisory_xact_lock(1920295276, hashtext(tenant));
      INSERT INTO run_slots (run_id, kind, tenant_id, queued_at, lease_until)
      VALUES (slot_run, slot_kind, tenant, queued, now() + lease)
      ON CONFLICT (run_id) DO UPDATE SET lease_until = CASE
        WHEN run_slots.granted_at IS NULL THEN run_slots.lease_until ELSE excluded.lease_until END
      RETURNING granted_at INTO held;
      IF held IS NOT NULL THEN RETURN 'granted'; END IF;
      PERFORM run_slots_grant(tenant, cap, lease, slot_run);
      IF EXISTS (SELECT 1 FROM run_slots WHERE run_id = slot_run AND granted_at IS NOT NULL) THEN RETURN 'granted'; END IF;
      IF NOT wait THEN
        DELETE FROM run_slots WHERE run_id = slot_run;
        RETURN 'refused:' || cap;
      END IF;
      RETURN 'waiting';
    END
    $$`

  // A run gives its slot (or its place in the queue) back; the next waiting runs of its tenant are granted.
  yield* sql`
    CREATE FUNCTION run_slot_release(slot_run text, caps integer[], lease interval) RETURNS void
    LANGUAGE plpgsql VOLATILE AS $$
    DECLARE
      tenant text;
    BEGIN
      SELECT tenant_id INTO tenant FROM run_slots WHERE run_id = slot_run;
      IF tenant IS NULL THEN RETURN; END IF;
      PERFORM pg_advisory_xact_lock(1920295276, hashtext(tenant));
      DELETE FROM run_slots WHERE run_id = slot_run;
      PERFORM run_slots_grant(tenant, run_slot_cap(tenant, caps), lease, NULL);
    END
    $$`
})
