import { type FormEvent, useState } from "react"
import type { Approval, ApprovalStatus } from "../../../src/Approvals/Api.ts"
import { Link } from "../router.tsx"
import { ApiCall, Field, formatDate, LoadMore, ProblemMessage } from "../shared/components.tsx"
import { ApprovalDefaults } from "./ApprovalDefaults.tsx"
import { useApprovals } from "./hooks.ts"

const statuses: ReadonlyArray<ApprovalStatus> = ["pending", "approved", "rejected", "expired", "cancelled"]

const runLink = (approval: Approval) =>
  approval.runKind === "execution" ? (
    <Link to={`/orchestrations?execution=${approval.runId}`}>execution {approval.runId.slice(0, 8)}</Link>
  ) : (
    <span>team run {approval.runId.slice(0, 8)}</span>
  )

/** The text of a team's result (`kind` `result`): its arguments are `{ result }`. */
const resultOf = (args: unknown) => {
  const result = typeof args === "object" && args !== null ? (args as { result?: unknown }).result : undefined
  return typeof result === "string" ? result : JSON.stringify(args, null, 2)
}

/** A team's result waiting before its room's webhook: approve it, approve an edited text, or reject it with a note. */
const ResultDecision = ({
  approval,
  decide,
  fieldError
}: {
  readonly approval: Approval
  readonly decide: ReturnType<typeof useApprovals>["decide"]
  readonly fieldError: (path: string) => string | undefined
}) => {
  const [editing, setEditing] = useState(false)
  const [result, setResult] = useState(() => resultOf(approval.arguments))
  const [note, setNote] = useState("")

  const approveEdited = async (event: FormEvent) => {
    event.preventDefault()
    await decide(approval, "approve", { args: { result }, note })
  }

  return (
    <form onSubmit={approveEdited} noValidate aria-label="Decide the team's result">
      {editing && (
        <Field
          label="Result"
          hint="Sent instead of the team's, in the room's webhook and as the run's result."
          error={fieldError("payload.arguments")}
        >
          {(props) => <textarea {...props} rows={8} value={result} onChange={(e) => setResult(e.target.value)} />}
        </Field>
      )}
      <Field
        label="Note"
        hint="Optional. A rejection fails the run, naming your note."
        error={fieldError("payload.note")}
      >
        {(props) => <input {...props} maxLength={4_000} value={note} onChange={(e) => setNote(e.target.value)} />}
      </Field>
      <div className="actions">
        {editing ? (
          <button type="submit">Approve this result</button>
        ) : (
          <button type="button" onClick={() => void decide(approval, "approve", { note })}>
            Approve
          </button>
        )}
        <button type="button" className="secondary" onClick={() => setEditing(!editing)}>
          {editing ? "Keep the team's result" : "Edit result"}
        </button>
        <button type="button" className="danger" onClick={() => void decide(approval, "reject", { note })}>
          Reject
        </button>
      </div>
    </form>
  )
}

/** One pending call: approve as it is, approve with edited arguments (JSON), or reject with a note. */
const Decision = ({
  approval,
  decide,
  fieldError
}: {
  readonly approval: Approval
  readonly decide: ReturnType<typeof useApprovals>["decide"]
  readonly fieldError: (path: string) => string | undefined
}) => {
  const [editing, setEditing] = useState(false)
  const [args, setArgs] = useState(() => JSON.stringify(approval.arguments, null, 2))
  const [parseError, setParseError] = useState<string>()
  const [note, setNote] = useState("")

  const approveEdited = async (event: FormEvent) => {
    event.preventDefault()
    let parsed: unknown
    try {
      parsed = JSON.parse(args)
    } catch {
      setParseError("Expected JSON: an object of the call's arguments")
      return
    }
    if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) {
      setParseError("Expected a JSON object")
      return
    }
    setParseError(undefined)
    await decide(approval, "approve", { args: parsed as Record<string, unknown>, note })
  }

  return (
    <form onSubmit={approveEdited} noValidate aria-label={`Decide the call of ${approval.tool}`}>
      {editing && (
        <Field
          label="Arguments"
          hint="The call is made with these instead of the model's; they are checked against the tool's parameters."
          error={parseError ?? fieldError("payload.arguments")}
        >
          {(props) => (
            <textarea {...props} rows={6} spellCheck={false} value={args} onChange={(e) => setArgs(e.target.value)} />
          )}
        </Field>
      )}
      <Field
        label="Note"
        hint="Optional. A rejection's note is what the agent reads."
        error={fieldError("payload.note")}
      >
        {(props) => <input {...props} maxLength={4_000} value={note} onChange={(e) => setNote(e.target.value)} />}
      </Field>
      <div className="actions">
        {editing ? (
          <button type="submit">Approve with these arguments</button>
        ) : (
          <button type="button" onClick={() => void decide(approval, "approve", { note })}>
            Approve
          </button>
        )}
        <button type="button" className="secondary" onClick={() => setEditing(!editing)}>
          {editing ? "Keep the model's arguments" : "Edit arguments"}
        </button>
        <button type="button" className="danger" onClick={() => void decide(approval, "reject", { note })}>
          Reject
        </button>
      </div>
    </form>
  )
}

