import { Effect } from "effect"
import { invalidField } from "./Problems.ts"

// Page cursors are opaque to clients: the last id of the page, base64url-encoded.
export const encodeCursor = (id: string) => Buffer.from(id, "utf8").toString("base64url")

/** The id a `cursor` query parameter stands for (null when absent), or a 400 naming it. */
export const decodeCursor = (cursor: string | undefined) => {
  if (cursor === undefined) return Effect.succeed(null)
  const id = Buffer.from(cursor, "base64url").toString("utf8")
  return id !== "" && encodeCursor(id) === cursor
    ? Effect.succeed(id)
    : Effect.fail(invalidField("cursor", "Expected the nextCursor of a previous page", "query"))
}

export interface Page<A> {
  readonly data: ReadonlyArray<A>
  readonly total: number
  readonly nextCursor: string | null
}

/**
 * A page from the rows of a query asked for `limit + 1` rows: the extra row
 * only says that another page follows. A `total` column inlined in the rows
 * (to count in the same statement) is dropped from the data.
 */
export const pageOf = <A extends { readonly id: string; readonly total?: number }>(
  rows: ReadonlyArray<A>,
  limit: number,
  total: number
): Page<Omit<A, "total">> => {
  const data = rows.slice(0, limit).map(({ total: _, ...row }) => row)
  return { data, total, nextCursor: rows.length > limit ? encodeCursor(data[data.length - 1]!.id) : null }
}
