import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"

// Teams (agents that work a mission together in a room), their runs (the
// read model clients poll, written by the team run workflow), each run's
// transcript (one row per turn, written idempotently by run and index), and
// each run's events (what the events stream replays, then follows).
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE teams (
      id text PRIMARY KEY,
      tenant_id text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
      name text NOT NULL,
      description text NOT NULL DEFAULT '',
      mode text NOT NULL CHECK (mode IN ('chat')),
      status text NOT NULL CHECK (status IN ('active', 'inactive')),
      members jsonb NOT NULL,
      turn_taking text NOT NULL CHECK (turn_taking IN ('round_robin', 'leader')),
      leader_agent_id text,
      max_turns integer NOT NULL,
      token_budget integer NOT NULL,
      timeout_ms integer NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now(),
      updated_at timestamptz NOT NULL DEFAULT now()
    )`
  yield* sql`CREATE INDEX teams_tenant_idx ON teams (tenant_id, id)`
  yield* sql`
    CREATE TABLE team_runs (
      id text PRIMARY KEY,
      tenant_id text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
      team_id text NOT NULL,
      mode text NOT NULL,
      status text NOT NULL CHECK (status IN ('pending', 'running', 'completed', 'failed', 'cancelled')),
      mission text NOT NULL,
      snapshot jsonb NOT NULL,
      timeout_ms integer NOT NULL,
      result text,
      error text,
      stop_reason text CHECK (stop_reason IN ('done', 'max_turns', 'token_budget', 'timeout', 'error', 'cancelled')),
      turns integer NOT NULL DEFAULT 0,
      tokens_used integer NOT NULL DEFAULT 0,
      idempotency_key text,
      request_hash text,
      messages_pruned boolean NOT NULL DEFAULT false,
      created_at timestamptz NOT NULL DEFAULT now(),
      started_at timestamptz,
      completed_at timestamptz
    )`
  yield* sql`CREATE INDEX team_runs_team_idx ON team_runs (tenant_id, team_id, id DESC)`
  yield* sql`CREATE UNIQUE INDEX team_runs_idempotency_key ON team_runs (tenant_id, idempotency_key)`
  yield* sql`CREATE INDEX team_runs_unfinished_idx ON team_runs (created_at) WHERE status IN ('pending', 'running')`
  yield* sql`CREATE INDEX team_runs_unpruned_idx ON team_runs (completed_at) WHERE NOT messages_pruned`
  yield* sql`
    CREATE TABLE team_run_turns (
      run_id text NOT NULL REFERENCES team_runs (id) ON DELETE CASCADE,
      index integer NOT NULL,
      tenant_id text NOT NULL,
      agent_id text NOT NULL,
      role text NOT NULL,
      content text NOT NULL,
      tokens integer NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now(),
      PRIMARY KEY (run_id, index)
    )`
  yield* sql`
    CREATE TABLE team_run_events (
      id bigserial PRIMARY KEY,
      run_id text NOT NULL REFERENCES team_runs (id) ON DELETE CASCADE,
      type text NOT NULL,
      turn integer,
      data jsonb NOT NULL DEFAULT '{}',
      created_at timestamptz NOT NULL DEFAULT now()
    )`
  yield* sql`CREATE INDEX team_run_events_run_idx ON team_run_events (run_id, id)`
})
