import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as SqlClient from "effect/sql/SqlClient"
import { newId, type TenantId } from "../Domain/Ids.ts"
import * as Traced from "../Observability/Traced.ts"

/** What a schedule's writes set (all but its ids, status and record of runs). */
export interface ScheduleFields {
  readonly name: string
  readonly orchestrationId: string | null
  readonly input: string | null
  readonly variables: Readonly<Record<string, string>> | null
  readonly teamId: string | null
  readonly mission: string | null
  readonly cron: string | null
  readonly intervalSeconds: number | null
  readonly timezone: string
  readonly missedPolicy: "skip" | "run_once"
  readonly anchorAt: Date
  readonly nextRunAt: Date
}

/** A schedule's row: its fields, ids, status and record of runs. */
export interface ScheduleRow extends ScheduleFields {
  readonly id: string
  readonly tenantId: TenantId
  readonly status: "active" | "paused"
  readonly lastRunAt: Date | null
  readonly lastRunId: string | null
  readonly createdAt: Date
  readonly updatedAt: Date
}

export type SlotStatus = "claimed" | "started" | "refused" | "failed" | "skipped"

/** A slot's row. */
export interface SlotRow {
  readonly id: string
  readonly scheduleId: string
  readonly tenantId: TenantId
  readonly slotAt: Date
  readonly status: SlotStatus
  readonly missedSlots: number
  readonly counted: boolean
  readonly runKind: "execution" | "team_run" | null
  readonly runId: string | null
  readonly reason: string | null
  readonly createdAt: Date
}

/** A slot to record, as the ticker planned it. */
export interface PlannedSlot {
  readonly slotAt: Date
  readonly status: "claimed" | "skipped"
  readonly missedSlots: number
  readonly reason: string | null
}

/** What the ticker decided for one due schedule. */
export interface Plan {
  readonly slots: ReadonlyArray<PlannedSlot>
  readonly nextRunAt: Date
}

const columns = `id, tenant_id, name, orchestration_id, input, variables, team_id, mission, cron, interval_seconds,
  timezone, status, missed_policy, anchor_at, next_run_at, last_run_at, last_run_id, created_at, updated_at`

const slotColumns = `id, schedule_id, tenant_id, slot_at, status, missed_slots, counted, run_kind, run_id, reason, created_at`

