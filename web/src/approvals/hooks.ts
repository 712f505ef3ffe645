import { useState } from "react"
import type { Approval, ApprovalStatus } from "../../../src/Approvals/Api.ts"
import { ApiProblem, call } from "../shared/api.ts"
import { pageQuery, usePaged } from "../shared/data.ts"

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
      setSaved(`${decision === "approve" ? "Approved" : "Rejected"} the call of ${approval.tool}.`)
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
