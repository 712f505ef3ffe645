import { type ReactNode, useEffect, useId, useRef, useState } from "react"
import { ApiProblem } from "./api.ts"
import type { Paged } from "./data.ts"

/** The curl command of an API call, to copy: what the screen just did, done by hand. */
export const curlOf = (call: {
  readonly method: string
  readonly path: string
  readonly body?: unknown
  readonly credential?: "session" | "key" | "none"
}) => {
  const parts = [`curl -s${call.method === "GET" ? "" : ` -X ${call.method}`} '${location.origin}${call.path}'`]
  if (call.credential === "key") parts.push(`-H "authorization: Bearer $API_KEY"`)
  else if (call.credential !== "none") parts.push(`-H "authorization: Bearer $SESSION_TOKEN"`)
  if (call.body !== undefined) {
    parts.push(`-H 'content-type: application/json'`)
    parts.push(`-d '${JSON.stringify(call.body).replaceAll("'", "'\\''")}'`)
  }
  return parts.join(" \\\n  ")
}

export const CopyButton = ({ text, label = "Copy" }: { readonly text: string; readonly label?: string }) => {
  const [copied, setCopied] = useState(false)
  const copy = async () => {
    try {
      await navigator.clipboard.writeText(text)
      setCopied(true)
      setTimeout(() => setCopied(false), 2000)
    } catch {
      setCopied(false)
    }
  }
  return (
    <button type="button" className="secondary" onClick={copy}>
      {copied ? "Copied" : label}
      <span className="visually-hidden" role="status">
        {copied ? " to the clipboard" : ""}
      </span>
    </button>
  )
}

/** The equivalent API call of a screen or an action, with a copy button. */
export const ApiCall = ({
  title = "The same with the API",
  call
}: {
  readonly title?: string
  readonly call: Parameters<typeof curlOf>[0]
}) => {
  const text = curlOf(call)
  return (
    <details className="api-call">
      <summary>
        {title}:{" "}
        <code>
          {call.method} {call.path.split("?")[0]}
        </code>
      </summary>
      <pre tabIndex={0}>
        <code>{text}</code>
      </pre>
      <CopyButton text={text} label="Copy the command" />
      {(call.credential ?? "session") === "session" && (
        <p className="hint">
          <code>$SESSION_TOKEN</code> is the <code>token</code> that <code>POST /api/auth/login</code> returns to API
          clients such as curl; this page keeps its session only in an HttpOnly cookie.
        </p>
      )}
    </details>
  )
}

/** A problem the service answered, with the fields it named. */
export const ProblemMessage = ({ problem }: { readonly problem: unknown }) => {
  if (problem === undefined || problem === null) return null
  const p = problem instanceof ApiProblem ? problem : new ApiProblem(0, { detail: String(problem) })
  return (
    <div className="problem" role="alert">
      <strong>{p.title}</strong>
      {p.detail !== p.title && <p>{p.detail}</p>}
      {p.errors.length > 0 && (
        <ul>
          {p.errors.map((error) => (
            <li key={`${error.path}:${error.message}`}>
              <code>{error.path}</code>: {error.message}
            </li>
          ))}
        </ul>
      )}
    </div>
  )
}

/** A labelled field; its error message (from the API) is tied to the input for screen readers. */
export const Field = ({
  label,
  hint,
  error,
  children
}: {
  readonly label: string
  readonly hint?: ReactNode
  readonly error?: string | undefined
  readonly children: (props: { id: string; "aria-describedby"?: string; "aria-invalid"?: boolean }) => ReactNode
}) => {
  const id = useId()
  const describedBy = [hint ? `${id}-hint` : "", error ? `${id}-error` : ""].filter(Boolean).join(" ")
  return (
    <div className="field">
      <label htmlFor={id}>{label}</label>
      {children({
        id,
        ...(describedBy ? { "aria-describedby": describedBy } : {}),
        ...(error ? { "aria-invalid": true } : {})
      })}
      {hint && (
        <p className="hint" id={`${id}-hint`}>
          {hint}
        </p>
      )}
      {error && (
        <p className="field-error" id={`${id}-error`}>
          {error}
        </p>
      )}
    </div>
  )
}

/** A confirmation in a modal dialog (focus kept inside, Escape cancels). */
export const Confirm = ({
  open,
  title,
  children,
  confirmLabel,
  onConfirm,
  onCancel
}: {
  readonly open: boolean
  readonly title: string
  readonly children: ReactNode
  readonly confirmLabel: string
  readonly onConfirm: () => void
  readonly onCancel: () => void
}) => {
  const ref = useRef<HTMLDialogElement>(null)
  const titleId = useId()
  useEffect(() => {
    const dialog = ref.current
    if (dialog === null) return
    if (open && !dialog.open) dialog.showModal()
    if (!open && dialog.open) dialog.close()
  }, [open])
  return (
    <dialog
      ref={ref}
      aria-labelledby={titleId}
      onCancel={(event) => {
        event.preventDefault()
        onCancel()
      }}
    >
      <h2 id={titleId}>{title}</h2>
      {children}
      <div className="actions">
        <button type="button" className="secondary" onClick={onCancel}>
          Cancel
        </button>
        <button type="button" className="danger" onClick={onConfirm}>
          {confirmLabel}
        </button>
      </div>
    </dialog>
  )
}

export const formatDate = (date: Date | null | undefined, empty = "never") =>
  date === null || date === undefined
    ? empty
    : `${date.toLocaleString("en-GB", { dateStyle: "medium", timeStyle: "short", timeZone: "UTC" })} UTC`

/** Under a list with pages still unread: a button that adds the next page, and how much of the list is shown. */
export const LoadMore = ({ list, label = "Load more" }: { readonly list: Paged<unknown>; readonly label?: string }) =>
  !list.hasMore ? null : (
    <div className="toolbar">
      <button type="button" className="secondary" onClick={list.loadMore} disabled={list.loadingMore}>
        {label}
      </button>
      <span className="muted" role="status">
        {list.loadingMore ? "Loading…" : `${list.items?.length ?? 0} of ${list.total ?? 0} shown`}
      </span>
    </div>
  )
