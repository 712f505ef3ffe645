import * as Schema from "effect/Schema"
import { text } from "./Input.ts"

/**
 * A run (an execution, a team run) waiting for one of its tenant's running
 * slots (FREE_MAX_RUNNING_RUNS...): it stays `pending`, and says why.
 */
export const RunWaiting = Schema.Struct({
  reason: Schema.Literal("tenant_concurrency").annotate({
    description: "The tenant has as many executions and team runs running as its plan allows."
  }),
  ahead: Schema.Int.annotate({ description: "The tenant's runs waiting before this one (they start in order)." }),
  limit: Schema.Int.annotate({ description: "Executions and team runs the plan lets run at once." })
}).annotate({ description: "Present while the run waits for a slot: it starts once one frees." })
export type RunWaiting = typeof RunWaiting.Type

/** The `Prefer` header of the routes that start runs (RFC 7240); `wait=0` asks not to be queued. */
export const PreferHeader = Schema.optionalKey(
  text(Schema.isMaxLength(200)).annotate({
    description:
      "`wait=0`: if the tenant's runs are at the plan's cap, answer 429 (with Retry-After) rather than " +
      "queue the run. Other preferences are ignored."
  })
)

/** Whether a `Prefer` header says `wait=0`. */
export const asksNotToWait = (prefer: string | undefined): boolean =>
  prefer !== undefined && prefer.split(/[,;]/).some((token) => /^\s*wait\s*=\s*"?0"?\s*$/i.test(token))
