import { Link } from "../router.tsx"
import { ApiCall, Field, formatDate, ProblemMessage } from "../shared/components.tsx"
import { type DefaultsDraft, defaultsPayload, useApprovalDefaults } from "./hooks.ts"

// The tools' form does not edit a policy's approval fields, so there is no
// shared piece to take from it: this panel is the only editor of them.

/** The tenant's defaults for the approval fields a tool's policy leaves out (docs/approvals.md#tenant-defaults). */
export const ApprovalDefaults = () => {
  const { view, loadError, draft, setDraft, save, problem, saved, fieldError } = useApprovalDefaults()
  const set = <K extends keyof DefaultsDraft>(key: K, value: DefaultsDraft[K]) =>
    setDraft(draft === undefined ? draft : { ...draft, [key]: value })

  return (
    <section aria-labelledby="approval-defaults-title" className="detail">
      <h2 id="approval-defaults-title">Defaults for tools</h2>
      <p>
        What a <Link to="/tools">tool</Link> whose policy leaves these out takes, from the next step, team turn or chat
        turn on. A tool with its own value keeps it.{" "}
        {view !== undefined &&
          (view.updatedAt === null ? "Never set: these are the service's." : `Last set ${formatDate(view.updatedAt)}.`)}
      </p>
      {loadError !== undefined && <ProblemMessage problem={loadError} />}
      {draft !== undefined && (
        <form onSubmit={save} noValidate aria-label="Defaults for tools">
          <Field
            label="Approval"
            hint="Whether a call in an execution or a team run waits for a person first."
            error={draft.mode === "when" ? undefined : fieldError("payload.approval")}
          >
            {(props) => (
              <select
                {...props}
                value={draft.mode}
                onChange={(e) => set("mode", e.target.value as DefaultsDraft["mode"])}
              >
                <option value="never">never</option>
                <option value="always">always</option>
                <option value="when">when a rule holds</option>
              </select>
            )}
          </Field>
          {draft.mode === "when" && (
            <Field
              label="Rule"
              hint={
                <>
                  A condition on the call's arguments, such as <code>amount &gt; 100</code> (docs/approvals.md#rules).
                </>
              }
              error={fieldError("payload.approval")}
            >
              {(props) => (
                <input {...props} spellCheck={false} value={draft.rule} onChange={(e) => set("rule", e.target.value)} />
              )}
            </Field>
          )}
          <Field
            label="Timeout"
            hint="How long an approval waits for a decision: one second to seven days."
            error={fieldError("payload.approvalTimeoutMs")}
          >
            {(props) => (
              <input
                {...props}
                type="number"
                min={0}
                step="any"
                value={draft.timeout}
                onChange={(e) => set("timeout", e.target.value)}
              />
            )}
          </Field>
          <Field label="Timeout unit">
            {(props) => (
              <select
                {...props}
                value={draft.unit}
                onChange={(e) => set("unit", e.target.value as DefaultsDraft["unit"])}
              >
                <option value="minutes">minutes</option>
                <option value="hours">hours</option>
              </select>
            )}
          </Field>
          <Field
            label="On expiry"
            hint="What an approval nobody decided in time becomes."
            error={fieldError("payload.approvalOnExpiry")}
          >
            {(props) => (
              <select
                {...props}
                value={draft.onExpiry}
                onChange={(e) => set("onExpiry", e.target.value as DefaultsDraft["onExpiry"])}
              >
                <option value="reject">reject</option>
                <option value="approve">approve</option>
              </select>
            )}
          </Field>
          <ProblemMessage problem={problem} />
          <div className="actions">
            <button type="submit">Save defaults</button>
            <span role="status" className="saved">
              {saved}
            </span>
          </div>
        </form>
      )}
      <ApiCall
        call={{
          method: "PUT",
          path: "/api/settings/approvals",
          body: draft === undefined ? {} : defaultsPayload(draft)
        }}
      />
    </section>
  )
}
