import { PgClient } from "@effect/sql-pg"
import * as Arr from "effect/Array"
import * as Cause from "effect/Cause"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import * as SqlSchema from "effect/sql/SqlSchema"
import * as Batcher from "../Database/Batcher.ts"
import * as DurableRunRepo from "../Database/DurableRunRepo.ts"
import { approvalTimeoutBounds } from "../Tools/Tool.ts"
import { tenantPage } from "../Database/Page.ts"
import { isId, TenantId } from "../Domain/Ids.ts"
import { Webhooks } from "../Webhooks/Webhooks.ts"
import { Execution, ExecutionStatus, Step } from "./Api.ts"
import * as ClusterStorage from "../Runtime/ClusterStorage.ts"
import * as Traced from "../Observability/Traced.ts"

// Executions: the read model clients poll, written by the workflow. Every
// statement is scoped by tenant or names one execution by id.

// A run waiting for an approval is `running` underneath, shown as `waiting` (migration 0033).
const executionColumns = `id, orchestration_id,
  CASE WHEN status = 'running' AND waiting THEN 'waiting' ELSE status END AS status,
  output, error, tokens_used, ${DurableRunRepo.timeColumns}`

/** A step a retry carries over from the execution it retries: what it completed with there. */
export const CarriedStep = Schema.Struct({ stepId: Schema.String, output: Schema.String, tokens: Schema.Int })
export type CarriedStep = typeof CarriedStep.Type

const Snapshot = Schema.Struct({
  ...DurableRunRepo.begunFields(ExecutionStatus),
  orchestrationId: Schema.String,
  input: Schema.String,
  variables: Schema.Record(Schema.String, Schema.String),
  steps: Schema.Array(Step),
  /** On a retry, the steps carried over, in step order; null otherwise. */
  carried: Schema.NullOr(Schema.Array(CarriedStep))
})
export type Snapshot = typeof Snapshot.Type

// What GET and the list show beside `executionColumns`: a retry's origin and
// what it carried (its ids and tokens, never its outputs, computed here).
const retryColumns = `retry_of,
  CASE WHEN retry_of IS NULL THEN NULL ELSE COALESCE(
    (SELECT jsonb_agg(c->'stepId') FROM jsonb_array_elements(carried) c), '[]') END AS carried_steps,
  CASE WHEN retry_of IS NULL THEN NULL ELSE COALESCE(
    (SELECT sum((c->>'tokens')::int)::int FROM jsonb_array_elements(carried) c), 0) END AS carried_tokens`

const {
  retryOf: _retryOf,
  carriedSteps: _carriedSteps,
  carriedTokens: _carriedTokens,
  ...plainFields
} = Execution.fields
const ExecutionRow = Schema.Struct({
  ...plainFields,
  retryOf: Schema.NullOr(Schema.String),
  carriedSteps: Schema.NullOr(Schema.Array(Schema.String)),
  carriedTokens: Schema.NullOr(Schema.Int)
})
const toView = ({ carriedSteps, carriedTokens, retryOf, ...row }: typeof ExecutionRow.Type): Execution =>
  retryOf === null ? row : { ...row, retryOf, carriedSteps: carriedSteps ?? [], carriedTokens: carriedTokens ?? 0 }

/** What a retry reads of the execution it retries. */
const RetrySource = Schema.Struct({
  id: Schema.String,
  status: ExecutionStatus,
  orchestrationId: Schema.String,
  input: Schema.String,
  variables: Schema.Record(Schema.String, Schema.String),
  steps: Schema.Array(Step),
  timeoutMs: Schema.Int,
  carried: Schema.NullOr(Schema.Array(CarriedStep)),
  completed: Schema.Array(CarriedStep)
})
export type RetrySource = typeof RetrySource.Type

// The sweeps' partial indexes name `completed_at`, set exactly when an
// execution finishes (0016_executions_hot_start.ts): so do their reads.
const sweptExecutions: DurableRunRepo.Conditions = {
  unfinished: "completed_at IS NULL AND status IN ('pending', 'running')",
  notStarted: "completed_at IS NULL AND status = 'pending'",
  finished: "completed_at IS NOT NULL AND status IN ('completed', 'failed', 'cancelled')",
  finishedAt: "completed_at"
}

// What an execute with an Idempotency-Key claims or finds.
const Claimed = Schema.Struct({ ...DurableRunRepo.claimedFields(ExecutionStatus), orchestrationId: Schema.String })

