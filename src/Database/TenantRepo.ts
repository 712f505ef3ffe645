import { PgClient } from "@effect/sql-pg"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import type * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import * as Str from "effect/String"
import type * as Model from "effect/schema/Model"
import * as SqlClient from "effect/sql/SqlClient"
import type * as Statement from "effect/sql/Statement"
import { decodeCursor, type Page } from "../Domain/Cursor.ts"
import { isId, type TenantId } from "../Domain/Ids.ts"
import { defaultPageSize, type PageRequest } from "../Domain/Page.ts"
import type { BadRequest } from "../Domain/Problems.ts"
import * as Traced from "../Observability/Traced.ts"
import * as NotifiedCache from "./NotifiedCache.ts"
import { tenantPage } from "./Page.ts"
import type { ListenerSql } from "./Sql.ts"

/**
 * What an entity's table holds beyond its model: the table and column names
 * are the caller's constants (SQL text), never input.
 */
export interface Options<Filter extends string> {
  readonly table: string
  /** Names the spans: `AgentsRepo` gives `AgentsRepo.insert`... */
  readonly spanPrefix: string
  /** SQL read for a field that is not a column of its own name (a count, a cast), by field. */
  readonly expressions?: { readonly [field: string]: string }
  /** Fields stored as jsonb. */
  readonly jsonb?: ReadonlyArray<string>
  /** Conditions a list may be narrowed by, by name: `{ active: "status = 'active'" }`. */
  readonly filters?: { readonly [name in Filter]: string }
  /**
   * Every write notifies `channel` with `tenantId/id` in its own statement (so
   * at its commit), and each node keeps what it read until it hears of a
   * change: the rows by id, and with `pages` the tenant's list pages.
   */
  readonly changes?: {
    readonly channel: string
    /** What is kept, for the log line when the listener is lost: "Agent". */
    readonly what: string
    readonly timeToLive: Duration.Duration
    readonly capacity: number
    readonly pages?: { readonly capacity: number; readonly perTenant: number }
  }
}

/** The reads and writes of an entity every feature has: each scoped by tenant. */
export interface TenantRepo<S extends Model.Any, Filter extends string> {
  /** The columns read, as SQL text, for the feature's own statements over the table. */
  readonly columns: string
  readonly insert: (tenantId: TenantId, input: S["insert"]["~type.make.in"]) => Effect.Effect<S["Type"]>
  /** An id that cannot exist (not one of ours) is not looked up: it is simply not found. */
  readonly findById: (tenantId: TenantId, id: string) => Effect.Effect<Option.Option<S["Type"]>>
  /** Changes the fields `changes` carries, and `updated_at` when the entity has one. */
  readonly update: (
    tenantId: TenantId,
    id: string,
    changes: S["update"]["Type"]
  ) => Effect.Effect<Option.Option<S["Type"]>>
  readonly remove: (tenantId: TenantId, id: string) => Effect.Effect<boolean>
  /** A page of the tenant's rows in id (so creation) order, narrowed by `filter`; a bad cursor is a 400. */
  readonly list: (tenantId: TenantId, page: PageRequest, filter?: Filter) => Effect.Effect<Page<S["Type"]>, BadRequest>
}

/**
 * The tenant-scoped repository of an entity declared with `Model.Class`:
 * its rows are read with the model (the `select` variant), inserted from
 * its `insert` variant (defaults such as the id made there) and changed from
 * its `update` variant. Every statement has `tenant_id = $tenant`; a list is
 * a keyset page (Database/Page.ts). Its statements never fail but for a
 * defect: what a client can get wrong is checked before them.
 */
export const make = <
  S extends Model.Any & Schema.Codec<{ readonly id: string }, any, never, never>,
  Filter extends string = never
