import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import * as SqlClient from "effect/sql/SqlClient"
import type * as Statement from "effect/sql/Statement"
import type { TenantId } from "../Domain/Ids.ts"
import * as Traced from "../Observability/Traced.ts"

// A start that takes an Idempotency-Key (execute, a team run) stores its row
// with the key, unique per tenant; a key names its row for 24 hours. This is
// the one way such a row is claimed and looked up. `table` and `returning`
// are the caller's constants, never input.

interface Keyed<S> {
  readonly table: string
  /** The columns the claim answers with (without `fresh`), as `claimed` decodes them. */
  readonly returning: string
  readonly claimed: S
  readonly tenantId: TenantId
}

/**
 * Runs `insert` (an `INSERT INTO table (...) VALUES (...)` without its
 * conflict clause), or finds the row its idempotency key already names:
 * `fresh` tells which. With a key, the claim runs in a transaction of its
 * own (an expired key is released first); without one it is a single
 * statement and needs none.
 */
export const claimKeyed = Traced.fn("Database.claimKeyed")(function* <S extends Schema.Codec<any, any, never, never>>(
  options: Keyed<S> & { readonly idempotencyKey: string | null; readonly insert: Statement.Fragment }
) {
  const sql = yield* SqlClient.SqlClient
  const table = sql(options.table)
  const columns = sql.literal(options.returning)
  const claim = sql`
    WITH inserted AS (
      ${options.insert}
      ON CONFLICT (tenant_id, idempotency_key) DO NOTHING
      RETURNING ${columns}, true AS fresh
    )
    SELECT * FROM inserted
    UNION ALL
    SELECT ${columns}, false AS fresh FROM ${table}
    WHERE tenant_id = ${options.tenantId} AND idempotency_key = ${options.idempotencyKey}
      AND NOT EXISTS (SELECT 1 FROM inserted)`
  if (options.idempotencyKey === null) return yield* Schema.decodeUnknownEffect(options.claimed)((yield* claim)[0])
  return yield* Effect.gen(function* () {
    // An expired key may be used again.
    yield* sql`UPDATE ${table} SET idempotency_key = NULL
               WHERE tenant_id = ${options.tenantId} AND idempotency_key = ${options.idempotencyKey}
                 AND created_at < now() - interval '24 hours'`
    // When another request with the same key commits while this statement
    // waits on it, the insert does nothing and the statement's snapshot cannot
    // see that row yet; the next statement can.
    let rows = yield* claim
    for (let attempt = 0; rows.length === 0 && attempt < 3; attempt++) rows = yield* claim
    return yield* Schema.decodeUnknownEffect(options.claimed)(rows[0])
  }).pipe(sql.withTransaction)
})

/** The row an idempotency key (still valid) names, if any, as `claimKeyed` would find it. */
export const keyedBy = Traced.fn("Database.keyedBy")(function* <S extends Schema.Codec<any, any, never, never>>(
  options: Keyed<S> & { readonly idempotencyKey: string }
) {
  const sql = yield* SqlClient.SqlClient
  const rows = yield* sql`
    SELECT ${sql.literal(options.returning)}, false AS fresh FROM ${sql(options.table)}
    WHERE tenant_id = ${options.tenantId} AND idempotency_key = ${options.idempotencyKey}
      AND created_at >= now() - interval '24 hours'`
  return yield* Schema.decodeUnknownEffect(Schema.OptionFromNullOr(options.claimed))(rows[0] ?? null)
})