/** What an execute stored or found; `started` when its workflow's start request was stored with it. */
type Stored = typeof Claimed.Type & { readonly started?: boolean }

interface Fields {
  readonly output?: string
  readonly error?: string
  readonly tokensUsed?: number
  /**
   * The `step.completed` event of the run's last step, logged with the final
   * status and just before its event (a one-step run's step is not an
   * activity: its completion and the run's are one write).
   */
  readonly stepCompleted?: { readonly stepId: string; readonly data: object }
}

/** A retry to store: a new execution and what it carries. */
interface NewRetry extends NewExecution {
  readonly retryOf: string
  readonly carried: ReadonlyArray<CarriedStep>
}

interface NewExecution {
  readonly id: string
  readonly tenantId: TenantId
  readonly orchestrationId: string
  readonly input: string
  readonly variables: Readonly<Record<string, string>>
  readonly steps: ReadonlyArray<Step>
  readonly timeoutMs: number
  readonly idempotencyKey: string | null
  readonly requestHash: string | null
  /** The workflow's start request (ClusterTables.startMessage), stored with the row when given. */
  readonly startRequest?: ClusterStorage.StartMessage | undefined
}

/** All SQL of executions and their events. */
export class ExecutionsRepo extends Context.Service<ExecutionsRepo>()("agent-host/ExecutionsRepo", {
  make: Effect.gen(function* () {
    const sql = yield* PgClient.PgClient
    const webhooks = yield* Webhooks
    const cols = sql.literal(executionColumns)
    const runs = DurableRunRepo.make(sql, {
      table: "executions",
      spanPrefix: "ExecutionsRepo",
      conditions: sweptExecutions
    })
    const keyed = DurableRunRepo.keyed(sql, {
      table: "executions",
      spanPrefix: "ExecutionsRepo",
      returning: "id, orchestration_id, status, request_hash",
      claimed: Claimed
    })

    const executionValues = (input: NewExecution) =>
      sql`(${input.id}, ${input.tenantId}, ${input.orchestrationId}, 'pending', ${input.input},
           ${sql.json(input.variables)}, ${sql.json(input.steps)}, ${input.timeoutMs},
           ${input.idempotencyKey}, ${input.requestHash})`
    const insertInto = sql.literal(
      "INSERT INTO executions (id, tenant_id, orchestration_id, status, input, variables, steps, timeout_ms, idempotency_key, request_hash)"
    )
    const claim = (input: NewExecution) =>
      keyed.claim(input.tenantId, input.idempotencyKey, sql`${insertInto} VALUES ${executionValues(input)}`)
    const decodeClaimed = Schema.decodeUnknownEffect(Schema.Array(Claimed))
    // Executions without a key accepted together are stored by one
    // statement, one commit (Batcher.ts), with the start requests of those
    // whose workflows this node runs: each row and its start are committed
    // together. If the statement fails, each is stored on its own (without
    // its start, which the cluster's client then sends), so only a faulty
    // one fails. Never called with no executions.
    const insertTogether = (
      inputs: ReadonlyArray<NewExecution>
    ): Effect.Effect<Array<Result.Result<Stored, unknown>>> => {
      const starts = inputs.flatMap((input) => (input.startRequest === undefined ? [] : [input.startRequest]))
      if (inputs.length === 1 && starts.length === 0) {
        return Effect.map(Effect.result(claim(inputs[0]!)), (result) => [result])
      }
      const stored = keyed.fresh(sql`${insertInto} VALUES ${sql.csv(inputs.map(executionValues))}`)
      return ClusterStorage.storedWithStarts(sql, stored, starts).pipe(
        Effect.flatMap(decodeClaimed),
        Effect.map((rows) => {
          const byId = new Map(rows.map((row) => [row.id, row]))
          return inputs.map((input) =>
            Result.map(
              Result.fromNullishOr(byId.get(input.id), () => new Error(`Execution ${input.id} was not stored`)),
              (row) => ({ ...row, started: input.startRequest !== undefined })
            )
          )
        }),
        Effect.catch(() => Effect.forEach(inputs, (input) => Effect.result(claim(input))))
      )
    }
    const unkeyed = Batcher.make({ write: insertTogether, maxSize: 200 })

    /**
     * Stores a new execution, or finds the one its idempotency key already
     * names (keys last 24 hours). Committed before the 202 is sent.
     */
    const insert = (input: NewExecution): Effect.Effect<Stored> =>
      Effect.flatMap(
        Batcher.inTransaction(sql),
        (alone): Effect.Effect<Stored, unknown> =>
          input.idempotencyKey === null && !alone
            ? Effect.flatMap(unkeyed.submit(input), Effect.fromResult)
            : claim(input)
      ).pipe(Effect.orDie, Traced.withSpan("ExecutionsRepo.insert"))

    const get = SqlSchema.findOneOption({
      Request: Schema.Struct({ tenantId: Schema.String, id: Schema.String }),
      Result: ExecutionRow,
      execute: ({ tenantId, id }) =>
        sql`SELECT ${cols}, ${sql.literal(retryColumns)} FROM executions WHERE tenant_id = ${tenantId} AND id = ${id}`
    })

    /**
     * Stores a retry, or finds the one its idempotency key already names;
     * `alsoWhenFresh` (copying the carried steps' tool calls) runs in the
     * same transaction when the row is new. Its start is sent by the
     * cluster's client once it is committed.
     */
    const insertRetry = <E, R>(input: NewRetry, alsoWhenFresh: Effect.Effect<unknown, E, R>) =>
      Effect.gen(function* () {
        const stored = yield* keyed.claim(
          input.tenantId,
          input.idempotencyKey,
          sql`INSERT INTO executions (id, tenant_id, orchestration_id, status, input, variables, steps, timeout_ms,
                idempotency_key, request_hash, retry_of, carried)
              VALUES (${input.id}, ${input.tenantId}, ${input.orchestrationId}, 'pending', ${input.input},
                ${sql.json(input.variables)}, ${sql.json(input.steps)}, ${input.timeoutMs},
                ${input.idempotencyKey}, ${input.requestHash}, ${input.retryOf}, ${sql.json(input.carried)})`
        )
        if (stored.fresh) yield* alsoWhenFresh
        return stored as Stored
      }).pipe(sql.withTransaction, Effect.orDie, Traced.withSpan("ExecutionsRepo.insertRetry"))

    /**
     * An execution as a retry of it needs it: its definition, what it carried
     * itself, and the steps it completed (each step's last `step.completed`
     * event: a step run again after a crash may have logged two).
     */
    const retrySource = (tenantId: TenantId, id: string) =>
      isId(id)
        ? sql`SELECT id, status, orchestration_id, input, variables, steps, timeout_ms, carried,
                (SELECT COALESCE(jsonb_agg(jsonb_build_object('stepId', step_id, 'output', output, 'tokens', tokens)), '[]')
                 FROM (SELECT DISTINCT ON (step_id) step_id, data->>'output' AS output,
                         COALESCE(round((data->>'tokens')::numeric)::int, 0) AS tokens
                       FROM execution_events
                       WHERE execution_id = executions.id AND type = 'step.completed' AND step_id IS NOT NULL
                         AND data ? 'output'
                       ORDER BY step_id, id DESC) last) AS completed
              FROM executions WHERE tenant_id = ${tenantId} AND id = ${id}`.pipe(
            Effect.flatMap((rows) => Schema.decodeUnknownEffect(Schema.Array(RetrySource))(rows)),
            Effect.map((rows) => Option.fromNullishOr(rows[0])),
            Effect.orDie,
            Traced.withSpan("ExecutionsRepo.retrySource")
          )
        : Effect.succeed(Option.none<RetrySource>())

    // The events of the runs a `started` CTE moved to running: each run's
    // own, then a one-step run's `step.started` (its step starts with it),
    // or a retry's carried steps' `step.completed` (they are not run again).
    const startEvents = sql`INSERT INTO execution_events (execution_id, type, step_id, data)
      SELECT id, type, step_id, data FROM (
        SELECT id, 'execution.' || status AS type, NULL::text AS step_id,
               jsonb_strip_nulls(jsonb_build_object('status', status, 'output', output, 'error', error, 'tokensUsed', tokens_used)) AS data,
               0 AS position
        FROM started
        UNION ALL
        SELECT id, 'step.started', steps->0->>'id', '{}'::jsonb, 1
        FROM started WHERE jsonb_array_length(steps) = 1 AND COALESCE(jsonb_array_length(carried), 0) = 0
        UNION ALL
        SELECT id, 'step.completed', c.step->>'stepId',
               jsonb_build_object('output', c.step->'output', 'tokens', c.step->'tokens', 'carried', true),
               1 + c.position
        FROM started, jsonb_array_elements(started.carried) WITH ORDINALITY AS c (step, position)
      ) events ORDER BY id, position`

    // Moves a pending run to running (with its event) and returns its
    // definition, fixed when it was accepted, in one statement. On a run
    // already running it changes nothing; a finished run comes back as it is.
    const begin = runs.begin({
      result: Snapshot,
      returning: "id, status, output, error, tokens_used, steps, carried",
      event: startEvents,
      columns: "orchestration_id, input, variables, steps, carried"
    })

    // Runs that start together (the cluster starts the workflows of the
    // messages it reads in bursts) begin in one statement, one commit
    // (Batcher.ts), each as `begin` would; if it fails, each begins on its own.
    // The rows are named by an `IN` list only, never joined to a list of
    // values: joined, a table PostgreSQL has no statistics for yet (a new
    // database, before autovacuum's first ANALYZE) was read whole by a hash
    // join, once per batch, and with statistics the join was a nested loop
    // comparing every row with every value (2,450 comparisons for 50 rows,
    // done twice, about a third of the statement). With the list alone the
    // rows are read by their primary key whatever the statistics say, and the
    // started ones are looked up in a hash (`IN (SELECT ...)`).
    const Begun = Schema.Struct({ id: Schema.String, ...Snapshot.fields })
    const decodeBegun = Schema.decodeUnknownEffect(Schema.Array(Begun))
    const beginTogether = (ids: ReadonlyArray<string>) => {
      const distinct = [...new Set(ids)]
      return distinct.length === 1
        ? Effect.map(Effect.result(begin(distinct[0]!)), (result) => ids.map(() => result))
        : sql`WITH started AS (
                UPDATE executions e SET status = 'running', started_at = COALESCE(e.started_at, now())
                WHERE e.id IN ${sql.in(distinct)} AND e.status = 'pending'
                RETURNING e.id, e.status, e.output, e.error, e.tokens_used, e.steps, e.carried
              ), event AS (${startEvents})
              SELECT e.id, e.tenant_id, e.orchestration_id, CASE WHEN e.id IN (SELECT id FROM started) THEN 'running' ELSE e.status END AS status,
                     e.input, e.variables, e.steps, e.carried, e.timeout_ms, e.held_ms::float8 AS held_ms, e.created_at
              FROM executions e
              WHERE e.id IN ${sql.in(distinct)}`.pipe(
            Effect.flatMap(decodeBegun),
            Effect.map((rows) => {
              const byId = new Map(rows.map(({ id, ...snapshot }) => [id, snapshot]))
              return ids.map((id) => Result.fromNullishOr(byId.get(id), () => new Cause.NoSuchElementError()))
            }),
            Effect.catch(() => Effect.forEach(ids, (id) => Effect.result(begin(id))))
          )
    }
    const begins = Batcher.make({ write: beginTogether, maxSize: 200 })

    // Whether the execution's orchestration has a webhook that takes events:
    // asked inside the statements that finish executions, so that finishing
    // one without a webhook costs no extra round trip.
    const hasWebhook = sql`EXISTS (SELECT 1 FROM webhook_endpoints w
      WHERE w.tenant_id = executions.tenant_id AND w.owner_kind = 'orchestration'
        AND w.owner_id = executions.orchestration_id AND w.enabled AND w.disabled_reason IS NULL)`

    const setFinal = (to: ExecutionStatus, fields: Fields) =>
      sql`status = ${to},
          output = COALESCE(${fields.output ?? null}, output),
          error = COALESCE(${fields.error ?? null}, error),
          tokens_used = COALESCE(${fields.tokensUsed ?? null}, tokens_used),
          started_at = CASE WHEN ${to} = 'running' THEN COALESCE(started_at, now()) ELSE started_at END,
          completed_at = CASE WHEN ${to} IN ('completed', 'failed', 'cancelled') THEN now() ELSE completed_at END`

    const finalEvent = sql`SELECT id, 'execution.' || status AS type, NULL::text AS step_id,
             jsonb_strip_nulls(jsonb_build_object('status', status, 'output', output, 'error', error, 'tokensUsed', tokens_used)) AS data
      FROM updated`
    // The final status's event, after the last step's when it goes with it
    // (ordered, so the step's event has the smaller id).
    const logged = (fields: Fields) =>
      fields.stepCompleted === undefined
        ? sql`INSERT INTO execution_events (execution_id, type, step_id, data) ${finalEvent}`
        : sql`INSERT INTO execution_events (execution_id, type, step_id, data)
            SELECT id, type, step_id, data FROM (
              SELECT id, 'step.completed' AS type, ${fields.stepCompleted.stepId}::text AS step_id,
                     ${sql.json(fields.stepCompleted.data)}::jsonb AS data, 0 AS position
              FROM updated
              UNION ALL
              SELECT *, 1 AS position FROM (${finalEvent}) final
            ) events ORDER BY position`

    const encodeExecution = Schema.encodeSync(Schema.toCodecJson(Execution))
    const decodeFinished = Schema.decodeUnknownEffect(Schema.Struct({ ...ExecutionRow.fields, tenantId: TenantId }))

    /**
     * The final status of an execution whose orchestration has a webhook:
     * the status, its event and the webhook's event (the outbox) in one
     * transaction; the webhook's delivery starts once it is committed.
     */
    const finishWithWebhook = (id: string, to: ExecutionStatus, fields: Fields) =>
      Effect.gen(function* () {
        const rows = yield* sql`WITH updated AS (
              UPDATE executions SET ${setFinal(to, fields)}
              WHERE id = ${id} AND status IN ('pending', 'running')
              RETURNING *
            ), event AS (${logged(fields)})
            SELECT ${cols}, ${sql.literal(retryColumns)}, tenant_id FROM updated`
        if (rows.length === 0) return null
        const { tenantId, ...row } = yield* decodeFinished(rows[0]).pipe(Effect.orDie)
        // As GET shows it: a retry's with `retryOf` and what it carried, any other's without.
        const execution = toView(row)
        return yield* webhooks
          .enqueue({
            tenantId,
            owner: { kind: "orchestration", id: execution.orchestrationId },
            subjectId: id,
            type: `execution.${execution.status}`,
            data: encodeExecution(execution)
          })
          .pipe(Effect.map((eventId) => ({ eventId })))
      }).pipe(
        sql.withTransaction,
        Effect.tap((moved) =>
          moved === null || moved.eventId === null ? Effect.void : Effect.forkDetach(webhooks.deliver(moved.eventId))
        ),
        Effect.map((moved) => moved !== null),
        Traced.withSpan("ExecutionsRepo.finishWithWebhook")
      )

    // One status change of one run, in one statement (see `transition`).
    const transitionAlone = (id: string, to: ExecutionStatus, fields: Fields) => {
      const final = to === "completed" || to === "failed" || to === "cancelled"
      return sql<{ moved: boolean; webhook: boolean }>`WITH target AS (
            SELECT id, ${final ? hasWebhook : sql`false`} AS webhook FROM executions
            WHERE id = ${id} AND status IN ('pending', 'running')
          ), updated AS (
            UPDATE executions SET ${setFinal(to, fields)}
            WHERE id IN (SELECT id FROM target WHERE NOT webhook) AND status IN ('pending', 'running')
            RETURNING id, status, output, error, tokens_used
          ), event AS (${logged(fields)})
          SELECT EXISTS (SELECT 1 FROM updated) AS moved, COALESCE((SELECT webhook FROM target), false) AS webhook`.pipe(
        Effect.map((rows) => ({ moved: rows[0]?.moved === true, webhook: rows[0]?.webhook === true }))
      )
    }

    // Runs that finish together (a burst of short runs) take their final
    // statuses, with their events, in one statement, one commit (Batcher.ts),
    // each as `transitionAlone` would; if it fails, each is written on its
    // own. A run named again in the same batch (a cancel as it completes) is
    // written on its own after it.
    interface Final {
      readonly id: string
      readonly to: "completed" | "failed" | "cancelled"
      readonly fields: Fields
    }
    const finishAlone = (final: Final) => Effect.result(transitionAlone(final.id, final.to, final.fields))
    const finishTogether = (finals: ReadonlyArray<Final>) => {
      const seen = new Set<string>()
      const firsts: Array<Final> = []
      const again: Array<number> = []
      finals.forEach((final, i) => {
        if (seen.has(final.id)) again.push(i)
        else {
          seen.add(final.id)
          firsts.push(final)
        }
      })
      if (again.length === 0) return finishDistinct(finals)
      return Effect.gen(function* () {
        const results = new Map(Arr.zip(firsts, yield* finishDistinct(firsts)))
        const answers = finals.map((final) => results.get(final))
        for (const i of again) answers[i] = yield* finishAlone(finals[i]!)
        return answers as ReadonlyArray<NonNullable<(typeof answers)[number]>>
      })
    }
    const finishDistinct = (finals: ReadonlyArray<Final>) => {
      const ids = finals.map((final) => final.id)
      return finals.length === 1
        ? Effect.forEach(finals, finishAlone)
        : sql<{
            id: string
            moved: boolean
            webhook: boolean
          }>`WITH input (id, status, output, error, tokens_used, step_id, step_data) AS (
              VALUES ${sql.csv(
                finals.map(
                  ({ fields, id, to }) =>
                    sql`(${id}::text, ${to}::text, ${fields.output ?? null}::text, ${fields.error ?? null}::text, ${
                      fields.tokensUsed ?? null
                    }::int, ${fields.stepCompleted?.stepId ?? null}::text, ${
                      fields.stepCompleted === undefined ? null : sql.json(fields.stepCompleted.data)
                    }::jsonb)`
                )
              )}
            ), target AS (
              SELECT executions.id, ${hasWebhook} AS webhook FROM executions
              WHERE executions.id IN ${sql.in(ids)} AND executions.status IN ('pending', 'running')
            ), updated AS (
              UPDATE executions e SET status = i.status,
                output = COALESCE(i.output, e.output),
                error = COALESCE(i.error, e.error),
                tokens_used = COALESCE(i.tokens_used, e.tokens_used),
                completed_at = now()
              FROM input i
              WHERE e.id = i.id AND e.id IN (SELECT id FROM target WHERE NOT webhook)
                AND e.status IN ('pending', 'running')
              RETURNING e.id, e.status, e.output, e.error, e.tokens_used, i.step_id, i.step_data
            ), event AS (
              INSERT INTO execution_events (execution_id, type, step_id, data)
              SELECT id, type, step_id, data FROM (
                SELECT id, 'step.completed' AS type, step_id, step_data AS data, 0 AS position
                FROM updated WHERE step_id IS NOT NULL
                UNION ALL
                SELECT id, 'execution.' || status, NULL::text,
                       jsonb_strip_nulls(jsonb_build_object('status', status, 'output', output, 'error', error, 'tokensUsed', tokens_used)),
                       1
                FROM updated
              ) events ORDER BY id, position
            )
            SELECT input.id, input.id IN (SELECT id FROM updated) AS moved,
                   COALESCE(target.webhook, false) AS webhook
            FROM input LEFT JOIN target ON target.id = input.id`.pipe(
            Effect.map((rows) => {
              const byId = new Map(
                rows.map((row) => [row.id, { moved: row.moved === true, webhook: row.webhook === true }])
              )
              return finals.map((final) => Result.succeed(byId.get(final.id) ?? { moved: false, webhook: false }))
            }),
            Effect.catch(() => Effect.forEach(finals, finishAlone))
          )
    }
    const finishes = Batcher.make({ write: finishTogether, maxSize: 200 })

    /**
     * Moves a status forward (final statuses never change again) and logs the
     * change as an event, in one statement (batched with the final statuses
     * of other runs finishing at the same time). When the orchestration has a
     * webhook, a final status goes with its webhook event instead
     * (finishWithWebhook): that statement changes nothing and says so.
     */
    const transition = (id: string, to: ExecutionStatus, fields: Fields = {}) =>
      Effect.flatMap(Batcher.inTransaction(sql), (alone) =>
        alone || (to !== "completed" && to !== "failed" && to !== "cancelled")
          ? transitionAlone(id, to, fields)
          : Effect.flatMap(finishes.submit({ id, to, fields }), Effect.fromResult)
      ).pipe(
        Effect.flatMap(({ moved, webhook }) => (webhook ? finishWithWebhook(id, to, fields) : Effect.succeed(moved))),
        Traced.withSpan("ExecutionsRepo.transition")
      )

    /** Logs a step's progress. */
    const stepEvent = (
      id: string,
      type:
        | "step.started"
        | "step.completed"
        | "tool.called"
        | "tool.succeeded"
        | "tool.failed"
        | "approval.requested"
        | "approval.decided"
        | "approval.expired",
      stepId: string,
      data: object = {}
    ) =>
      sql`INSERT INTO execution_events (execution_id, type, step_id, data)
          VALUES (${id}, ${type}, ${stepId}, ${sql.json(data)})`.pipe(
        Effect.asVoid,
        Traced.withSpan("ExecutionsRepo.stepEvent")
      )

    /**
     * Fails every unfinished execution past its timeout (plus `graceSeconds`,
     * so a live run records its own timeout first), whatever its workflow's
     * state, with its event; returns their ids. Those whose orchestration has
     * a webhook are failed one by one, each with its webhook event.
     */
    const failTimedOut = (graceSeconds: number) =>
      sql<{ id: string; reaped: boolean; timeoutMs: number }>`WITH due AS (
            SELECT id, timeout_ms, ${hasWebhook} AS webhook FROM executions
            WHERE completed_at IS NULL AND status IN ('pending', 'running')
              AND ${DurableRunRepo.pastDeadline(sql, graceSeconds, approvalTimeoutBounds.maximum)}
          ), updated AS (
            UPDATE executions SET status = 'failed',
              error = 'The execution timed out after ' || timeout_ms || ' ms',
              completed_at = now()
            WHERE id IN (SELECT id FROM due WHERE NOT webhook) AND status IN ('pending', 'running')
            RETURNING id, status, output, error, tokens_used
          ), event AS (${logged({})})
          SELECT id, true AS reaped, 0 AS timeout_ms FROM updated
          UNION ALL SELECT id, false AS reaped, timeout_ms FROM due WHERE webhook`.pipe(
        Effect.flatMap((rows) =>
          Effect.forEach(rows, (row) =>
            row.reaped
              ? Effect.succeed(row.id)
              : Effect.map(
                  finishWithWebhook(row.id, "failed", { error: `The execution timed out after ${row.timeoutMs} ms` }),
                  (moved) => (moved ? row.id : null)
                )
          )
        ),
        Effect.map((ids) => ids.filter((id): id is string => id !== null)),
        Effect.orDie,
        Traced.withSpan("ExecutionsRepo.failTimedOut")
      )

    /** Events after `afterId`, oldest first. */
    const events = DurableRunRepo.events<{ stepId: string | null }>(sql, "execution_events", "execution_id", "step_id")

    /** When an execution's own timeout runs out, for bounding its event streams. */
    const deadline = (tenantId: TenantId, id: string) =>
      isId(id) ? runs.deadline(tenantId, [sql`id = ${id}`]) : Effect.succeed(Option.none<number>())

    return {
      unpruned: runs.unpruned,
      markPruned: runs.markPruned,
      notStarted: runs.notStarted,
      insert,
      insertRetry,
      retrySource,
      claimedBy: keyed.claimedBy,
      get: (tenantId: TenantId, id: string) =>
        isId(id)
          ? get({ tenantId, id }).pipe(Effect.map(Option.map(toView)), Effect.orDie)
          : Effect.succeed(Option.none()),
      // The workflow's statements keep their errors typed: it retries what is
      // transient and fails the execution with what is not (ExecutionWorkflow.ts).
      begin: (id: string) =>
        Effect.flatMap(Batcher.inTransaction(sql), (alone) =>
          alone ? begin(id) : Effect.flatMap(begins.submit(id), Effect.fromResult)
        ).pipe(Traced.withSpan("ExecutionsRepo.begin")),
      page: (
        tenantId: TenantId,
        options: {
          readonly orchestrationId: string | null
          readonly status: string | null
          readonly before: string | null
          readonly limit: number
        }
      ) =>
        tenantPage({
          table: "executions",
          columns: `${executionColumns}, ${retryColumns}`,
          row: ExecutionRow,
          tenantId,
          filters: [
            ...(options.orchestrationId === null ? [] : [sql`orchestration_id = ${options.orchestrationId}`]),
            ...(options.status === null
              ? []
              : options.status === "waiting"
                ? [sql`status = 'running' AND waiting`]
                : options.status === "running"
                  ? [sql`status = 'running' AND NOT waiting`]
                  : [sql`status = ${options.status}`])
          ],
          order: "desc",
          after: options.before,
          limit: options.limit
        }).pipe(
          Effect.map((page) => ({ ...page, data: page.data.map(toView) })),
          Effect.orDie,
          Traced.withSpan("ExecutionsRepo.page")
        ),
      transition,
      stepEvent,
      failTimedOut,
      events,
      deadline,
      unfinished: runs.unfinished
    } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make)
}
