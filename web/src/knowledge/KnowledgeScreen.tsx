import { type DragEvent, useRef, useState } from "react"
import { DocumentId, KnowledgeId } from "../../../src/Domain/Ids.ts"
import type { Document } from "../../../src/Knowledge/Api.ts"
import { navigate, type Route, withQuery } from "../router.tsx"
import { ApiCall, Field, formatDate, LoadMore, ProblemMessage } from "../shared/components.tsx"
import { queryId } from "../shared/ids.ts"
import { useKnowledge } from "./hooks.ts"

const DocumentStatus = ({ document }: { readonly document: Document }) => (
  <span className={`status status-${document.status}`} title={document.error?.message}>
    {document.status}
    {document.error && `: ${document.error.code}`}
  </span>
)

/** Knowledge: bases, drag-and-drop uploads with progress and status, a chunk preview and a search box, picked in the URL. */
export const KnowledgeScreen = ({ route }: { readonly route: Route }) => {
  const baseId = queryId(route, "base", KnowledgeId)
  const documentId = queryId(route, "document", DocumentId)
  const { bases, base, documents, chunks, hits, name, setName, nameError, create, send, progress, problem } =
    useKnowledge(route, baseId, documentId)
  const [dragging, setDragging] = useState(false)
  const [query, setQuery] = useState(route.query.get("q") ?? "")
  const fileInput = useRef<HTMLInputElement>(null)

  const onDrop = (event: DragEvent) => {
    event.preventDefault()
    setDragging(false)
    void send([...event.dataTransfer.files])
  }

  return (
    <>
      <h1>Knowledge</h1>
      <div className="split">
        <section aria-labelledby="bases-title">
          <h2 id="bases-title">Knowledge bases</h2>
          <ul className="list">
            {bases.items?.map((b) => (
              <li key={b.id}>
                <a
                  href={`/app/knowledge?base=${b.id}`}
                  aria-current={b.id === baseId ? "true" : undefined}
                  onClick={(e) => {
                    e.preventDefault()
                    navigate(withQuery(route, { base: b.id, document: null, q: null }))
                  }}
                >
                  <strong>{b.name}</strong>{" "}
                  <span className="muted">
                    {b.documentCount} docs · {b.chunkCount} chunks
                  </span>
                </a>
              </li>
            ))}
          </ul>
          <LoadMore list={bases} label="Load more bases" />
          <form onSubmit={create} noValidate>
            <Field label="New base name" error={nameError}>
              {(props) => <input {...props} value={name} onChange={(e) => setName(e.target.value)} />}
            </Field>
            <button type="submit">Create base</button>
          </form>
          <ApiCall call={{ method: "POST", path: "/api/knowledge", body: { name: name || "Handbook" } }} />
        </section>
        <section aria-labelledby="base-title">
          {!base && <p>Choose or create a knowledge base.</p>}
          {base && (
            <>
              <h2 id="base-title">{base.name}</h2>
              <p className="muted">
                {base.documentCount} documents, {base.chunkCount} chunks, {base.tokenCount.toLocaleString("en")} tokens
                · chunks of {base.chunking.chunkSize} tokens ({base.chunking.strategy}), overlap{" "}
                {base.chunking.chunkOverlap}
              </p>
              <div
                className={`dropzone${dragging ? " dragging" : ""}`}
                onDragOver={(e) => {
                  e.preventDefault()
                  setDragging(true)
                }}
                onDragLeave={() => setDragging(false)}
                onDrop={onDrop}
              >
                <p>Drop files here (text, Markdown, HTML, JSON, CSV, PDF, DOCX), or</p>
                <input
                  id="upload-files"
                  ref={fileInput}
                  className="visually-hidden"
                  type="file"
                  multiple
                  onChange={(e) => {
                    void send([...(e.target.files ?? [])])
                    e.target.value = ""
                  }}
                />
                <label htmlFor="upload-files" className="button-like">
                  Choose files
                </label>
                {progress !== undefined && (
                  <p>
                    <label htmlFor="upload-progress">Uploading</label>{" "}
                    <progress id="upload-progress" max={1} value={progress}>
                      {Math.round(progress * 100)}%
                    </progress>
                  </p>
                )}
              </div>
              <ProblemMessage problem={problem} />
              <ApiCall
                call={{
                  method: "POST",
                  path: `/api/knowledge/${base.id}/upload`,
                  body: { filename: "notes.txt", content: "..." }
                }}
              />

              <h3>Documents</h3>
              {documents.items && documents.items.length === 0 && <p>No documents yet.</p>}
              {documents.items && documents.items.length > 0 && (
                <table data-testid="documents">
                  <caption className="visually-hidden">Documents</caption>
                  <thead>
                    <tr>
                      <th scope="col">File</th>
                      <th scope="col">Status</th>
                      <th scope="col">Chunks</th>
                      <th scope="col">Tokens</th>
                      <th scope="col">Uploaded</th>
                    </tr>
                  </thead>
                  <tbody>
                    {documents.items.map((d) => (
                      <tr key={d.id} aria-selected={d.id === documentId}>
                        <th scope="row">
                          <a
                            href={`/app${withQuery(route, { document: d.id })}`}
                            onClick={(e) => {
                              e.preventDefault()
                              navigate(withQuery(route, { document: d.id }))
                            }}
                          >
                            {d.filename}
                          </a>
                        </th>
                        <td>
                          <DocumentStatus document={d} />
                        </td>
                        <td>{d.chunkCount}</td>
                        <td>{d.tokenCount.toLocaleString("en")}</td>
                        <td>{formatDate(d.createdAt)}</td>
                      </tr>
                    ))}
                  </tbody>
                </table>
              )}
              <LoadMore list={documents} label="Load more documents" />

              {documentId && (
                <>
                  <h3>Chunks</h3>
                  <ol className="chunks" data-testid="chunks">
                    {chunks.items?.map((chunk) => (
                      <li key={chunk.id}>
                        <p className="muted">
                          #{chunk.index} · {chunk.tokenCount} tokens · characters {chunk.startOffset}–{chunk.endOffset}
                          {chunk.page !== null && ` · page ${chunk.page}`}
                          {chunk.headingPath.length > 0 && ` · ${chunk.headingPath.join(" › ")}`}
                        </p>
                        <pre tabIndex={0}>{chunk.content}</pre>
                      </li>
                    ))}
                  </ol>
                  <LoadMore list={chunks} label="Load more chunks" />
                </>
              )}

              <h3>Search</h3>
              <form
                role="search"
                onSubmit={(e) => {
                  e.preventDefault()
                  navigate(withQuery(route, { q: query }))
                }}
              >
                <Field label="Search this base">
                  {(props) => (
                    <input {...props} type="search" value={query} onChange={(e) => setQuery(e.target.value)} />
                  )}
                </Field>
                <button type="submit">Search</button>
              </form>
              {hits.error !== undefined && <ProblemMessage problem={hits.error} />}
              {hits.data && hits.data.data.length === 0 && <p>Nothing matched.</p>}
              <ol className="chunks" data-testid="search-hits">
                {hits.data?.data.map((hit) => (
                  <li key={hit.id}>
                    <p className="muted">
                      score {hit.score.toFixed(3)} · chunk #{hit.index}
                    </p>
                    <pre tabIndex={0}>{hit.content}</pre>
                  </li>
                ))}
              </ol>
              <ApiCall
                call={{
                  method: "POST",
                  path: `/api/knowledge/${base.id}/search`,
                  body: { query: query || "refunds", topK: 5 }
                }}
              />
            </>
          )}
        </section>
      </div>
    </>
  )
}
