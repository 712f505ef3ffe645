import type * as Context from "effect/Context"
import * as Schema from "effect/Schema"
import * as HttpApiEndpoint from "effect/http-api/HttpApiEndpoint"
import * as HttpApiGroup from "effect/http-api/HttpApiGroup"
import * as OpenApi from "effect/http-api/OpenApi"
import { ApiKeyAuth, keyOperation, SessionAuth, sessionCredential } from "../Auth/Api.ts"
import { operation, type OperationDoc } from "../Domain/ApiDocs.ts"
import { isSafeTextValue, Text, text, textRecord } from "../Domain/Input.ts"
import { PageOf, PageQuery } from "../Domain/Page.ts"
import { BadRequest, Conflict, NotFound } from "../Domain/Problems.ts"
import { ApprovalOnExpiry, approvalFieldsInput, ToolApproval } from "../Tools/Tool.ts"

// Approvals (docs/approvals.md): a tool call of an execution or a team run
// waiting for a human's decision, its routes for the dashboard's inbox
// (session) and for an operator's own tools (API key, scope `approvals`).

export const ApprovalStatus = Schema.Literals(["pending", "approved", "rejected", "expired", "cancelled"]).annotate({
  description:
    "`pending` until decided; `approved` or `rejected` by a person (or, when nobody decided in time, by its " +
    "`onExpiry`, with `decidedBy` `expiry`); `expired`: nobody decided and the call was rejected; `cancelled`: " +
    "the run ended (cancelled, timed out) first."
})
export type ApprovalStatus = typeof ApprovalStatus.Type

export const ApprovalRunKind = Schema.Literals(["execution", "team_run"])
export type ApprovalRunKind = typeof ApprovalRunKind.Type

export const ApprovalKind = Schema.Literals(["tool_call", "result"]).annotate({
  description:
    "`tool_call`: a call a run's model asked for; `result`: a team run's final result, waiting before its room's " +
    "webhook is sent (the team's `resultApproval`), with `tool` `result` and `arguments` `{ result }`."
})
export type ApprovalKind = typeof ApprovalKind.Type

export const Approval = Schema.Struct({
  id: Schema.String,
  kind: ApprovalKind,
  runKind: ApprovalRunKind,
  runId: Schema.String,
  step: Schema.NullOr(Schema.String).annotate({ description: "The execution's step that made the call." }),
  turn: Schema.NullOr(Schema.String).annotate({
    description: "The team run's turn (`turn-<index>`) that made the call."
  }),
  callId: Schema.String,
  tool: Schema.String,
  toolId: Schema.NullOr(Schema.String),
  arguments: Schema.Unknown.annotate({ description: "The arguments the model sent." }),
  reason: Schema.NullOr(Schema.String).annotate({ description: "What the model said with the call, if anything." }),
  status: ApprovalStatus,
  requestedAt: Schema.Date,
  expiresAt: Schema.Date,
  onExpiry: Schema.Literals(["reject", "approve"]),
  decidedBy: Schema.NullOr(Schema.String).annotate({
    description: "`user:<id>`, `key:<id>`, `expiry` or `run` (the run ended first)."
  }),
  decidedAt: Schema.NullOr(Schema.Date),
  note: Schema.NullOr(Schema.String),
  editedArguments: Schema.NullOr(Schema.Record(Schema.String, Schema.Unknown)).annotate({
    description: "The arguments the call is made with instead of the model's, when the approver changed them."
  })
})
export type Approval = typeof Approval.Type

/** The most characters of a decision's note, and of JSON of its edited arguments. */
export const maxNoteChars = 4_000
export const maxEditedArgumentsChars = 32_768

/**
 * Why edited arguments may not be stored as sent: too large, or holding text
 * Postgres would not store as sent (Domain/Input.ts). Walked without
 * recursion, within the size bound checked first.
 */
const argumentsIssue = (input: unknown): Schema.FilterOutput => {
  const chars = JSON.stringify(input).length
  if (chars > maxEditedArgumentsChars) return `Expected at most ${maxEditedArgumentsChars} characters of JSON`
  const pending: Array<readonly [unknown, ReadonlyArray<string | number>]> = [[input, []]]
  while (pending.length > 0) {
    const [value, path] = pending.pop()!
    if (typeof value === "string") {
      if (!isSafeTextValue(value)) return { path, issue: unsafeText }
    } else if (Array.isArray(value)) value.forEach((item, i) => pending.push([item, [...path, i]]))
    else if (typeof value === "object" && value !== null) {
      for (const [key, item] of Object.entries(value)) {
        if (!isSafeTextValue(key)) return { path: [...path, key], issue: unsafeText }
        pending.push([item, [...path, key]])
      }
    }
  }
  return true
}
const unsafeText = "Expected text without NUL characters or unpaired UTF-16 surrogates"

export const Decision = Schema.Struct({
  decision: Schema.Literals(["approve", "reject"]),
  arguments: Schema.optionalKey(
    textRecord(Schema.Unknown, { max: 256 })
      .check(Schema.makeFilter(argumentsIssue, { expected: "the call's arguments: a JSON object" }))
      .annotate({
        description:
          "With `approve`: the arguments to make the call with instead of the model's, checked against the tool's " +
          `parameters (400 naming where they do not match); at most ${maxEditedArgumentsChars} characters of JSON. ` +
          "For a team's result (`kind` `result`): `{ result }`, the result to send instead."
      })
  ),
  note: Schema.optionalKey(
    text(Schema.isMaxLength(maxNoteChars)).annotate({
      description: "Why: with `reject`, the model reads it in the tool error it is given."
    })
  )
})
export type Decision = typeof Decision.Type

