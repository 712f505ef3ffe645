import * as Effect from "effect/Effect"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import * as Base64Url from "effect/encoding/Base64Url"
import { type BadRequest, invalidField } from "./Problems.ts"
import { text } from "./Input.ts"

// Page cursors are opaque to clients: the last key of the page (an id, or a
// conversation's own id), base64url-encoded.
export const encodeCursor = (key: string) => Base64Url.encode(key)

const cursorMessage = "Expected the nextCursor of a previous page of this list"

/**
 * The key a cursor stands for, if it is the canonical encoding of a key of its
 * list. A tampered cursor (`AA` decodes to a NUL) or one from another list
 * (a conversation id on a list of UUIDs) is not.
 */
const keyOf = (cursor: string, isKey: (key: string) => boolean): string | undefined => {
  const decoded = Base64Url.decodeString(cursor)
  if (Result.isFailure(decoded)) return undefined
  const key = decoded.success
  return encodeCursor(key) === cursor && isKey(key) ? key : undefined
}

/** The `cursor` query parameter of a list keyed by what `isKey` accepts; anything else is a 400 naming it. */
export const cursorParam = (isKey: (key: string) => boolean) =>
  text(Schema.makeFilter((cursor: string) => keyOf(cursor, isKey) !== undefined || cursorMessage)).annotate({
    description: "`nextCursor` of the previous page."
  })

/** The key a `cursor` stands for (null when absent), or a 400 naming it. */
export const decodeCursor = (
  cursor: string | undefined,
  isKey: (key: string) => boolean
): Effect.Effect<string | null, BadRequest> => {
  if (cursor === undefined) return Effect.succeed(null)
  const key = keyOf(cursor, isKey)
  return key !== undefined ? Effect.succeed(key) : Effect.fail(invalidField("cursor", cursorMessage, "query"))
}

export interface Page<A> {
  readonly data: ReadonlyArray<A>
  readonly total: number
  readonly nextCursor: string | null
}
