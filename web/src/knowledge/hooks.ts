import { type FormEvent, useEffect, useState } from "react"
import type { DocumentId, KnowledgeId } from "../../../src/Domain/Ids.ts"
import { navigate, type Route, withQuery } from "../router.tsx"
import { ApiProblem, call, urls } from "../shared/api.ts"
import { pageQuery, useLoad, usePaged, useSelected } from "../shared/data.ts"

/**
 * Sends files as multipart/form-data, reporting the share sent (XMLHttpRequest:
 * fetch reports no upload progress). The documents it answers are read again
 * from the list, which follows them until they are ready.
 */
const upload = (path: string, files: ReadonlyArray<File>, onProgress: (share: number) => void) =>
  new Promise<void>((resolve, reject) => {
    const form = new FormData()
    for (const file of files) form.append("files", file, file.name)
    const request = new XMLHttpRequest()
    request.open("POST", path)
    request.responseType = "json"
    request.upload.onprogress = (event) => event.lengthComputable && onProgress(event.loaded / event.total)
    request.onload = () => {
      if (request.status === 201 || request.status === 202) resolve()
      else reject(new ApiProblem(request.status, (request.response as Record<string, unknown> | null) ?? {}))
    }
    request.onerror = () =>
      reject(new ApiProblem(0, { title: "No answer", detail: "The upload could not reach the service" }))
    request.send(form)
  })

/**
 * The knowledge screen's data: the bases, the one selected in the URL
 * (`?base=`) with its documents, the chunks of the document selected
 * (`?document=`), each a page at a time; making a base, uploads with their
 * progress, and the search asked for in the URL (`?q=`).
 */
export const useKnowledge = (route: Route, baseId: KnowledgeId | null, documentId: DocumentId | null) => {
  const bases = usePaged((cursor) => call((c) => c.knowledge.list({ query: pageQuery(cursor) })), [])
  const selection = useSelected(bases, baseId, (id) => call((c) => c.knowledge.get({ params: { id } })))
  const documents = usePaged(
    baseId
      ? (cursor) => call((c) => c.knowledge.documents({ params: { id: baseId }, query: pageQuery(cursor) }))
      : undefined,
    [baseId]
  )
  const chunks = usePaged(
    baseId && documentId
      ? (cursor) =>
          call((c) => c.knowledge.chunks({ params: { id: baseId }, query: { ...pageQuery(cursor, 20), documentId } }))
      : undefined,
    [baseId, documentId]
  )
  const searched = route.query.get("q")
  const hits = useLoad(
    () =>
      baseId && searched
        ? call((c) => c.knowledgeSearch.search({ params: { id: baseId }, payload: { query: searched, topK: 5 } }))
        : Promise.resolve(undefined),
    [baseId, searched]
  )
  const [name, setName] = useState("")
  const [problem, setProblem] = useState<unknown>()
  const [progress, setProgress] = useState<number>()

  const refresh = () => {
    documents.reload()
    bases.reload()
    selection.reload()
  }

  // Documents still processing are read again until they are ready or failed.
  const processing = documents.items?.some((d) => d.status === "processing") ?? false
  useEffect(() => {
    if (!processing) return
    const timer = setTimeout(refresh, 1000)
    return () => clearTimeout(timer)
  }, [processing, documents.items])

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
      await upload(urls.knowledge.upload({ params: { id: baseId }, query: {} }), files, setProgress)
    } catch (error) {
      setProblem(error)
    } finally {
      setProgress(undefined)
      refresh()
    }
  }

  const nameError = problem instanceof ApiProblem ? problem.messagesFor("payload.name")[0] : undefined
  return {
    bases,
    base: selection.item,
    documents,
    chunks,
    hits,
    name,
    setName,
    nameError,
    create,
    send,
    progress,
    problem
  }
}
