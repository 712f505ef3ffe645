import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import * as Singleton from "effect/cluster/Singleton"
import * as SqlClient from "effect/sql/SqlClient"
import type { Principal } from "../Auth/Api.ts"
import { decodeCursor, encodeCursor, type Page } from "../Domain/Cursor.ts"
import { isId, type TenantId, ToolId } from "../Domain/Ids.ts"
import { defaultPageSize } from "../Domain/Page.ts"
import { Conflict, invalidFields, NotFound } from "../Domain/Problems.ts"
import * as Traced from "../Observability/Traced.ts"
import { compileParameters } from "../Tools/JsonSchema.ts"
import { modelTools } from "../Tools/Mcp.ts"
import { ToolsRepo } from "../Tools/Repo.ts"
import { Webhooks } from "../Webhooks/Webhooks.ts"
import { Approval, type ApprovalStatus, type Decision } from "./Api.ts"
import { type ApprovalRequest, ApprovalsRepo, type DecisionWrite, type StoredApproval } from "./Repo.ts"
import { wake } from "./Wake.ts"

/**
 * Approvals (docs/approvals.md): the record of a call waiting for a person,
 * its events (`approval.requested`, `approval.decided`, `approval.expired`,
 * Standard Webhooks through the outbox, each written in the transaction of
 * what it reports) and the decision, which wakes the waiting run from any
 * node.
 */

const encodeApproval = Schema.encodeSync(Schema.toCodecJson(Approval))

/** What is wrong with edited arguments of a team's result: only `{ "result": "<text>" }`. */
const resultProblems = (args: unknown): ReadonlyArray<{ path: Array<string>; message: string }> => {
  const record = args as Record<string, unknown>
  const others = Object.keys(record).filter((key) => key !== "result")
  if (others.length > 0) {
    return others.map((key) => ({ path: ["arguments", key], message: "Expected only `result` for a team's result" }))
  }
  if (typeof record.result !== "string" || record.result.trim() === "") {
    return [{ path: ["arguments", "result"], message: "Expected the result to send, as non-empty text" }]
  }
  return []
}

/** How old an unwoken decision must be before the wake sweep wakes its run again, and how often it looks. */
export const wakeSweepAfter = Duration.seconds(5)
export const wakeSweepEvery = Duration.seconds(5)

const describeDecision = (approval: Approval) =>
  approval.status === "expired"
    ? `it expired at ${approval.expiresAt.toISOString()}`
    : approval.status === "cancelled"
      ? "its run ended first"
      : `it was ${approval.status} by ${approval.decidedBy ?? "unknown"} at ${approval.decidedAt?.toISOString() ?? ""}`