export const ApprovalQuery = {
  ...PageQuery,
  status: Schema.optionalKey(ApprovalStatus),
  runId: Schema.optionalKey(text(Schema.isMaxLength(100)))
}

const routes = <const Name extends string>(
  name: Name,
  doc: (scope: "approvals", text: Omit<OperationDoc, "credential">) => Context.Context<never>
) =>
  HttpApiGroup.make(name).add(
    HttpApiEndpoint.get("list", "/", {
      query: ApprovalQuery,
      success: PageOf(Approval),
      error: BadRequest
    }).annotateMerge(
      doc("approvals", {
        summary: "List approvals",
        description:
          "The tenant's approvals, newest first, a page at a time (`limit`, `cursor`), optionally in one `status` " +
          "(`pending`: the inbox) or of one run (`runId`).",
        errors: "400 on a bad `limit`, `cursor` or `status`."
      })
    ),
    HttpApiEndpoint.get("get", "/:id", {
      params: { id: Text },
      success: Approval,
      error: NotFound
    }).annotateMerge(
      doc("approvals", {
        summary: "Get an approval",
        description: "The call waiting for (or given) a decision: its tool, arguments, status and decision.",
        errors: "404 when the approval is not the tenant's."
      })
    ),
    HttpApiEndpoint.post("decide", "/:id/decision", {
      params: { id: Text },
      payload: Decision,
      success: Approval,
      error: [NotFound, Conflict, BadRequest]
    }).annotateMerge(
      doc("approvals", {
        summary: "Decide an approval",
        description:
          "Approves (optionally with edited `arguments`) or rejects the call; its run goes on, on whichever node " +
          "runs it. A rejection is a tool error the model reads, with the `note`. Only the first decision counts.",
        errors:
          "404 when the approval is not the tenant's; 409 when it was already decided or expired, naming that " +
          "decision; 400 naming the field when edited `arguments` do not match the tool's parameters, or are " +
          "sent with `reject`."
      })
    )
  )

export class ApprovalsApi extends routes("approvals", (_scope, doc) =>
  operation({ ...doc, credential: sessionCredential })
)
  .middleware(SessionAuth)
  .prefix("/api/approvals")
  .annotateMerge(
    OpenApi.annotations({
      title: "Approvals",
      description: "Tool calls of executions and team runs waiting for a person's decision: the inbox, and decisions."
    })
  ) {}

export class ApprovalsV1Api extends routes("v1Approvals", (scope, doc) => keyOperation(scope, "bearer", doc))
  .middleware(ApiKeyAuth)
  .prefix("/api/v1/approvals")
  .annotateMerge(
    OpenApi.annotations({
      title: "Approvals (API key)",
      description: "The same approvals and decisions, with an API key with the `approvals` scope."
    })
  ) {}

// The dashboard type-checks against this file: it imports nothing of the server's.

/** The defaults as a client sends them: a field sent as `null` is removed. */
export const ApprovalDefaultsInput = Schema.Struct(approvalFieldsInput)
export type ApprovalDefaultsInput = typeof ApprovalDefaultsInput.Type

/** A tenant's defaults for the approval fields of its tools' policies (docs/approvals.md#tenant-defaults). */
export const ApprovalDefaultsView = Schema.Struct({
  approval: ToolApproval,
  approvalTimeoutMs: Schema.Int,
  approvalOnExpiry: ApprovalOnExpiry,
  updatedAt: Schema.NullOr(Schema.Date).annotate({ description: "When they were last set; null: never." })
})

export class ApprovalDefaultsApi extends HttpApiGroup.make("approvalDefaults")
  .add(
    HttpApiEndpoint.get("get", "/", { success: ApprovalDefaultsView }).annotateMerge(
      operation({
        summary: "Get the approval defaults",
        description:
          "What a tool's policy takes for `approval`, `approvalTimeoutMs` and `approvalOnExpiry` when it leaves " +
          'them out: the tenant\'s, or the service\'s (`"never"`, a day, `"reject"`) where the tenant set none.',
        credential: sessionCredential
      })
    ),
    HttpApiEndpoint.put("set", "/", {
      payload: ApprovalDefaultsInput,
      success: ApprovalDefaultsView,
      error: BadRequest
    }).annotateMerge(
      operation({
        summary: "Set the approval defaults",
        description:
          "Sets the fields sent (those left out keep their value; `null` goes back to the service's). They apply to each tool of the tenant whose " +
          "policy leaves the field out, from the next model turn of every chat and run; a tool with its own value " +
          'keeps it (a tool set to `"never"` is never asked about).',
        errors: "400 naming the field: an unknown `approval`, a rule that does not parse, a timeout out of bounds.",
        credential: sessionCredential
      })
    )
  )
  .middleware(SessionAuth)
  .prefix("/api/settings/approvals")
  .annotateMerge(
    OpenApi.annotations({
      title: "Approval defaults",
      description: "The tenant's defaults for when its tools' calls wait for a person, and for how long."
    })
  ) {}
