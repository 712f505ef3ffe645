import type { ApprovalDefaultsView } from "../../../src/Approvals/Api.ts"
import type { ToolApproval, ToolPolicy } from "../../../src/Tools/Tool.ts"
import { Field } from "../shared/components.tsx"

// The approval fields of a tool's policy, as both the tenant's defaults panel
// and the tool form edit them, so they are written once. The form also offers
// each field's "tenant default": the field left out of the tool's policy.
// Their values are checked by the typed client against the API's schemas.

/** The approval fields as typed: the timeout in a unit people read. */
export interface ApprovalDraft {
  /** "default": the tenant's (the tool form only). */
  readonly mode: "default" | "never" | "always" | "when"
  readonly rule: string
  /** The timeout in `unit`, as typed; empty in the tool form: the tenant's default. */
  readonly timeout: string
  readonly unit: "minutes" | "hours"
  /** "default": the tenant's (the tool form only). */
  readonly onExpiry: "default" | "reject" | "approve"
}

type ApprovalDefaults = typeof ApprovalDefaultsView.Type

const msPer = { minutes: 60_000, hours: 3_600_000 } as const

/** A timeout in the unit it reads best in: whole hours in hours, anything else in minutes. */
export const timeoutDraftOf = (ms: number): Pick<ApprovalDraft, "timeout" | "unit"> => {
  const unit = ms % msPer.hours === 0 ? "hours" : "minutes"
  return { timeout: String(ms / msPer[unit]), unit }
}

/** The timeout typed, in milliseconds; one that is no number is NaN, for the API's schema to name. */
export const timeoutMsOf = (draft: Pick<ApprovalDraft, "timeout" | "unit">) =>
  draft.timeout.trim() === "" ? Number.NaN : Math.round(Number(draft.timeout) * msPer[draft.unit])

/** `approval` as the API takes it. */
export const approvalOf = (mode: "never" | "always" | "when", rule: string): ToolApproval =>
  mode === "when" ? { when: rule } : mode

type ApprovalPolicy = Pick<ToolPolicy, "approval" | "approvalTimeoutMs" | "approvalOnExpiry">

/** A tool's approval fields as the form shows them: each it leaves out on "tenant default". */
export const toolApprovalDraftOf = (policy: ApprovalPolicy | undefined): ApprovalDraft => {
  const approval = policy?.approval
  return {
    mode: approval === undefined ? "default" : typeof approval === "string" ? approval : "when",
    rule: approval !== undefined && typeof approval !== "string" ? approval.when : "",
    ...(policy?.approvalTimeoutMs === undefined
      ? { timeout: "", unit: "hours" as const }
      : timeoutDraftOf(policy.approvalTimeoutMs)),
    onExpiry: policy?.approvalOnExpiry ?? "default"
  }
}

/**
 * The approval fields of a tool's policy as sent: a field on "tenant default" is left out, or sent as `null`
 * when the tool as `stored` has its own value, which removes it (docs/tools.md#policy).
 */
export const toolApprovalPayload = (draft: ApprovalDraft, stored: ApprovalPolicy | undefined) => {
  const approval =
    draft.mode === "default" ? (stored?.approval === undefined ? undefined : null) : approvalOf(draft.mode, draft.rule)
  const approvalTimeoutMs =
    draft.timeout.trim() === "" ? (stored?.approvalTimeoutMs === undefined ? undefined : null) : timeoutMsOf(draft)
  const approvalOnExpiry =
    draft.onExpiry === "default" ? (stored?.approvalOnExpiry === undefined ? undefined : null) : draft.onExpiry
  return {
    ...(approval === undefined ? {} : { approval }),
    ...(approvalTimeoutMs === undefined ? {} : { approvalTimeoutMs }),
    ...(approvalOnExpiry === undefined ? {} : { approvalOnExpiry })
  }
}

const approvalText = (approval: ToolApproval) => (typeof approval === "string" ? approval : `when ${approval.when}`)

