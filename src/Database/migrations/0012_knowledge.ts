import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"

// Knowledge bases, their documents (one per upload, ingested by a cluster
// workflow) and the documents' chunks, searched with Postgres full-text
// search (the embedded server has no pgvector). Each chunk keeps its search
// vector, built from its content after CJK runs are segmented into words
// (Segment.ts) and accents are removed, in its base's text-search
// configuration; queries are built the same way.
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE EXTENSION IF NOT EXISTS unaccent`
  // unaccent(text) is only STABLE (it looks its dictionary up by name); naming
  // the dictionary makes one immutable wrapper usable in stored vectors.
  yield* sql`
    CREATE FUNCTION knowledge_unaccent(text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
    RETURN unaccent('unaccent'::regdictionary, $1)`
  yield* sql`
    CREATE TABLE knowledge_bases (
      id text PRIMARY KEY,
      tenant_id text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
      name text NOT NULL,
      description text NOT NULL DEFAULT '',
      language regconfig NOT NULL DEFAULT 'simple',
      chunk_strategy text NOT NULL CHECK (chunk_strategy IN ('auto', 'recursive', 'markdown', 'sentence')),
      chunk_size integer NOT NULL,
      chunk_overlap integer NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now(),
      updated_at timestamptz NOT NULL DEFAULT now()
    )`
  yield* sql`CREATE INDEX knowledge_bases_tenant_idx ON knowledge_bases (tenant_id, id)`
  yield* sql`
    CREATE TABLE knowledge_documents (
      id text PRIMARY KEY,
      tenant_id text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
      knowledge_id text NOT NULL REFERENCES knowledge_bases (id) ON DELETE CASCADE,
      filename text NOT NULL,
      content_type text NOT NULL,
      bytes integer NOT NULL,
      sha256 text NOT NULL,
      status text NOT NULL CHECK (status IN ('processing', 'ready', 'failed')),
      error_code text,
      error_message text,
      chunk_strategy text NOT NULL,
      chunk_size integer NOT NULL,
      chunk_overlap integer NOT NULL,
      chunk_count integer NOT NULL DEFAULT 0,
      token_count integer NOT NULL DEFAULT 0,
      -- The upload itself, kept until it is ingested, so that a node lost
      -- mid-ingestion leaves it to the next; null once ready or failed.
      content bytea,
      -- The extracted text, which chunk offsets point into; kept for rechunking.
      text text,
      -- Extraction's headings and page starts, for rechunking.
      layout jsonb,
      messages_pruned boolean NOT NULL DEFAULT false,
      created_at timestamptz NOT NULL DEFAULT now(),
      updated_at timestamptz NOT NULL DEFAULT now()
    )`
  yield* sql`CREATE INDEX knowledge_documents_base_idx ON knowledge_documents (tenant_id, knowledge_id, id)`
  yield* sql`CREATE INDEX knowledge_documents_sha_idx ON knowledge_documents (knowledge_id, sha256)`
  yield* sql`CREATE INDEX knowledge_documents_processing_idx ON knowledge_documents (created_at) WHERE status = 'processing'`
  yield* sql`
    CREATE TABLE knowledge_chunks (
      id text PRIMARY KEY,
      tenant_id text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
      knowledge_id text NOT NULL REFERENCES knowledge_bases (id) ON DELETE CASCADE,
      document_id text NOT NULL REFERENCES knowledge_documents (id) ON DELETE CASCADE,
      index integer NOT NULL,
      content text NOT NULL,
      token_count integer NOT NULL,
      start_offset integer NOT NULL,
      end_offset integer NOT NULL,
      page integer,
      heading_path jsonb NOT NULL DEFAULT '[]',
      search_vector tsvector NOT NULL,
      UNIQUE (document_id, index)
    )`
  // Chunks page in document order: by document, then index.
  yield* sql`CREATE INDEX knowledge_chunks_order_idx ON knowledge_chunks (tenant_id, knowledge_id, document_id, index)`
  yield* sql`CREATE INDEX knowledge_chunks_search_idx ON knowledge_chunks USING gin (search_vector)`
})
