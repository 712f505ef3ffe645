import { PgClient } from "@effect/sql-pg"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Traced from "../Observability/Traced.ts"

/** What kind of run holds a slot: its row is in `executions` or in `team_runs`. */
export type RunKind = "execution" | "team_run"

/**
 * Where a run stands with its tenant's cap (migration 0022): `granted` holds a
 * slot; `waiting` is queued; `refused` would have had to wait and was not
 * queued; `finished` (its run is final or gone) and `unlimited` (no cap on
 * its plan) hold nothing.
 */
export type SlotStanding = "granted" | "waiting" | "refused" | "finished" | "unlimited"

/** A waiting run: how many of its tenant's runs wait before it, and the cap it waits under. */
export interface Waiting {
  readonly runId: string
  readonly ahead: number
  readonly limit: number
}

/** Where cluster-wide signals about runs are sent: `granted:<run id>`, `cancelled:<run id>`. */
export const runSignalsChannel = "run_signals"

/** All SQL of run slots and run signals; the statements' logic is in migration 0022's functions. */
export class RunSlotsRepo extends Context.Service<RunSlotsRepo>()("agent-host/RunSlotsRepo", {
  make: Effect.gen(function* () {
    const sql = yield* PgClient.PgClient

    // The caps of the plans, free, pro and business, as migration 0022's functions take them.
    const capsArray = (caps: readonly [number, number, number]) => sql`ARRAY[${caps[0]}, ${caps[1]}, ${caps[2]}]::int[]`
    const seconds = (lease: number) => sql`make_interval(secs => ${lease})`

    const acquire = (options: {
      readonly kind: RunKind
      readonly runId: string
      /** For a run about to be stored: its tenant; otherwise its row says. */
      readonly tenantId?: string | undefined
      readonly caps: readonly [number, number, number]
      readonly leaseSeconds: number
      readonly wait: boolean
    }) =>
      sql<{ standing: string }>`SELECT run_slot_acquire(
          ${options.kind}, ${options.runId}, ${options.tenantId ?? null}::text,
          ${options.tenantId === undefined ? sql`NULL` : sql`now()`}::timestamptz,
          ${capsArray(options.caps)}, ${seconds(options.leaseSeconds)}, ${options.wait}) AS standing`.pipe(
        Effect.map((rows): { readonly standing: SlotStanding; readonly limit: number | null } => {
          // 'refused:<cap>' says the cap the run was refused under.
          const [standing, limit] = rows[0]!.standing.split(":")
          return { standing: standing as SlotStanding, limit: limit === undefined ? null : Number(limit) }
        }),
        Traced.withSpan("RunSlotsRepo.acquire")
      )

    const release = (runId: string, caps: readonly [number, number, number], leaseSeconds: number) =>
      sql`SELECT run_slot_release(${runId}, ${capsArray(caps)}, ${seconds(leaseSeconds)})`.pipe(
        Effect.asVoid,
        Traced.withSpan("RunSlotsRepo.release")
      )

    /** Renews the leases of slots held by runs going on at this node. */
    const renew = (runIds: ReadonlyArray<string>, leaseSeconds: number) =>
      sql`UPDATE run_slots SET lease_until = now() + ${seconds(leaseSeconds)}
          WHERE run_id = ANY(${runIds}::text[]) AND granted_at IS NOT NULL`.pipe(
        Effect.asVoid,
        Traced.withSpan("RunSlotsRepo.renew")
      )

    /** Which of these runs of the tenant wait for a slot, and where they stand in the queue. */
    const waiting = (tenantId: string, runIds: ReadonlyArray<string>, caps: readonly [number, number, number]) =>
      sql<Waiting>`SELECT w.run_id,
            (SELECT count(*) FROM run_slots o WHERE o.tenant_id = w.tenant_id AND o.granted_at IS NULL
               AND (o.queued_at, o.run_id) < (w.queued_at, w.run_id))::int AS ahead,
            run_slot_cap(w.tenant_id, ${capsArray(caps)}) AS "limit"
          FROM run_slots w
          WHERE w.tenant_id = ${tenantId} AND w.run_id = ANY(${runIds}::text[]) AND w.granted_at IS NULL`.pipe(
        Traced.withSpan("RunSlotsRepo.waiting")
      )

    /** Those of `runIds` that hold or wait for a slot: their workflows are running. */
    const queuedAmong = (runIds: ReadonlyArray<string>) =>
      sql<{ runId: string }>`SELECT run_id FROM run_slots WHERE run_id = ANY(${runIds}::text[])`.pipe(
        Effect.map((rows) => new Set(rows.map((row) => row.runId))),
        Traced.withSpan("RunSlotsRepo.queuedAmong")
      )

    /** Tells every node that a run was cancelled. */
    const signalCancelled = (runId: string) =>
      sql`SELECT pg_notify(${runSignalsChannel}, ${`cancelled:${runId}`})`.pipe(
        Effect.asVoid,
        Traced.withSpan("RunSlotsRepo.signalCancelled")
      )

    return { acquire, release, renew, waiting, queuedAmong, signalCancelled } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make)
}