/** A timeout as read: "24 hours", "90 minutes", "30 seconds". */
const timeoutText = (ms: number) => {
  const [count, unit] =
    ms % msPer.hours === 0
      ? [ms / msPer.hours, "hour"]
      : ms % msPer.minutes === 0
        ? [ms / msPer.minutes, "minute"]
        : [ms / 1_000, "second"]
  return `${count} ${unit}${count === 1 ? "" : "s"}`
}

/** "Tenant default", with the tenant's value once read. */
const tenantDefault = (value: string | undefined) =>
  value === undefined ? "Tenant default" : `Tenant default (${value})`

/**
 * Approval, its rule, the timeout with its unit, and what an expired approval becomes. `path` is where the
 * fields are in the request (`payload`, `payload.policy`), to show the problems named there. With `tenant`, each
 * field offers the tenant's default (its `view` shown once read).
 */
export const ApprovalFields = <D extends ApprovalDraft>({
  draft,
  onChange,
  fieldError,
  path,
  tenant
}: {
  readonly draft: D
  readonly onChange: (draft: D) => void
  readonly fieldError: (path: string) => string | undefined
  readonly path: string
  readonly tenant?: { readonly view: ApprovalDefaults | undefined }
}) => {
  const change = (patch: Partial<D>) => onChange({ ...draft, ...patch })
  const view = tenant?.view
  // The tenant's timeout in the unit chosen, as a placeholder, where it reads as a short number there.
  const inUnit = view === undefined ? undefined : view.approvalTimeoutMs / msPer[draft.unit]
  const defaultTimeout = inUnit !== undefined && Number.isInteger(inUnit * 100) ? String(inUnit) : undefined
  return (
    <>
      <Field
        label="Approval"
        hint="Whether a call in an execution or a team run waits for a person first."
        error={draft.mode === "when" ? undefined : fieldError(`${path}.approval`)}
      >
        {(props) => (
          <select {...props} value={draft.mode} onChange={(e) => change({ mode: e.target.value } as Partial<D>)}>
            {tenant && (
              <option value="default">
                {tenantDefault(view === undefined ? undefined : approvalText(view.approval))}
              </option>
            )}
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
          error={fieldError(`${path}.approval`)}
        >
          {(props) => (
            <input
              {...props}
              spellCheck={false}
              value={draft.rule}
              onChange={(e) => change({ rule: e.target.value } as Partial<D>)}
            />
          )}
        </Field>
      )}
      <Field
        label="Timeout"
        hint={
          tenant
            ? `How long an approval waits for a decision: one second to seven days. Empty: the tenant's default${view === undefined ? "" : `, ${timeoutText(view.approvalTimeoutMs)}`}.`
            : "How long an approval waits for a decision: one second to seven days."
        }
        error={fieldError(`${path}.approvalTimeoutMs`)}
      >
        {(props) => (
          <input
            {...props}
            type="number"
            min={0}
            step="any"
            {...(defaultTimeout === undefined ? {} : { placeholder: defaultTimeout })}
            value={draft.timeout}
            onChange={(e) => change({ timeout: e.target.value } as Partial<D>)}
          />
        )}
      </Field>
      <Field label="Timeout unit">
        {(props) => (
          <select {...props} value={draft.unit} onChange={(e) => change({ unit: e.target.value } as Partial<D>)}>
            <option value="minutes">minutes</option>
            <option value="hours">hours</option>
          </select>
        )}
      </Field>
      <Field
        label="On expiry"
        hint="What an approval nobody decided in time becomes."
        error={fieldError(`${path}.approvalOnExpiry`)}
      >
        {(props) => (
          <select
            {...props}
            value={draft.onExpiry}
            onChange={(e) => change({ onExpiry: e.target.value } as Partial<D>)}
          >
            {tenant && (
              <option value="default">{tenantDefault(view === undefined ? undefined : view.approvalOnExpiry)}</option>
            )}
            <option value="reject">reject</option>
            <option value="approve">approve</option>
          </select>
        )}
      </Field>
    </>
  )
}
