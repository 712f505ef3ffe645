import { type DragEvent, type FormEvent, useEffect, useRef, useState } from "react"
import type { Document } from "../../../src/Knowledge/Api.ts"
import { ApiProblem, call, urls } from "../api.ts"
import { ApiCall, Field, formatDate, ProblemMessage, useLoad } from "../components.tsx"
import { navigate, type Route, withQuery } from "../router.tsx"

/** Sends files as multipart/form-data, reporting the share sent (XMLHttpRequest: fetch reports no upload progress). */
const upload = (path: string, files: ReadonlyArray<File>, onProgress: (share: number) => void) =>
  new Promise<Array<Document>>((resolve, reject) => {
    const form = new FormData()
    for (const file of files) form.append("files", file, file.name)
    const request = new XMLHttpRequest()
    request.open("POST", path)
    request.responseType = "json"
    request.upload.onprogress = (event) => event.lengthComputable && onProgress(event.loaded / event.total)
    request.onload = () => {
      const body = request.response as Record<string, unknown> | null
      if (request.status === 201) resolve([body as unknown as Document])
      else if (request.status === 202) resolve((body as { data: Array<Document> }).data)
      else reject(new ApiProblem(request.status, body ?? {}))
    }
    request.onerror = () => reject(new ApiProblem(0, { title: "No answer", detail: "The upload could not reach the service" }))
    request.send(form)
  })

const DocumentStatus = ({ document }: { readonly document: Document }) => (
  <span className={`status status-${document.status}`} title={document.error?.message}>
    {document.status}{document.error && `: ${document.error.code}`}
  </span>
)

