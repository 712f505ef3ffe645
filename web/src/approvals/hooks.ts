import { type FormEvent, useEffect, useState } from "react"
import type { Approval, ApprovalDefaultsView, ApprovalStatus } from "../../../src/Approvals/Api.ts"
import { ApiProblem, call } from "../shared/api.ts"
import { pageQuery, useLoad, usePaged } from "../shared/data.ts"
import { type ApprovalDraft, approvalOf, timeoutDraftOf, timeoutMsOf } from "./ApprovalFields.tsx"

// The inbox of approvals: tool calls of executions and team runs waiting for
// a person. A decision is the first one only: another person's, made
// meanwhile, answers 409 and the list is read again.

/** The tenant's approvals in `status` (the inbox: `pending`), newest first, with deciding one. */
export const useApprovals = (status: ApprovalStatus) => {
  const list = usePaged(
    (cursor) => call((c) => c.approvals.list({ query: { ...pageQuery(cursor), status } })),
    [status]
  )
  const [problem, setProblem] = useState<unknown>()
  const [saved, setSaved] = useState("")

  /**
   * Approves (with `args` instead of the model's when given) or rejects; resolves to whether it was decided
   * (the problem is shown otherwise).
   */
  const decide = async (
    approval: Approval,
    decision: "approve" | "reject",
    options: { readonly args?: Record<string, unknown> | undefined; readonly note?: string | undefined } = {}
  ) => {
    setProblem(undefined)
    setSaved("")
    try {
      await call((c) =>
        c.approvals.decide({
          params: { id: approval.id },
          payload: {
            decision,
            ...(options.args === undefined ? {} : { arguments: options.args }),
            ...(options.note === undefined || options.note === "" ? {} : { note: options.note })
          }
        })
      )
      setSaved(
        `${decision === "approve" ? "Approved" : "Rejected"} ${approval.kind === "result" ? "the team's result" : `the call of ${approval.tool}`}.`
      )
      list.reload()
      return true
    } catch (error) {
      setProblem(error)
      // Decided elsewhere meanwhile: the list shows it no more.
      if (error instanceof ApiProblem && error.status === 409) list.reload()
      return false
    }
  }

  const fieldError = (path: string) => (problem instanceof ApiProblem ? problem.messagesFor(path)[0] : undefined)

  return { list, decide, problem, saved, fieldError }
}

/** The approval defaults as the panel edits them: every field set, none on "tenant default". */
export interface DefaultsDraft extends ApprovalDraft {
  readonly mode: Exclude<ApprovalDraft["mode"], "default">
  readonly onExpiry: Exclude<ApprovalDraft["onExpiry"], "default">
}

/** The draft of the defaults in force. */
export const defaultsDraftOf = (view: typeof ApprovalDefaultsView.Type): DefaultsDraft => ({
  mode: typeof view.approval === "string" ? view.approval : "when",
  rule: typeof view.approval === "string" ? "" : view.approval.when,
  ...timeoutDraftOf(view.approvalTimeoutMs),
  onExpiry: view.approvalOnExpiry
})

/** The PUT's payload: every field, so the form saves what it shows; a timeout that is no number is sent for the API to name. */
export const defaultsPayload = (draft: DefaultsDraft) => ({
  approval: approvalOf(draft.mode, draft.rule),
  approvalTimeoutMs: timeoutMsOf(draft),
  approvalOnExpiry: draft.onExpiry
})

/** The tenant's approval defaults (what a tool's policy leaving the fields out takes), with saving them. */
export const useApprovalDefaults = () => {
  const current = useLoad(() => call((c) => c.approvalDefaults.get()), [])
  // The defaults in force: as read, then as each save answered.
  const [view, setView] = useState<typeof ApprovalDefaultsView.Type>()
  const [draft, setDraft] = useState<DefaultsDraft>()
  const [problem, setProblem] = useState<unknown>()
  const [saved, setSaved] = useState("")

  // The form starts from the defaults in force, once read.
  useEffect(() => {
    if (current.data === undefined) return
    setView(current.data)
    setDraft(defaultsDraftOf(current.data))
  }, [current.data])

  const save = async (event: FormEvent) => {
    event.preventDefault()
    if (draft === undefined) return
    setProblem(undefined)
    setSaved("")
    try {
      const view = await call((c) => c.approvalDefaults.set({ payload: defaultsPayload(draft) }))
      setView(view)
      setDraft(defaultsDraftOf(view))
      setSaved("Defaults saved.")
    } catch (error) {
      setProblem(error)
    }
  }

  const fieldError = (path: string) => (problem instanceof ApiProblem ? problem.messagesFor(path)[0] : undefined)

  return { view, loadError: current.error, draft, setDraft, save, problem, saved, fieldError }
}