export class Approvals extends Context.Service<Approvals>()("agent-host/Approvals", {
  make: Effect.gen(function* () {
    const repo = yield* ApprovalsRepo
    const sql = yield* SqlClient.SqlClient
    const webhooks = yield* Webhooks
    const tools = yield* ToolsRepo

    const enqueue = (stored: StoredApproval, type: string) =>
      webhooks.enqueue({
        tenantId: stored.tenantId,
        owner: stored.owner,
        subjectId: stored.approval.runId,
        type,
        data: encodeApproval(stored.approval)
      })

    const deliver = (eventId: string | null) =>
      eventId === null ? Effect.void : Effect.forkDetach(webhooks.deliver(eventId))

    /**
     * Wakes the run awaiting the approval (its workflow's deferred), wherever
     * it runs, and records it woken. A wake that did not happen (this node
     * died, or the cluster refused it) is done again by the wake sweep.
     */
    const wakeRun = (stored: StoredApproval) =>
      wake(stored.approval.id, stored.wakeToken).pipe(
        Effect.andThen(repo.markWoken([stored.approval.id])),
        Effect.catchCause((cause) => Effect.logWarning("Could not wake a run for its approval", cause))
      )

    /**
     * The approval of a call, with its `approval.requested` event in the same
     * transaction: written once, whatever number of times the step asks
     * (a step run again after a crash finds the one it wrote).
     */
    const request = Traced.fn("Approvals.request")(function* (input: ApprovalRequest) {
      const written = yield* Effect.gen(function* () {
        const stored = yield* repo.request(input)
        if (stored.created) yield* repo.noteOnRun(stored, "approval.requested")
        const eventId = stored.created ? yield* enqueue(stored, "approval.requested") : null
        return { stored, eventId }
      }).pipe(sql.withTransaction)
      yield* deliver(written.eventId)
      return written.stored
    })

    const list = Traced.fn("Approvals.list")(function* (
      tenantId: TenantId,
      query: {
        readonly status?: ApprovalStatus | undefined
        readonly runId?: string | undefined
        readonly limit?: number | undefined
        readonly cursor?: string | undefined
      }
    ) {
      const after = yield* decodeCursor(query.cursor, isId)
      const limit = query.limit ?? defaultPageSize
      const page = yield* Effect.orDie(repo.list(tenantId, { status: query.status, runId: query.runId, after, limit }))
      return {
        data: page.rows.map((row) => row.approval),
        total: page.total,
        nextCursor: page.more ? encodeCursor(page.rows[page.rows.length - 1]!.approval.id) : null
      } satisfies Page<Approval>
    })

    const get = Traced.fn("Approvals.get")(function* (tenantId: TenantId, id: string) {
      const stored = yield* Effect.orDie(repo.findById(tenantId, id))
      if (stored === undefined) return yield* new NotFound({ detail: `No approval ${id}` })
      return stored.approval
    })

    /**
     * The problems of `args` as the arguments of the approval's tool (its
     * parameters, as the model saw them); for a team's result, `{ result }`.
     */
    const argumentProblems = (tenantId: TenantId, approval: Approval, args: unknown) =>
      Effect.gen(function* () {
        if (approval.kind === "result") return resultProblems(args)
        const tool =
          approval.toolId === null ? Option.none() : yield* tools.findById(tenantId, ToolId.make(approval.toolId))
        const seen = Option.isNone(tool)
          ? undefined
          : modelTools(tool.value).find((candidate) => candidate.name === approval.tool)
        if (seen === undefined) {
          return [
            {
              path: ["arguments"],
              message: `The tool ${approval.tool} no longer exists: its arguments cannot be checked`
            }
          ]
        }
        const validate = compileParameters(seen.parameters)
        if (Result.isFailure(validate)) {
          return [{ path: ["arguments"], message: `The tool ${approval.tool}'s parameters no longer compile` }]
        }
        return validate
          .success(args)
          .map((problem) => ({ path: ["arguments", ...problem.path], message: problem.message }))
      })

    /** Writes a decision (the first only: 409 naming it otherwise), its event, and wakes the run. */
    const finish = (id: string, write: DecisionWrite, type: string) =>
      Effect.gen(function* () {
        const written = yield* Effect.gen(function* () {
          const result = yield* repo.decide(id, write)
          if (result === undefined || !result.decided) return { result, eventId: null }
          yield* repo.noteOnRun(result, type)
          return { result, eventId: yield* enqueue(result, type) }
        }).pipe(sql.withTransaction, Effect.orDie)
        if (written.result === undefined) return undefined
        if (!written.result.decided) {
          // The statement's snapshot predates the decision that won (it waited on that row's lock): read it now.
          const current = yield* Effect.orDie(repo.byId(id))
          return current === undefined ? undefined : { ...current, decided: false }
        }
        yield* deliver(written.eventId)
        yield* wakeRun(written.result)
        return written.result
      })

    const decide = Traced.fn("Approvals.decide")(function* (principal: Principal, id: string, decision: Decision) {
      const approval = yield* get(principal.tenantId, id)
      if (approval.status !== "pending") {
        return yield* new Conflict({ detail: `The approval was already decided: ${describeDecision(approval)}` })
      }
      if (decision.arguments !== undefined) {
        if (decision.decision === "reject") {
          return yield* invalidFields([{ path: ["arguments"], message: "Expected no arguments with a rejection" }])
        }
        const problems = yield* Effect.orDie(argumentProblems(principal.tenantId, approval, decision.arguments))
        if (problems.length > 0) return yield* invalidFields(problems)
      }
      const result = yield* finish(
        id,
        {
          status: decision.decision === "approve" ? "approved" : "rejected",
          decidedBy: principal._tag === "Session" ? `user:${principal.userId}` : `key:${principal.keyId}`,
          note: decision.note ?? null,
          editedArguments: decision.arguments ?? null
        },
        "approval.decided"
      )
      if (result === undefined) return yield* new NotFound({ detail: `No approval ${id}` })
      if (!result.decided) {
        return yield* new Conflict({ detail: `The approval was already decided: ${describeDecision(result.approval)}` })
      }
      return result.approval
    })

    /**
     * Nobody decided in time: the approval becomes what its `onExpiry` says
     * (approved by `expiry`, or `expired`), unless a decision got there
     * first. The approval as it then is.
     */
    const expire = Traced.fn("Approvals.expire")(function* (id: string) {
      const stored = yield* Effect.orDie(repo.byId(id))
      if (stored === undefined || stored.approval.status !== "pending") return stored?.approval
      const result = yield* finish(
        id,
        {
          status: stored.approval.onExpiry === "approve" ? "approved" : "expired",
          decidedBy: "expiry",
          note: null,
          editedArguments: null
        },
        "approval.expired"
      )
      return result?.approval
    })

    /** An approval by id, whatever its tenant (the run's own read). */
    const forId = (id: string) => Effect.map(Effect.orDie(repo.byId(id)), (stored) => stored?.approval)

    /** The approval of one call of a run, if it was asked for. */
    const forCall = (runId: string, scope: string, callId: string) =>
      Effect.map(Effect.orDie(repo.forCall(runId, scope, callId)), (stored) => stored?.approval)

    /** The run ended (cancelled, timed out, failed): its pending approvals are cancelled. */
    const cancelRun = (runId: string) =>
      Effect.gen(function* () {
        const cancelled = yield* Effect.orDie(repo.cancelRun(runId))
        // A run cancelled while it waited is woken, to end at once rather than at its approval's expiry.
        yield* Effect.forEach(
          cancelled,
          (one) =>
            wake(one.id, one.wakeToken).pipe(
              Effect.catchCause((cause) => Effect.logWarning("Could not wake a run for its approval", cause))
            ),
          { discard: true }
        )
        return cancelled.map((one) => one.id)
      })

    return { request, list, get, decide, expire, forId, forCall, cancelRun } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make).pipe(Layer.provide([ApprovalsRepo.layer, ToolsRepo.layer]))

  /**
   * A decision is written, then its run's deferred completed: a node that
   * dies in between leaves the run asleep until its approval's expiry. Every
   * `wakeSweepEvery`, decisions over `wakeSweepAfter` old whose run was not
   * seen woken have their deferreds completed again (a deferred completed
   * twice keeps its first completion: effect stores one per name, so a run
   * already woken is not woken twice). Those of runs that ended are only
   * marked. A cluster singleton: one node sweeps, another takes over.
   */
  static readonly wakeSweeper = Singleton.make(
    "ApprovalsWakeSweep",
    Effect.gen(function* () {
      const repo = yield* ApprovalsRepo
      const sweep = Effect.gen(function* () {
        const rows = yield* repo.unwoken(Duration.toSeconds(wakeSweepAfter), 200)
        if (rows.length === 0) return
        yield* repo.markWoken(rows.filter((row) => !row.running).map((row) => row.id))
        const asleep = rows.filter((row) => row.running)
        if (asleep.length === 0) return
        yield* Effect.logWarning("Decided approvals whose runs were not woken; waking them").pipe(
          Effect.annotateLogs({ count: asleep.length })
        )
        yield* Effect.forEach(
          asleep,
          (row) =>
            wake(row.id, row.wakeToken).pipe(
              Effect.andThen(repo.markWoken([row.id])),
              Effect.catchCause((cause) =>
                Effect.logWarning("Could not wake a run for its approval; the next sweep tries again", cause).pipe(
                  Effect.annotateLogs({ approvalId: row.id })
                )
              )
            ),
          { discard: true, concurrency: 10 }
        )
      })
      yield* sweep.pipe(
        Effect.catchCause((cause) => Effect.logWarning("Approval wake sweep failed", cause)),
        Effect.repeat(Schedule.spaced(wakeSweepEvery))
      )
    })
  ).pipe(Layer.provide(ApprovalsRepo.layer))
}
