import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import * as SqlClient from "effect/sql/SqlClient"
import type * as Statement from "effect/sql/Statement"
import { encodeCursor, type Page } from "../Domain/Cursor.ts"
import type { TenantId } from "../Domain/Ids.ts"
import * as Traced from "../Observability/Traced.ts"

/**
 * One page of a tenant's rows of `table`, in keyset order, with the total of
 * rows matching the filters: the one way every tenant-scoped list is read.
 * The page and the total come from one statement; only an empty page (a
 * cursor past the end) counts on its own. One extra row tells whether another
 * page follows; the cursor is the last row's key.
 *
 * `table` and `columns` are the caller's constants, never input; `filters`
 * are fragments built with the sql tag, so values stay parameters.
 */
export const tenantPage = Traced.fn("Database.tenantPage")(function* <
  S extends Schema.Codec<any, any, never, never>
>(options: {
  readonly table: string
  readonly columns: string
  readonly row: S
  readonly tenantId: TenantId
  readonly filters?: ReadonlyArray<Statement.Fragment>
  /** The keyset column; default `id`. */
  readonly key?: string
  /** The key of the row read from a decoded row, for the cursor; default its `id`. */
  readonly keyOf?: (row: S["Type"]) => string
  readonly order?: "asc" | "desc"
  /** The key of the last row of the previous page (already decoded from the cursor); null for the first page. */
  readonly after: string | number | null
  readonly limit: number
}) {
  const sql = yield* SqlClient.SqlClient
  const table = sql(options.table)
  const key = sql(options.key ?? "id")
  const descending = options.order === "desc"
  const scope = sql.and([sql`tenant_id = ${options.tenantId}`, ...(options.filters ?? [])])
  const after =
    options.after === null
      ? sql``
      : descending
        ? sql`AND ${key} < ${options.after}`
        : sql`AND ${key} > ${options.after}`
  const rows = yield* sql<Record<string, unknown>>`
    SELECT ${sql.literal(options.columns)}, (SELECT count(*)::int FROM ${table} WHERE ${scope}) AS page_total
    FROM ${table} WHERE ${scope} ${after}
    ORDER BY ${key} ${sql.literal(descending ? "DESC" : "ASC")} LIMIT ${options.limit + 1}`
  const total =
    rows.length > 0
      ? Number(rows[0]!.pageTotal)
      : yield* sql<{ total: number }>`SELECT count(*)::int AS total FROM ${table} WHERE ${scope}`.pipe(
          Effect.map((counted) => counted[0]?.total ?? 0)
        )
  const decoded: ReadonlyArray<S["Type"]> = yield* Schema.decodeUnknownEffect(Schema.Array(options.row))(
    rows.slice(0, options.limit).map(({ pageTotal: _, ...row }) => row)
  )
  const keyOf = options.keyOf ?? ((row: S["Type"]) => String((row as { readonly id: string }).id))
  return {
    data: decoded,
    total,
    nextCursor:
      rows.length > options.limit && decoded.length > 0 ? encodeCursor(keyOf(decoded[decoded.length - 1]!)) : null
  } satisfies Page<S["Type"]>
})
