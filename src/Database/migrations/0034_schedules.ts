import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"

// Schedules (docs/schedules.md): a tenant's recurring runs of an orchestration
// or a team. Each slot a schedule reaches is claimed by inserting its row in
// `schedule_runs`, unique per (schedule, slot): whichever node inserts it starts
// its run, so no slot runs twice across the cluster. `schedule_clock` is the
// one row every node touches on each tick; a gap in it is an outage of the
// whole cluster, whose slots the schedule's missed policy decides.
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE schedules (
      id text PRIMARY KEY,
      tenant_id text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
      name text NOT NULL,
      orchestration_id text REFERENCES orchestrations (id) ON DELETE CASCADE,
      input text,
      variables jsonb,
      team_id text REFERENCES teams (id) ON DELETE CASCADE,
      mission text,
      cron text,
      interval_seconds integer CHECK (interval_seconds >= 1),
      timezone text NOT NULL,
      status text NOT NULL CHECK (status IN ('active', 'paused')),
      missed_policy text NOT NULL CHECK (missed_policy IN ('skip', 'run_once')),
      anchor_at timestamptz NOT NULL,
      next_run_at timestamptz NOT NULL,
      last_run_at timestamptz,
      last_run_id text,
      created_at timestamptz NOT NULL DEFAULT now(),
      updated_at timestamptz NOT NULL DEFAULT now(),
      CHECK ((orchestration_id IS NULL) <> (team_id IS NULL)),
      CHECK ((cron IS NULL) <> (interval_seconds IS NULL))
    )`
  yield* sql`CREATE INDEX schedules_tenant_idx ON schedules (tenant_id, id)`
  yield* sql`CREATE INDEX schedules_due_idx ON schedules (next_run_at) WHERE status = 'active'`
  yield* sql`
    CREATE TABLE schedule_runs (
      id text PRIMARY KEY,
      schedule_id text NOT NULL REFERENCES schedules (id) ON DELETE CASCADE,
      tenant_id text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
      slot_at timestamptz NOT NULL,
      status text NOT NULL CHECK (status IN ('claimed', 'started', 'refused', 'failed', 'skipped')),
      missed_slots integer NOT NULL DEFAULT 0,
      counted boolean NOT NULL DEFAULT false,
      run_kind text CHECK (run_kind IN ('execution', 'team_run')),
      run_id text,
      reason text,
      claimed_at timestamptz NOT NULL DEFAULT now(),
      created_at timestamptz NOT NULL DEFAULT now(),
      UNIQUE (schedule_id, slot_at)
    )`
  yield* sql`CREATE INDEX schedule_runs_schedule_idx ON schedule_runs (schedule_id, id)`
  yield* sql`CREATE INDEX schedule_runs_claimed_idx ON schedule_runs (claimed_at) WHERE status = 'claimed'`
  yield* sql`
    CREATE TABLE schedule_clock (
      id boolean PRIMARY KEY DEFAULT true CHECK (id),
      ticked_at timestamptz,
      resumed_at timestamptz
    )`
  yield* sql`INSERT INTO schedule_clock (id) VALUES (true)`
})
