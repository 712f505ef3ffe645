import { Link } from "../router.tsx"
import { ApiCall, formatDate, ProblemMessage } from "../shared/components.tsx"
import { ApprovalFields } from "./ApprovalFields.tsx"
import { defaultsPayload, useApprovalDefaults } from "./hooks.ts"

// The fields are the tool form's too (ApprovalFields), there with each
// field's "tenant default": what this panel sets.

/** The tenant's defaults for the approval fields a tool's policy leaves out (docs/approvals.md#tenant-defaults). */
export const ApprovalDefaults = () => {
  const { view, loadError, draft, setDraft, save, problem, saved, fieldError } = useApprovalDefaults()

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
          <ApprovalFields draft={draft} onChange={setDraft} fieldError={fieldError} path="payload" />
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
