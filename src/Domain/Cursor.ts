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
