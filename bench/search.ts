// Knowledge search latency: one knowledge base of BENCH_SEARCH_CHUNKS chunks
// (default 50,000; generated text over a 20,000-word vocabulary with a skewed,
// Zipf-like word frequency, indexed exactly as ingestion indexes chunks), then
// BENCH_SEARCH_QUERIES searches (default 300) of 1 to 5 words, one at a time,
// through POST /api/knowledge/{id}/search (topK 5). Prints p50/p95/p99.
//
//   npm run bench:search        BENCH_DATABASE_URL=... to use an existing server
import * as Crypto from "node:crypto"
import pg from "pg"
import { newId } from "../src/Domain/Ids.ts"
import { searchText } from "../src/Knowledge/Segment.ts"
import { countTokens } from "../src/Models/Tokens.ts"
import { json, openDatabase, signUp, spawn } from "./Support.ts"

const chunkCount = Number(process.env.BENCH_SEARCH_CHUNKS ?? 50_000)
const queryCount = Number(process.env.BENCH_SEARCH_QUERIES ?? 300)
// (BENCH_SEARCH_KEEP=1 keeps the database, to look at the plans.)
const wordsPerChunk = 120
const chunksPerDocument = 100

// A small seeded generator, so every run measures the same corpus and queries.
let seed = 42
const next = () => {
  seed = (seed + 0x6d2b79f5) | 0
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed)
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296
}
const syllables = "ka lo mi ne ru sa ti vo be da fe gi ho ju le ma no pi qu re si tu va we xo ya ze".split(" ")
const vocabulary = Array.from({ length: 20_000 }, (_, i) => {
  let word = ""
  for (let n = i + 1; n > 0; n = Math.floor(n / syllables.length)) word += syllables[n % syllables.length]
  return word
})
// Rank r is drawn with probability about proportional to 1/r: a few words are everywhere, most are rare.
const word = () =>
  vocabulary[Math.min(vocabulary.length - 1, Math.floor(Math.exp(next() * Math.log(vocabulary.length + 1))) - 1)]!
const sentence = (words: number) => Array.from({ length: words }, word).join(" ")

const percentile = (sorted: ReadonlyArray<number>, p: number) =>
  sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))]!

const main = async () => {
  const { close, databaseUrl } = await openDatabase("search")
  const service = await spawn("src/main.ts", { DATABASE_URL: databaseUrl })
  const db = new pg.Client({ connectionString: databaseUrl })
  await db.connect()
  try {
    const { auth, tenantId } = await signUp(service.url)
    // Searches count as requests: an unlimited plan keeps the free plan's daily limit out of the measurement.
    await db.query("UPDATE tenants SET plan = 'business' WHERE id = $1", [tenantId])
    const knowledgeId = newId()
    await db.query(
      `INSERT INTO knowledge_bases (id, tenant_id, name, language, chunk_strategy, chunk_size, chunk_overlap)
       VALUES ($1, $2, 'Bench', 'simple', 'auto', 512, 64)`,
      [knowledgeId, tenantId]
    )
    const seededAt = performance.now()
    for (let document = 0; document * chunksPerDocument < chunkCount; document++) {
      const documentId = newId()
      const contents = Array.from(
        { length: Math.min(chunksPerDocument, chunkCount - document * chunksPerDocument) },
        () => sentence(wordsPerChunk)
      )
      await db.query(
        `INSERT INTO knowledge_documents (id, tenant_id, knowledge_id, filename, content_type, bytes, sha256, status,
           chunk_strategy, chunk_size, chunk_overlap, chunk_count)
         VALUES ($1, $2, $3, $4, 'text/plain', 0, $5, 'ready', 'auto', 512, 64, $6)`,
        [
          documentId,
          tenantId,
          knowledgeId,
          `doc-${document}.txt`,
          Crypto.randomBytes(32).toString("hex"),
          contents.length
        ]
      )
      await db.query(
        `INSERT INTO knowledge_chunks (id, tenant_id, knowledge_id, document_id, index, content, token_count,
           start_offset, end_offset, search_vector)
         SELECT c.id, $1, $2, $3, c.index, c.content, c.tokens, 0, length(c.content),
                to_tsvector('simple', knowledge_unaccent(c.indexed))
         FROM unnest($4::text[], $5::int[], $6::text[], $7::text[], $8::int[]) AS c (id, index, content, indexed, tokens)`,
        [
          tenantId,
          knowledgeId,
          documentId,
          contents.map(() => newId()),
          contents.map((_, i) => i),
          contents,
          contents.map(searchText),
          contents.map(countTokens)
        ]
      )
    }
    await db.query("ANALYZE knowledge_chunks")
    console.log(
      `seeded ${chunkCount.toLocaleString("en")} chunks of ${wordsPerChunk} words in ${((performance.now() - seededAt) / 1000).toFixed(1)} s`
    )

    const queries = Array.from({ length: queryCount }, () => sentence(1 + Math.floor(next() * 5)))
    const search = (query: string) =>
      json(`${service.url}/api/knowledge/${knowledgeId}/search`, {
        method: "POST",
        headers: auth,
        body: JSON.stringify({ query, topK: 5 })
      })
    for (const query of queries.slice(0, 20)) await search(query)
    const times: Array<number> = []
    let hits = 0
    for (const query of queries) {
      const startedAt = performance.now()
      const found = await search(query)
      times.push(performance.now() - startedAt)
      hits += found.data.length
    }
    times.sort((a, b) => a - b)
    console.log(
      `search over ${chunkCount.toLocaleString("en")} chunks, ${queryCount} queries of 1 to 5 words, one at a time, over HTTP: ` +
        `p50 ${percentile(times, 0.5).toFixed(1)} ms, p95 ${percentile(times, 0.95).toFixed(1)} ms, ` +
        `p99 ${percentile(times, 0.99).toFixed(1)} ms (target p50 < 50 ms); ${(hits / queryCount).toFixed(1)} hits per query`
    )
  } finally {
    await db.end()
    service.child.kill("SIGTERM")
    await new Promise((resolve) => service.child.once("exit", resolve))
    // BENCH_SEARCH_KEEP=1 leaves the database, to look at the plans.
    if (process.env.BENCH_SEARCH_KEEP === "1") console.log(`kept ${databaseUrl}`)
    else await close()
  }
}

await main()
