import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import * as Crypto from "node:crypto"
import { newId } from "../../src/Domain/Ids.ts"
import { searchText } from "../../src/Knowledge/Segment.ts"
import { defaultChunking } from "../../src/Knowledge/Chunking.ts"
import { split } from "../../src/Knowledge/Splitter.ts"
import type { Account } from "./TestServer.ts"

export interface SeedDocument {
  readonly filename: string
  readonly text: string
  readonly status?: "ready" | "processing" | "failed"
}

/**
 * A knowledge base with ready documents, chunked by the service's splitter and
 * indexed as ingestion indexes them: what the search and grounding tests start
 * from. Written in one place so that it can become an upload through the API.
 */
export const seedKnowledge = (
  account: Account,
  input: {
    readonly name: string
    readonly language?: string
    readonly documents: ReadonlyArray<SeedDocument>
  }
) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const knowledgeId = newId()
    const language = input.language ?? "simple"
    yield* sql`
      INSERT INTO knowledge_bases (id, tenant_id, name, language, chunk_strategy, chunk_size, chunk_overlap)
      VALUES (${knowledgeId}, ${account.tenantId}, ${input.name}, ${language}::regconfig,
              ${defaultChunking.strategy}, ${defaultChunking.chunkSize}, ${defaultChunking.chunkOverlap})`
    const documents: Record<string, string> = {}
    for (const document of input.documents) {
      const documentId = newId()
      documents[document.filename] = documentId
      const chunks = split(
        { text: document.text, kind: document.filename.endsWith(".md") ? "markdown" : "text" },
        defaultChunking
      )
      yield* sql`
        INSERT INTO knowledge_documents (id, tenant_id, knowledge_id, filename, content_type, bytes, sha256, status,
          chunk_strategy, chunk_size, chunk_overlap, chunk_count, token_count, text)
        VALUES (${documentId}, ${account.tenantId}, ${knowledgeId}, ${document.filename}, 'text/plain',
          ${Buffer.byteLength(document.text)}, ${Crypto.createHash("sha256").update(document.text).digest("hex")},
          ${document.status ?? "ready"}, ${defaultChunking.strategy}, ${defaultChunking.chunkSize},
          ${defaultChunking.chunkOverlap}, ${chunks.length}, ${chunks.reduce((sum, chunk) => sum + chunk.tokenCount, 0)},
          ${document.text})`
      for (const chunk of chunks) {
        yield* sql`
          INSERT INTO knowledge_chunks (id, tenant_id, knowledge_id, document_id, index, content, token_count,
            start_offset, end_offset, page, heading_path, search_vector)
          VALUES (${newId()}, ${account.tenantId}, ${knowledgeId}, ${documentId}, ${chunk.index}, ${chunk.content},
            ${chunk.tokenCount}, ${chunk.startOffset}, ${chunk.endOffset}, ${chunk.page ?? null},
            ${JSON.stringify(chunk.headingPath)}::jsonb,
            to_tsvector(${language}::regconfig, knowledge_unaccent(${searchText(chunk.content)})))`
      }
    }
    return { knowledgeId, documents }
  })
