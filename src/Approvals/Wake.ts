import * as Exit from "effect/Exit"
import * as Schema from "effect/Schema"
import * as DurableDeferred from "effect/workflow/DurableDeferred"
import type * as Workflow from "effect/workflow/Workflow"

// What a run waiting for an approval awaits: one durable deferred per
// approval, completed (with nothing: the decision is read from the row) by
// whichever node writes the decision. The deferred only wakes the run; the
// row is what was decided. Its token is stored with the approval, so that
// the decision needs nothing of the run's workflow but the token.

/** The durable deferred a run awaits for approval `id`. */
export const approvalDecided = (id: string) => DurableDeferred.make(`approval/${id}`, { success: Schema.Void })

/** The token of approval `id`'s deferred in the workflow execution `executionId` (the engine's id of the run). */
export const tokenFor = (workflow: Workflow.Any, executionId: string, id: string): string =>
  DurableDeferred.tokenFromExecutionId(approvalDecided(id), { workflow, executionId })

/** Wakes the workflow awaiting approval `id`. */
export const wake = (id: string, token: string) =>
  DurableDeferred.done(approvalDecided(id), { token: token as DurableDeferred.Token, exit: Exit.void })
