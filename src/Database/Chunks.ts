import * as Effect from "effect/Effect"

/**
 * At most this many ids in one `IN` list or array parameter. The wire
 * protocol counts a statement's parameters in 16 bits (65,535 at most: past
 * that, "Failed to encode query"), and a list of thousands of ids makes a
 * statement PostgreSQL plans slowly; 1,000 keeps both far away.
 */
export const maxIdsPerStatement = 1_000

/** `items` in consecutive pieces of at most `size` (none for no items). */
export const chunksOf = <A>(items: ReadonlyArray<A>, size: number = maxIdsPerStatement): Array<ReadonlyArray<A>> => {
  const chunks: Array<ReadonlyArray<A>> = []
  for (let start = 0; start < items.length; start += size) chunks.push(items.slice(start, start + size))
  return chunks
}

/**
 * Runs `statement` once per chunk of at most `maxIdsPerStatement` ids, one
 * after the other, and gives the chunks' results in order. Nothing runs for
 * no ids. The chunks are separate statements: wrap the call in a transaction
 * when they must succeed or fail together.
 */
export const forEachChunk = <A, B, E, R>(
  ids: ReadonlyArray<A>,
  statement: (chunk: ReadonlyArray<A>) => Effect.Effect<B, E, R>
): Effect.Effect<Array<B>, E, R> => Effect.forEach(chunksOf(ids), statement)