/** All SQL of schedules: every route's statement is scoped by tenant; the ticker's span tenants. */
export class SchedulesRepo extends Context.Service<SchedulesRepo>()("agent-host/SchedulesRepo", {
  make: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const cols = sql.literal(columns)
    const slotCols = sql.literal(slotColumns)
    const json = (value: unknown) => (value === null ? null : JSON.stringify(value))

    /** Stores a schedule unless the tenant has `max` already (none then); creates of one tenant are counted one after the other. */
    const insert = (tenantId: TenantId, status: "active" | "paused", fields: ScheduleFields, max: number) =>
      Effect.gen(function* () {
        yield* sql`SELECT 1 FROM tenants WHERE id = ${tenantId} FOR UPDATE`
        const [counted] = yield* sql<{
          n: number
        }>`SELECT count(*)::int AS n FROM schedules WHERE tenant_id = ${tenantId}`
        if (counted!.n >= max) return Option.none<ScheduleRow>()
        const rows = yield* sql<ScheduleRow>`
          INSERT INTO schedules (id, tenant_id, name, orchestration_id, input, variables, team_id, mission, cron,
            interval_seconds, timezone, status, missed_policy, anchor_at, next_run_at)
          VALUES (${newId()}, ${tenantId}, ${fields.name}, ${fields.orchestrationId}, ${fields.input},
            ${json(fields.variables)}::jsonb, ${fields.teamId}, ${fields.mission}, ${fields.cron},
            ${fields.intervalSeconds}, ${fields.timezone}, ${status}, ${fields.missedPolicy}, ${fields.anchorAt},
            ${fields.nextRunAt})
          RETURNING ${cols}`
        return Option.some(rows[0]!)
      }).pipe(sql.withTransaction, Effect.orDie, Traced.withSpan("SchedulesRepo.insert"))

    const get = (tenantId: TenantId, id: string) =>
      sql<ScheduleRow>`SELECT ${cols} FROM schedules WHERE tenant_id = ${tenantId} AND id = ${id}`.pipe(
        Effect.map((rows) => Option.fromNullishOr(rows[0])),
        Effect.orDie,
        Traced.withSpan("SchedulesRepo.get")
      )

    /** Newest first, after the cursor's id. */
    const page = (tenantId: TenantId, before: string | null, limit: number) =>
      Effect.gen(function* () {
        const rows = yield* sql<ScheduleRow>`
          SELECT ${cols} FROM schedules
          WHERE tenant_id = ${tenantId} ${before === null ? sql`` : sql`AND id < ${before}`}
          ORDER BY id DESC LIMIT ${limit + 1}`
        const [total] = yield* sql<{
          n: number
        }>`SELECT count(*)::int AS n FROM schedules WHERE tenant_id = ${tenantId}`
        return { rows: rows.slice(0, limit), more: rows.length > limit, total: total!.n }
      }).pipe(Effect.orDie, Traced.withSpan("SchedulesRepo.page"))

    const update = (tenantId: TenantId, id: string, fields: ScheduleFields) =>
      sql<ScheduleRow>`
        UPDATE schedules SET name = ${fields.name}, orchestration_id = ${fields.orchestrationId},
          input = ${fields.input}, variables = ${json(fields.variables)}::jsonb, team_id = ${fields.teamId},
          mission = ${fields.mission}, cron = ${fields.cron}, interval_seconds = ${fields.intervalSeconds},
          timezone = ${fields.timezone}, missed_policy = ${fields.missedPolicy}, anchor_at = ${fields.anchorAt},
          next_run_at = ${fields.nextRunAt}, updated_at = now()
        WHERE tenant_id = ${tenantId} AND id = ${id}
        RETURNING ${cols}`.pipe(
        Effect.map((rows) => Option.fromNullishOr(rows[0])),
        Effect.orDie,
        Traced.withSpan("SchedulesRepo.update")
      )

    /** Pauses, or resumes from a new anchor and next slot; a schedule already so is left as it is. */
    const setStatus = (
      tenantId: TenantId,
      id: string,
      status: "active" | "paused",
      resumed: { readonly anchorAt: Date; readonly nextRunAt: Date } | undefined
    ) =>
      sql<ScheduleRow>`
        UPDATE schedules SET status = ${status}, updated_at = now()
          ${resumed === undefined ? sql`` : sql`, anchor_at = ${resumed.anchorAt}, next_run_at = ${resumed.nextRunAt}`}
        WHERE tenant_id = ${tenantId} AND id = ${id} AND status <> ${status}
        RETURNING ${cols}`.pipe(
        Effect.map((rows) => Option.fromNullishOr(rows[0])),
        Effect.orDie,
        Traced.withSpan("SchedulesRepo.setStatus")
      )

    const remove = (tenantId: TenantId, id: string) =>
      sql<{ id: string }>`DELETE FROM schedules WHERE tenant_id = ${tenantId} AND id = ${id} RETURNING id`.pipe(
        Effect.map((rows) => rows.length > 0),
        Effect.orDie,
        Traced.withSpan("SchedulesRepo.remove")
      )

    /** A schedule's slots, newest first, after the cursor's id. */
    const slots = (tenantId: TenantId, scheduleId: string, before: string | null, limit: number) =>
      Effect.gen(function* () {
        const rows = yield* sql<SlotRow>`
          SELECT ${slotCols} FROM schedule_runs
          WHERE tenant_id = ${tenantId} AND schedule_id = ${scheduleId}
            ${before === null ? sql`` : sql`AND id < ${before}`}
          ORDER BY id DESC LIMIT ${limit + 1}`
        const [total] = yield* sql<{ n: number }>`
          SELECT count(*)::int AS n FROM schedule_runs WHERE tenant_id = ${tenantId} AND schedule_id = ${scheduleId}`
        return { rows: rows.slice(0, limit), more: rows.length > limit, total: total!.n }
      }).pipe(Effect.orDie, Traced.withSpan("SchedulesRepo.slots"))

    /**
     * The cluster's clock: every node's tick stamps it. A tick that finds the
     * last stamp older than `outageSeconds` starts a new era: slots before
     * `resumedAt` fell while no node ticked. Answers the database's time.
     */
    const tick = (outageSeconds: number) =>
      sql<{ now: Date; resumedAt: Date }>`
        UPDATE schedule_clock SET
          resumed_at = CASE
            WHEN ticked_at IS NULL OR ticked_at < now() - make_interval(secs => ${outageSeconds}) THEN now()
            ELSE resumed_at END,
          ticked_at = now()
        WHERE id
        RETURNING now() AS now, resumed_at`.pipe(
        Effect.map((rows) => rows[0]!),
        Effect.orDie,
        Traced.withSpan("SchedulesRepo.tick")
      )

    /**
     * Takes up to `limit` active schedules whose next slot has come (those
     * another node holds are skipped), records the slots `plan` decides for
     * each (a slot already recorded is not recorded again) and moves each to
     * its next slot, in one transaction. Answers the slots to start.
     */
    const claimDue = (limit: number, plan: (schedule: ScheduleRow, now: Date) => Plan) =>
      Effect.gen(function* () {
        const due = yield* sql<ScheduleRow & { now: Date }>`
          SELECT ${cols}, now() AS now FROM schedules
          WHERE status = 'active' AND next_run_at <= now()
          ORDER BY next_run_at LIMIT ${limit}
          FOR UPDATE SKIP LOCKED`
        const claimed: Array<{ readonly slot: SlotRow; readonly schedule: ScheduleRow }> = []
        for (const schedule of due) {
          const decided = plan(schedule, schedule.now)
          let lastAt: Date | null = null
          for (const slot of decided.slots) {
            const rows = yield* sql<SlotRow>`
              INSERT INTO schedule_runs (id, schedule_id, tenant_id, slot_at, status, missed_slots, reason)
              VALUES (${newId()}, ${schedule.id}, ${schedule.tenantId}, ${slot.slotAt}, ${slot.status},
                ${slot.missedSlots}, ${slot.reason})
              ON CONFLICT (schedule_id, slot_at) DO NOTHING
              RETURNING ${slotCols}`
            lastAt = slot.slotAt
            if (rows[0] !== undefined && rows[0].status === "claimed") claimed.push({ slot: rows[0], schedule })
          }
          yield* sql`
            UPDATE schedules SET next_run_at = ${decided.nextRunAt},
              last_run_at = CASE WHEN ${lastAt}::timestamptz IS NULL THEN last_run_at
                ELSE greatest(last_run_at, ${lastAt}::timestamptz) END
            WHERE id = ${schedule.id}`
        }
        return claimed
      }).pipe(sql.withTransaction, Effect.orDie, Traced.withSpan("SchedulesRepo.claimDue"))

    /**
     * Slots claimed over `seconds` ago whose runs are not known to have
     * started (their node died in between): taken again, their claim time
     * renewed so that no other node takes them meanwhile.
     */
    const reclaimStale = (seconds: number, limit: number) =>
      sql<SlotRow & { schedule: ScheduleRow }>`
        WITH taken AS (
          UPDATE schedule_runs SET claimed_at = now()
          WHERE id IN (
            SELECT id FROM schedule_runs
            WHERE status = 'claimed' AND claimed_at < now() - make_interval(secs => ${seconds})
            ORDER BY claimed_at LIMIT ${limit}
            FOR UPDATE SKIP LOCKED)
          RETURNING ${slotCols}
        )
        SELECT taken.*, to_jsonb(s.*) AS schedule FROM taken JOIN schedules s ON s.id = taken.schedule_id`.pipe(
        Effect.map((rows) =>
          rows.map(({ schedule, ...slot }) => ({
            slot: slot as SlotRow,
            schedule: fromJsonRow(schedule as unknown as Record<string, unknown>)
          }))
        ),
        Effect.orDie,
        Traced.withSpan("SchedulesRepo.reclaimStale")
      )

    /** The slot's count against the plan is made: a retry of its start does not count it again. */
    const markCounted = (id: string) =>
      sql`UPDATE schedule_runs SET counted = true WHERE id = ${id}`.pipe(
        Effect.asVoid,
        Effect.orDie,
        Traced.withSpan("SchedulesRepo.markCounted")
      )

    /** What became of a claimed slot; a started run is the schedule's last. */
    const finish = (
      slot: SlotRow,
      outcome: {
        readonly status: "started" | "refused" | "failed"
        readonly runKind?: "execution" | "team_run"
        readonly runId?: string
        readonly reason?: string
      }
    ) =>
      Effect.gen(function* () {
        yield* sql`
          UPDATE schedule_runs SET status = ${outcome.status}, run_kind = ${outcome.runKind ?? null},
            run_id = ${outcome.runId ?? null}, reason = ${outcome.reason ?? null}
          WHERE id = ${slot.id} AND status = 'claimed'`
        if (outcome.runId !== undefined) {
          // The latest slot's run wins, whichever finished its start last.
          yield* sql`
            UPDATE schedules SET last_run_id = ${outcome.runId}
            WHERE id = ${slot.scheduleId} AND NOT EXISTS (
              SELECT 1 FROM schedule_runs r
              WHERE r.schedule_id = ${slot.scheduleId} AND r.status = 'started' AND r.slot_at > ${slot.slotAt})`
        }
      }).pipe(sql.withTransaction, Effect.orDie, Traced.withSpan("SchedulesRepo.finish"))

    return { insert, get, page, update, setStatus, remove, slots, tick, claimDue, reclaimStale, markCounted, finish }
  })
}) {
  static readonly layer = Layer.effect(this, this.make)
}

// A schedule read through to_jsonb: snake_case keys, timestamps as text.
const fromJsonRow = (row: Record<string, unknown>): ScheduleRow => {
  const date = (value: unknown) => (value === null || value === undefined ? null : new Date(value as string))
  return {
    id: row.id as string,
    tenantId: row.tenant_id as TenantId,
    name: row.name as string,
    orchestrationId: (row.orchestration_id as string | null) ?? null,
    input: (row.input as string | null) ?? null,
    variables: (row.variables as Record<string, string> | null) ?? null,
    teamId: (row.team_id as string | null) ?? null,
    mission: (row.mission as string | null) ?? null,
    cron: (row.cron as string | null) ?? null,
    intervalSeconds: (row.interval_seconds as number | null) ?? null,
    timezone: row.timezone as string,
    status: row.status as ScheduleRow["status"],
    missedPolicy: row.missed_policy as ScheduleRow["missedPolicy"],
    anchorAt: date(row.anchor_at)!,
    nextRunAt: date(row.next_run_at)!,
    lastRunAt: date(row.last_run_at),
    lastRunId: (row.last_run_id as string | null) ?? null,
    createdAt: date(row.created_at)!,
    updatedAt: date(row.updated_at)!
  }
}
