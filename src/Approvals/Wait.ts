import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import * as DurableClock from "effect/workflow/DurableClock"
import * as DurableDeferred from "effect/workflow/DurableDeferred"
import type * as Workflow from "effect/workflow/Workflow"
import { retryTransient } from "../Database/Errors.ts"
import { newId, type TenantId } from "../Domain/Ids.ts"
import { storable } from "../Domain/Text.ts"
import type { ApprovalState, LoopApprovals } from "../Tools/Loop.ts"
import { approvalPolicy } from "../Tools/Tool.ts"
import type { Approval, ApprovalRunKind } from "./Api.ts"
import type { Approvals } from "./Approvals.ts"
import { approvalDecided, tokenFor } from "./Wake.ts"

// How a run's workflow uses approvals (docs/approvals.md), the same for
// executions and team runs: its loop asks for them and reads their decisions
// (`loopApprovals`, inside the step's or turn's activity), and the workflow
// waits for them between activities (`awaitApproval`).

const stateOf = (approval: Approval): ApprovalState => ({
  id: approval.id,
  status: approval.status,
  editedArguments: approval.editedArguments,
  note: approval.note
})

/** The approvals of one loop of a run: its step (`scope`) or team turn. */
export const loopApprovals = (
  approvals: Approvals["Service"],
  run: {
    readonly workflow: Workflow.Any
    /** The engine's id of the run's workflow execution: the approvals' deferreds are its. */
    readonly workflowExecutionId: string
    readonly tenantId: TenantId
    readonly runKind: ApprovalRunKind
    readonly runId: string
    readonly scope: string
    readonly owner: { readonly kind: "orchestration" | "team"; readonly id: string }
  }
): LoopApprovals => ({
  decisionOf: (callId) =>
    Effect.map(approvals.forCall(run.runId, run.scope, callId), (approval) =>
      approval === undefined ? undefined : stateOf(approval)
    ),
  request: (call, tool, reason) =>
    Effect.gen(function* () {
      const policy = approvalPolicy(tool.policy)
      const id = newId()
      const stored = yield* retryTransient(
        approvals.request({
          id,
          wakeToken: tokenFor(run.workflow, run.workflowExecutionId, id),
          tenantId: run.tenantId,
          runKind: run.runKind,
          runId: run.runId,
          scope: run.scope,
          callId: call.id,
          owner: run.owner,
          toolId: tool.id,
          tool: call.name,
          arguments: call.arguments,
          reason: reason === null ? null : storable(reason.slice(0, 2_000)),
          // The run's timeout does not count the wait (ApprovalsRepo.noteOnRun).
          timeoutMs: policy.timeoutMs,
          onExpiry: policy.onExpiry
        })
      ).pipe(Effect.orDie)
      return stateOf(stored.approval)
    })
})

/**
 * Waits, in a workflow, for approval `id` without holding anything: the
 * workflow suspends on the approval's durable deferred raced with a durable
 * clock at its `expiresAt`, and is replayed when either completes, on
 * whichever node runs it. Nobody decided by then: its `onExpiry` decides.
 */
export const awaitApproval = (approvals: Approvals["Service"], id: string) =>
  Effect.gen(function* () {
    const approval = yield* approvals.forId(id)
    if (approval === undefined) return
    if (approval.status === "pending") {
      const left = approval.expiresAt.getTime() - (yield* Clock.currentTimeMillis)
      yield* DurableDeferred.raceAll({
        name: `approval/${id}`,
        success: Schema.Literals(["decided", "expired"]),
        error: Schema.Never,
        effects: [
          Effect.as(DurableDeferred.await(approvalDecided(id)), "decided" as const),
          Effect.as(
            DurableClock.sleep({
              name: `approval/${id}`,
              duration: Duration.millis(Math.max(0, left)),
              // Never a sleeping fiber: a wait of any length is a stored clock.
              inMemoryThreshold: Duration.zero
            }),
            "expired" as const
          )
        ]
      })
    }
    yield* retryTransient(approvals.expire(id))
  })