/** Knowledge: bases, drag-and-drop uploads with progress and status, a chunk preview and a search box, picked in the URL. */
export const KnowledgeScreen = ({ route }: { readonly route: Route }) => {
  const baseId = route.query.get("base")
  const documentId = route.query.get("document")
  const bases = useLoad(() => call((c) => c.knowledge.list({ query: { limit: 100 } })), [])
  const base = bases.data?.data.find((b) => b.id === baseId)
  const documents = useLoad(
    () => baseId ? call((c) => c.knowledge.documents({ params: { id: baseId as never }, query: { limit: 100 } })) : Promise.resolve(undefined),
    [baseId]
  )
  const chunks = useLoad(
    () => baseId && documentId
      ? call((c) => c.knowledge.chunks({ params: { id: baseId as never }, query: { documentId: documentId as never, limit: 20 } }))
      : Promise.resolve(undefined),
    [baseId, documentId]
  )
  const [name, setName] = useState("")
  const [problem, setProblem] = useState<unknown>()
  const [progress, setProgress] = useState<number>()
  const [dragging, setDragging] = useState(false)
  const [query, setQuery] = useState(route.query.get("q") ?? "")
  const hits = useLoad(
    () => baseId && route.query.get("q")
      ? call((c) => c.knowledgeSearch.search({ params: { id: baseId }, payload: { query: route.query.get("q")!, topK: 5 } }))
      : Promise.resolve(undefined),
    [baseId, route.query.get("q")]
  )
  const fileInput = useRef<HTMLInputElement>(null)

  // Documents still processing are read again until they are ready or failed.
  const processing = documents.data?.data.some((d) => d.status === "processing") ?? false
  useEffect(() => {
    if (!processing) return
    const timer = setTimeout(() => {
      documents.reload()
      bases.reload()
    }, 1000)
    return () => clearTimeout(timer)
  }, [processing, documents.data])

  const create = async (event: FormEvent) => {
    event.preventDefault()
    setProblem(undefined)
    try {
      const made = await call((c) => c.knowledge.create({ payload: { name } }))
      setName("")
      bases.reload()
      navigate(withQuery(route, { base: made.id, document: null, q: null }))
    } catch (error) {
      setProblem(error)
    }
  }

  const send = async (files: ReadonlyArray<File>) => {
    if (!baseId || files.length === 0) return
    setProblem(undefined)
    setProgress(0)
    try {
      await upload(urls.knowledge.upload({ params: { id: baseId as never }, query: {} }), files, setProgress)
    } catch (error) {
      setProblem(error)
    } finally {
      setProgress(undefined)
      documents.reload()
      bases.reload()
    }
  }

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
            {bases.data?.data.map((b) => (
              <li key={b.id}>
                <a
                  href={`/app/knowledge?base=${b.id}`}
                  aria-current={b.id === baseId ? "true" : undefined}
                  onClick={(e) => {
                    e.preventDefault()
                    navigate(withQuery(route, { base: b.id, document: null, q: null }))
                  }}
                >
                  <strong>{b.name}</strong> <span className="muted">{b.documentCount} docs · {b.chunkCount} chunks</span>
                </a>
              </li>
            ))}
          </ul>
          <form onSubmit={create} noValidate>
            <Field label="New base name" error={problem instanceof ApiProblem ? problem.messagesFor("payload.name")[0] : undefined}>
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
                {base.documentCount} documents, {base.chunkCount} chunks, {base.tokenCount.toLocaleString("en")} tokens ·
                chunks of {base.chunking.chunkSize} tokens ({base.chunking.strategy}), overlap {base.chunking.chunkOverlap}
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
                <label htmlFor="upload-files" className="button-like">Choose files</label>
                {progress !== undefined && (
                  <p>
                    <label htmlFor="upload-progress">Uploading</label>{" "}
                    <progress id="upload-progress" max={1} value={progress}>{Math.round(progress * 100)}%</progress>
                  </p>
                )}
              </div>
              <ProblemMessage problem={problem} />
              <ApiCall call={{ method: "POST", path: `/api/knowledge/${base.id}/upload`, body: { filename: "notes.txt", content: "..." } }} />

              <h3>Documents</h3>
              {documents.data && documents.data.data.length === 0 && <p>No documents yet.</p>}
              {documents.data && documents.data.data.length > 0 && (
                <table data-testid="documents">
                  <caption className="visually-hidden">Documents</caption>
                  <thead><tr><th scope="col">File</th><th scope="col">Status</th><th scope="col">Chunks</th><th scope="col">Tokens</th><th scope="col">Uploaded</th></tr></thead>
                  <tbody>
                    {documents.data.data.map((d) => (
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
                        <td><DocumentStatus document={d} /></td>
                        <td>{d.chunkCount}</td>
                        <td>{d.tokenCount.toLocaleString("en")}</td>
                        <td>{formatDate(d.createdAt)}</td>
                      </tr>
                    ))}
                  </tbody>
                </table>
              )}

              {documentId && (
                <>
                  <h3>Chunks</h3>
                  <ol className="chunks" data-testid="chunks">
                    {chunks.data?.data.map((chunk) => (
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
                  {chunks.data && chunks.data.total > chunks.data.data.length && <p className="muted">The first {chunks.data.data.length} of {chunks.data.total} chunks.</p>}
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
                  {(props) => <input {...props} type="search" value={query} onChange={(e) => setQuery(e.target.value)} />}
                </Field>
                <button type="submit">Search</button>
              </form>
              {hits.error !== undefined && <ProblemMessage problem={hits.error} />}
              {hits.data && hits.data.data.length === 0 && <p>Nothing matched.</p>}
              <ol className="chunks" data-testid="search-hits">
                {hits.data?.data.map((hit) => (
                  <li key={hit.id}>
                    <p className="muted">score {hit.score.toFixed(3)} · chunk #{hit.index}</p>
                    <pre tabIndex={0}>{hit.content}</pre>
                  </li>
                ))}
              </ol>
              <ApiCall call={{ method: "POST", path: `/api/knowledge/${base.id}/search`, body: { query: query || "refunds", topK: 5 } }} />
            </>
          )}
        </section>
      </div>
    </>
  )
}