/** Approvals: the inbox of tool calls waiting for a person, and the decisions made. */
export const ApprovalsScreen = () => {
  const [status, setStatus] = useState<ApprovalStatus>("pending")
  const { list, decide, problem, saved, fieldError } = useApprovals(status)

  return (
    <>
      <h1>Approvals</h1>
      <p>
        Calls of <Link to="/tools">tools</Link> whose policy asks for a person's approval wait here; their execution or
        team run is <code>waiting</code> until you decide. A rejection is a tool error the agent reads, with your note,
        so it can find another way. Nobody deciding in time: the tool's <code>approvalOnExpiry</code> decides. A team's
        result waits here too when the team asks for it to be approved before its room's webhook is sent.
      </p>

      <Field label="Show" hint="Pending calls are the inbox.">
        {(props) => (
          <select {...props} value={status} onChange={(e) => setStatus(e.target.value as ApprovalStatus)}>
            {statuses.map((s) => (
              <option key={s} value={s}>
                {s}
              </option>
            ))}
          </select>
        )}
      </Field>

      <ProblemMessage problem={problem} />
      <p role="status" className="saved">
        {saved}
      </p>

      <section aria-labelledby="approvals-title">
        <h2 id="approvals-title">{status === "pending" ? "Waiting for a decision" : `Approvals ${status}`}</h2>
        {list.error !== undefined && <ProblemMessage problem={list.error} />}
        {list.items && list.items.length === 0 && <p>{status === "pending" ? "Nothing is waiting." : "None."}</p>}
        {list.items?.map((approval) => (
          <article key={approval.id} className="detail" data-testid="approval">
            <h3>
              {approval.kind === "result" ? "Team result" : <code>{approval.tool}</code>} in {runLink(approval)}
              {approval.step !== null ? ` (step ${approval.step})` : ""}
              {approval.turn !== null ? ` (${approval.turn})` : ""}
            </h3>
            {approval.reason !== null && <p>The agent: “{approval.reason}”</p>}
            {approval.kind === "result" ? (
              // Text, as the room's webhook will send it (wrapped, not as JSON).
              <pre>{resultOf(approval.arguments)}</pre>
            ) : (
              <pre>{JSON.stringify(approval.arguments, null, 2)}</pre>
            )}
            <p className="muted">
              Asked {formatDate(approval.requestedAt)}; expires {formatDate(approval.expiresAt)} (then{" "}
              {approval.onExpiry === "approve" ? "approved" : "rejected"}).
            </p>
            {approval.status === "pending" ? (
              approval.kind === "result" ? (
                <ResultDecision key={approval.id} approval={approval} decide={decide} fieldError={fieldError} />
              ) : (
                <Decision key={approval.id} approval={approval} decide={decide} fieldError={fieldError} />
              )
            ) : (
              <p>
                {approval.status} by {approval.decidedBy ?? "nobody"} {formatDate(approval.decidedAt)}
                {approval.note !== null ? `: ${approval.note}` : ""}
                {approval.editedArguments === null
                  ? ""
                  : approval.kind === "result"
                    ? ` (the result edited: “${resultOf(approval.editedArguments)}”)`
                    : ` (with ${JSON.stringify(approval.editedArguments)})`}
              </p>
            )}
          </article>
        ))}
        <LoadMore list={list} label="Load more approvals" />
        <ApiCall call={{ method: "GET", path: `/api/approvals?status=${status}` }} />
      </section>

      <ApprovalDefaults />
    </>
  )
}
