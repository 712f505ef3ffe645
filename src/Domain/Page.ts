import * as Schema from "effect/Schema"
import { cursorParam } from "./Cursor.ts"
import { isId } from "./Ids.ts"

// Every list of the API is read a page at a time: the same `limit` and
// `cursor` in, the same `{ data, total, nextCursor }` out.

export const defaultPageSize = 50
export const maxPageSize = 200

/** `limit` and `cursor` of a list whose keys (and so whose cursors' contents) are what `isKey` accepts. */
export const pageQuery = (isKey: (key: string) => boolean) => ({
  limit: Schema.optionalKey(
    Schema.NumberFromString.pipe(
      Schema.decodeTo(Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: maxPageSize })))
    ).annotate({ description: `Page size, 1 to ${maxPageSize} (default ${defaultPageSize}).` })
  ),
  cursor: Schema.optionalKey(cursorParam(isKey))
})

/** The page query of the lists keyed by our ids. */
export const PageQuery = pageQuery(isId)

/** A page query as decoded. */
export interface PageRequest {
  readonly limit?: number | undefined
  readonly cursor?: string | undefined
}

/** A page of `item`s as a list route answers it. */
export const PageOf = <Item extends Schema.Top>(item: Item) =>
  Schema.Struct({
    data: Schema.Array(item),
    total: Schema.Int,
    nextCursor: Schema.NullOr(Schema.String)
  })