>(
  model: S,
  options: Options<Filter>
): Effect.Effect<TenantRepo<S, Filter>, never, PgClient.PgClient | ListenerSql | Scope.Scope> =>
  Effect.gen(function* () {
    const sql = yield* PgClient.PgClient
    const table = sql.literal(options.table)
    const fields = Object.keys(model.fields)
    const column = (field: string) => Str.camelToSnake(field)
    const columnsText = fields
      .map((field) =>
        options.expressions?.[field] === undefined ? column(field) : `${options.expressions[field]} AS ${column(field)}`
      )
      .join(", ")
    const columns = sql.literal(columnsText)
    // What a statement that read the columns once (a CTE) hands on.
    const named = sql.literal(fields.map(column).join(", "))
    const jsonb = new Set(options.jsonb ?? [])
    const value = (field: string, input: unknown) => (jsonb.has(field) ? sql.json(input) : sql`${input}`)
    const touches = fields.includes("updatedAt")
    const span = (name: string) => Traced.withSpan(`${options.spanPrefix}.${name}`)
    const decodeRow = Schema.decodeUnknownEffect(model)
    const decodeFirst = (rows: ReadonlyArray<unknown>) =>
      rows.length === 0 ? Effect.succeedNone : Effect.asSome(decodeRow(rows[0]))
    const channel = options.changes?.channel

    /** `statement` returning the columns, notifying the change of each row when there are listeners. */
    const notifying = (cte: string, statement: Statement.Fragment) =>
      channel === undefined
        ? sql`${statement} RETURNING ${columns}`
        : sql`WITH ${sql.literal(cte)} AS (${statement} RETURNING ${columns}, tenant_id)
              SELECT ${named}, pg_notify(${channel}, tenant_id || '/' || id) FROM ${sql.literal(cte)}`

    // Column names come from the model only, never from the keys of what a caller hands in.
    const writable = (variant: Schema.Top, values: Record<string, unknown>) =>
      Object.keys((variant as unknown as Schema.Struct<Schema.Struct.Fields>).fields).filter(
        (field) => values[field] !== undefined
      )

    const insertRow = (tenantId: TenantId, row: Record<string, unknown>) => {
      const written = writable(model.insert, row)
      return notifying(
        "inserted",
        sql`INSERT INTO ${table} (tenant_id, ${sql.literal(written.map(column).join(", "))})
            VALUES (${sql.csv([sql`${tenantId}`, ...written.map((field) => value(field, row[field]))])})`
      )
    }

    const findRow = ({ id, tenantId }: { readonly tenantId: string; readonly id: string }) =>
      sql`SELECT ${columns} FROM ${table} WHERE tenant_id = ${tenantId} AND id = ${id}`.pipe(
        Effect.flatMap(decodeFirst)
      )

    const updateRow = (tenantId: TenantId, id: string, changes: Record<string, unknown>) => {
      const sets = writable(model.update, changes).map(
        (field) => sql`${sql.literal(column(field))} = ${value(field, changes[field])}`
      )
      if (touches) sets.push(sql`updated_at = now()`)
      return notifying(
        "changed",
        sql`UPDATE ${table} SET ${sql.csv(sets.length > 0 ? sets : [sql`id = id`])}
            WHERE tenant_id = ${tenantId} AND id = ${id}`
      ).pipe(Effect.flatMap(decodeFirst))
    }

    const removeRow = (tenantId: TenantId, id: string) =>
      (channel === undefined
        ? sql`DELETE FROM ${table} WHERE tenant_id = ${tenantId} AND id = ${id} RETURNING id`
        : sql`WITH removed AS (DELETE FROM ${table} WHERE tenant_id = ${tenantId} AND id = ${id} RETURNING tenant_id, id)
              SELECT id, pg_notify(${channel}, tenant_id || '/' || id) FROM removed`
      ).pipe(Effect.map((rows) => rows.length > 0))

    const readPage = (tenantId: TenantId, filter: Filter | undefined, after: string | null, limit: number) =>
      // Typed by hand: the requirements of a generic `Traced.fn` are left unresolved.
      (
        tenantPage({
          table: options.table,
          columns: columnsText,
          row: model,
          tenantId,
          filters: filter === undefined || options.filters === undefined ? [] : [sql.literal(options.filters[filter])],
          after,
          limit
        }) as Effect.Effect<Page<S["Type"]>, unknown, SqlClient.SqlClient>
      ).pipe(Effect.provideService(SqlClient.SqlClient, sql), Effect.orDie)

    // The tenant's pages as last read; any change of one of its rows drops
    // them all, on every node (the cache below tells of changes).
    const pages =
      options.changes?.pages === undefined
        ? undefined
        : NotifiedCache.makeTenantReads<Page<S["Type"]>>({
            timeToLive: options.changes.timeToLive,
            capacity: options.changes.pages.capacity,
            perTenant: options.changes.pages.perTenant
          })

    // The rows as last read, by `tenantId/id`, for the request and run paths.
    const cache =
      options.changes === undefined
        ? undefined
        : yield* NotifiedCache.make({
            channel: options.changes.channel,
            what: options.changes.what,
            lookup: findRow,
            timeToLive: options.changes.timeToLive,
            capacity: options.changes.capacity,
            ...(pages === undefined ? {} : { onChange: pages.drop })
          })
    // This node's next read sees a change at once; the others' on the notification.
    const forget = (tenantId: TenantId, id: string) => (cache === undefined ? Effect.void : cache.forget(tenantId, id))

    const list = (tenantId: TenantId, page: PageRequest, filter?: Filter) =>
      decodeCursor(page.cursor, isId).pipe(
        Effect.flatMap((after) => {
          const limit = page.limit ?? defaultPageSize
          const read = readPage(tenantId, filter, after, limit)
          return pages !== undefined && cache!.listening()
            ? pages.get(tenantId, `${filter ?? ""}/${limit}/${after ?? ""}`, read)
            : read
        }),
        span("list")
      )

    return {
      columns: columnsText,
      list,
      insert: (tenantId, input) =>
        model.insert.makeEffect(input).pipe(
          Effect.flatMap((row) => insertRow(tenantId, row as Record<string, unknown>)),
          Effect.flatMap((rows) => decodeRow(rows[0])),
          Effect.tap((row) => forget(tenantId, row.id)),
          Effect.orDie,
          span("insert")
        ),
      findById: (tenantId, id) =>
        isId(id)
          ? (cache === undefined ? findRow({ tenantId, id }) : cache.get(tenantId, id)).pipe(
              Effect.orDie,
              span("findById")
            )
          : Effect.succeedNone,
      update: (tenantId, id, changes) =>
        isId(id)
          ? updateRow(tenantId, id, changes as Record<string, unknown>).pipe(
              Effect.ensuring(forget(tenantId, id)),
              Effect.orDie,
              span("update")
            )
          : Effect.succeedNone,
      remove: (tenantId, id) =>
        isId(id)
          ? removeRow(tenantId, id).pipe(Effect.ensuring(forget(tenantId, id)), Effect.orDie, span("remove"))
          : Effect.succeed(false)
    } satisfies TenantRepo<S, Filter>
  })
