import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Metric from "effect/Metric"
import * as Result from "effect/Result"
import type { ChatMessage, ModelReply, ResponseFormat, ToolCall, ToolChoice, ToolSpec } from "../Models/Models.ts"
import { Metrics } from "../Observability/Observability.ts"
import { type CallEnd, type LoopKey, type LoopState, type ToolCallRecord, ToolCallsRepo } from "./CallsRepo.ts"
import { type CallContext, type CallOutcome, ToolInvoker } from "./Invoke.ts"
import { compile, type Problem, type Validate } from "./JsonSchema.ts"
import { modelTools } from "./Mcp.ts"
import { needsApproval, type Tool } from "./Tool.ts"

/**
 * The tool loop (docs/tool-calls.md): the model is asked, the calls it
 * asks for are made, their results go back to it, until it answers without
 * calls. Every bound ends the loop cleanly: past `maxToolCallsPerTurn` calls,
 * or after too many calls with invalid arguments, the tools are withdrawn and
 * the model is asked once more, for its answer (`toolChoice: "none"`); a
 * tool's `maxCallsPerRun` refuses its further calls with a tool error; the
 * token budget and the run's timeout are the caller's (`callModel`, and the
 * timeout around the loop).
 *
 * In a durable loop (an execution's step, a team member's turn) each reply
 * of the model and each call is kept as it happens (ToolCallsRepo): run again
 * after a crash, the loop replays the kept replies and the calls that ended
 * instead of asking or calling again, and makes a call that was in flight
 * again with the same Idempotency-Key.
 */

/** Calls one loop may make before its tools are withdrawn. */
export const defaultMaxToolCallsPerTurn = 8
/** Calls with invalid arguments (or to no tool) one loop tolerates before its tools are withdrawn. */
export const maxInvalidCalls = 3
/** Calls of one model turn made at once. */
export const callConcurrency = 4

export type ToolEventType = "tool.called" | "tool.succeeded" | "tool.failed"

/** What a run's event stream says of a call. */
export interface ToolEvent {
  readonly type: ToolEventType
  readonly scope: string
  readonly callId: string
  readonly tool: string
  readonly data: Record<string, unknown>
}

/** One model call of a loop, without its model and ceiling: the caller's. */
export interface LoopModelRequest {
  readonly system: string
  readonly messages: ReadonlyArray<ChatMessage>
  readonly tools: ReadonlyArray<ToolSpec> | undefined
  readonly toolChoice: ToolChoice | undefined
  readonly responseFormat?: ResponseFormat | undefined
}

/**
 * The tokens a loop's model call may be counted for its prompt (its
 * reservation): the system prompt, every message with the calls' arguments,
 * and the tools' definitions.
 */
export const requestTokens = (
  models: {
    readonly countTokens: (text: string) => number
    readonly promptEstimate: (model: string, tokens: number, messages: number) => number
  },
  model: string,
  request: LoopModelRequest
): number => {
  let tokens = systemTokens(models, request.system)
  for (const message of request.messages) tokens += counted(models, message)
  for (const tool of request.tools ?? []) tokens += counted(models, tool)
  return models.promptEstimate(model, tokens, request.messages.length + (request.system === "" ? 0 : 1))
}

// A loop asks the model again with the same messages and tools plus the calls' results, and an agent's
// system prompt is the same from one request to the next: each is counted once.
const countedParts = new WeakMap<ChatMessage | ToolSpec, number>()
const counted = (models: { readonly countTokens: (text: string) => number }, part: ChatMessage | ToolSpec) => {
  let tokens = countedParts.get(part)
  if (tokens === undefined) {
    if ("role" in part) {
      tokens = models.countTokens(part.content)
      if (part.role === "assistant" && part.toolCalls !== undefined) {
        for (const call of part.toolCalls) tokens += models.countTokens(call.name + JSON.stringify(call.arguments))
      }
    } else tokens = models.countTokens(part.name + part.description + JSON.stringify(part.parameters))
    countedParts.set(part, tokens)
  }
  return tokens
}
const systemPrompts = new Map<string, number>()
const systemTokens = (models: { readonly countTokens: (text: string) => number }, system: string) => {
  let tokens = systemPrompts.get(system)
  if (tokens === undefined) {
    if (systemPrompts.size >= 256) systemPrompts.clear()
    systemPrompts.set(system, (tokens = models.countTokens(system)))
  }
  return tokens
}

/** Where a call that waits for a person's approval stands (docs/approvals.md). */
export interface ApprovalState {
  readonly id: string
  readonly status: "pending" | "approved" | "rejected" | "expired" | "cancelled"
  /** The arguments to make the call with instead of the model's, when the approver changed them. */
  readonly editedArguments: unknown
  readonly note: string | null
}

/** How a durable loop asks for approvals and reads their decisions (the run's). */
export interface LoopApprovals {
  readonly decisionOf: (callId: string) => Effect.Effect<ApprovalState | undefined>
  /** Writes the call's approval (once: a second request gives the first). */
  readonly request: (call: ToolCall, tool: Tool, reason: string | null) => Effect.Effect<ApprovalState>
}

export interface LoopInput<E, R> {
  readonly key: LoopKey
  /** Replay what a run of this loop kept before (executions and team runs); a chat turn is not replayed. */
  readonly durable: boolean
  readonly system: string
  readonly messages: ReadonlyArray<ChatMessage>
  /** The tools offered, active and the tenant's. */
  readonly tools: ReadonlyArray<Tool>
  /** Ids of the agents asking, outermost first, this loop's agent last. */
  readonly agentChain: ReadonlyArray<string>
  readonly askAgent?: CallContext["askAgent"]
  /** One model call, under the caller's token reservation. */
  readonly callModel: (request: LoopModelRequest) => Effect.Effect<ModelReply, E, R>
  readonly emit?: ((event: ToolEvent) => Effect.Effect<void>) | undefined
  readonly maxToolCallsPerTurn?: number | undefined
  /**
   * The answer must be JSON matching this schema: one that does not is
   * asked for again once, with what was wrong; a second miss ends the loop
   * with `invalidOutput`.
   */
  readonly responseFormat?: ResponseFormat | undefined
  /**
   * What tells this loop's calls from those of the run's other loops in
   * their Idempotency-Key (CallContext.scope): by default a durable loop's
   * scope (a step id, a team turn); none for a chat turn, a run of its own.
   */
  readonly idempotencyScope?: string | undefined
  /**
   * Approvals: a call whose tool's policy asks for one is made only once a
   * person approved it. Without them (a chat turn), such a call is refused
   * with a tool error.
   */
  readonly approvals?: LoopApprovals | undefined
}

export interface LoopOutcome {
  /** The model's answer: its last reply, which asked for no calls (or whose calls were not made). */
  readonly reply: ModelReply
  /** Tokens of every model turn of the loop. */
  readonly tokens: number
  /** The calls made (or refused), in order. */
  readonly calls: ReadonlyArray<ToolCallRecord>
  /** The bound that withdrew the tools, if one did. */
  readonly stopped: string | undefined
  /** With a response format: what was wrong with the answer, asked for twice (none: it matched). */
  readonly invalidOutput?: ReadonlyArray<Problem> | undefined
  /**
   * The approvals the loop stopped for: none of its last turn's calls was
   * made. The loop is to be run again once they are decided; it replays what
   * it kept and goes on from there.
   */
  readonly waitingFor?: ReadonlyArray<string> | undefined
}

/** What is wrong with `text` as a reply in `format`: not JSON, or where it does not match the schema. */
export const outputProblems = (format: ResponseFormat, text: string): ReadonlyArray<Problem> => {
  let value: unknown
  try {
    value = JSON.parse(text)
  } catch {
    return [{ path: [], message: "The reply is not JSON" }]
  }
  return Result.match(compileCached(format.schema), {
    onSuccess: (validate) => validate(value),
    onFailure: (problems) => problems.map((problem) => ({ ...problem, message: `The schema: ${problem.message}` }))
  })
}

// Compiled schemas by their JSON: an agent's or step's format is the same on every call.
const compiled = new Map<string, Result.Result<Validate, ReadonlyArray<Problem>>>()
const compileCached = (schema: { readonly [key: string]: unknown }) => {
  const key = JSON.stringify(schema)
  let found = compiled.get(key)
  if (found === undefined) {
    if (compiled.size >= 1_000) compiled.clear()
    compiled.set(key, (found = compile(schema)))
  }
  return found
}

/** Problems as one line each, for the model and for the 422. */
export const describeProblems = (problems: ReadonlyArray<Problem>) =>
  problems
    .map((problem) => `${problem.path.length === 0 ? "(root)" : `/${problem.path.join("/")}`}: ${problem.message}`)
    .join("; ")

const encoder = new TextEncoder()
const decoder = new TextDecoder()

/** `text` cut to at most `maxBytes` bytes of UTF-8 (never inside a character), with a marker saying so. */
export const cutTo = (text: string, maxBytes: number): { readonly text: string; readonly cut: boolean } => {
  const bytes = encoder.encode(text)
  if (bytes.length <= maxBytes) return { text, cut: false }
  let end = maxBytes
  // Back to the start of a character: continuation bytes are 10xxxxxx.
  while (end > 0 && (bytes[end]! & 0xc0) === 0x80) end--
  return {
    text: `${decoder.decode(bytes.subarray(0, end))}\n[cut: the first ${end} of ${bytes.length} bytes]`,
    cut: true
  }
}

// One spec per tool as read (tools are cached as read): its tokens are counted once, its model tool made once.
const specs = new WeakMap<Tool, ToolSpec>()
const specOf = (tool: Tool): ToolSpec => {
  let spec = specs.get(tool)
  if (spec === undefined) {
    spec = { name: tool.name, description: tool.description, parameters: tool.parameters }
    specs.set(tool, spec)
  }
  return spec
}

const refusedOutcome = (errorKind: string, output: string): CallOutcome => ({
  ok: false,
  errorKind,
  output,
  durationMs: 0,
  exchange: undefined
})

/** What the model is told of a call a person did not approve. */
const notApproved = (decision: ApprovalState): CallOutcome =>
  refusedOutcome(
    "rejected",
    decision.status === "rejected"
      ? `Not made: a person rejected this call${decision.note === null || decision.note === "" ? "" : `: ${decision.note}`}. Do without it or find another way.`
      : decision.status === "expired"
        ? "Not made: nobody approved this call in time. Do without it or find another way."
        : "Not made: its approval was cancelled."
  )

export class ToolLoop extends Context.Service<ToolLoop>()("agent-host/ToolLoop", {
  make: Effect.gen(function* () {
    const repo = yield* ToolCallsRepo
    const invoker = yield* ToolInvoker

    const run = <E, R>(input: LoopInput<E, R>): Effect.Effect<LoopOutcome, E, R> =>
      Effect.gen(function* () {
        const { key } = input
        // An mcp tool is one model tool per exposed server tool (Mcp.ts).
        const tools = input.tools.flatMap(modelTools)
        const byName = new Map(tools.map((tool) => [tool.name, tool]))
        const offered = tools.length === 0 ? undefined : tools.map(specOf)
        const maxCalls = input.maxToolCallsPerTurn ?? defaultMaxToolCallsPerTurn
        const idempotencyScope = input.idempotencyScope ?? (input.durable ? key.scope : undefined)
        const emit = input.emit ?? (() => Effect.void)
        const messages: Array<ChatMessage> = [...input.messages]
        const calls: Array<ToolCallRecord> = []
        // Calls of each tool this loop made (or replays), for its maxCallsPerRun.
        const admitted = new Map<string, number>()
        const admit = (name: string) => admitted.set(name, (admitted.get(name) ?? 0) + 1)
        let tokens = 0
        let asked = 0
        let invalid = 0
        let stopped: string | undefined
        let retriedOutput = false
        // What an earlier run of this loop kept, read once (nothing to read without tools).
        let state: LoopState | undefined =
          input.durable && offered !== undefined ? yield* Effect.orDie(repo.loadState(key)) : undefined

        /**
         * Makes (or refuses, as `plan` says) one call; its record. A call's
         * fate is decided before the turn's calls run at once (`decide`), so
         * that calls of one tool in the same turn cannot pass its bound.
         */
        const oneCall = (
          call: ToolCall,
          turn: number,
          seq: number,
          tool: Tool | undefined,
          refusal: CallOutcome | undefined
        ) =>
          Effect.gen(function* () {
            const started = {
              callId: call.id,
              turn,
              seq,
              toolId: tool?.id ?? null,
              toolName: call.name,
              arguments: call.arguments
            }
            // Only a durable run's call is kept as running while it is made: that is what is made again after a
            // crash. A refused call, or a chat turn's, is written once, when it has ended.
            const inFlight = input.durable && refusal === undefined
            const attempts = inFlight ? yield* Effect.orDie(repo.startCall(key, started)) : 1
            yield* emit({
              type: "tool.called",
              scope: key.scope,
              callId: call.id,
              tool: call.name,
              data: { arguments: call.arguments, attempt: attempts }
            })
            const startedAt = Date.now()
            const outcome =
              refusal ??
              (yield* invoke(tool!, call).pipe(
                // A chat turn is not replayed: a call it stopped (the client went away) ended there.
                // A durable run's call stays running, to be made again where the run resumes.
                Effect.onInterrupt(() =>
                  input.durable
                    ? Effect.void
                    : Effect.ignore(
                        repo.recordCall(
                          key,
                          { ...started, startedAt: new Date(startedAt) },
                          {
                            status: "cancelled",
                            result: null,
                            fullResult: null,
                            error: "Cancelled",
                            errorKind: "cancelled",
                            durationMs: Date.now() - startedAt
                          }
                        )
                      )
                )
              ))
            if (outcome.errorKind === "invalid_arguments" || outcome.errorKind === "unknown_tool") invalid++
            const shown = cutTo(outcome.output, tool?.policy.maxOutputBytes ?? 16_384)
            const end: CallEnd = {
              status: outcome.ok ? "succeeded" : "failed",
              result: outcome.ok ? shown.text : null,
              fullResult: outcome.ok && shown.cut ? outcome.output : null,
              error: outcome.ok ? null : shown.text,
              errorKind: outcome.ok ? null : (outcome.errorKind ?? "error"),
              durationMs: refusal === undefined ? outcome.durationMs : Date.now() - startedAt
            }
            yield* Effect.orDie(
              inFlight
                ? repo.finishCall(key, call.id, end)
                : repo.recordCall(key, { ...started, startedAt: new Date(startedAt) }, end)
            )
            const record: ToolCallRecord = {
              callId: call.id,
              tool: call.name,
              toolId: tool?.id ?? null,
              arguments: call.arguments,
              status: end.status,
              result: end.result,
              resultCut: shown.cut && outcome.ok,
              error: end.error,
              errorKind: end.errorKind,
              attempts,
              durationMs: Math.round(end.durationMs),
              startedAt: new Date(startedAt),
              scope: key.scope,
              turn
            }
            yield* emit({
              type: outcome.ok ? "tool.succeeded" : "tool.failed",
              scope: key.scope,
              callId: call.id,
              tool: call.name,
              data: outcome.ok
                ? { durationMs: record.durationMs, result: end.result }
                : { durationMs: record.durationMs, error: end.error, errorKind: end.errorKind }
            })
            return record
          })

        /** Why a call is not made, if it is not: no such tool, the loop's or the tool's bound reached. */
        const refusalOf = (call: ToolCall, tool: Tool | undefined, position: number): CallOutcome | undefined => {
          if (tool === undefined) {
            const names = [...byName.keys()].join(", ")
            return refusedOutcome(
              "unknown_tool",
              `There is no tool named ${JSON.stringify(call.name)}${names === "" ? "" : `; the tools are: ${names}`}`
            )
          }
          if (position >= maxCalls) {
            return refusedOutcome(
              "limit",
              `Not made: this turn may make at most ${maxCalls} tool calls (maxToolCallsPerTurn); answer with what you have`
            )
          }
          // This loop's own calls, and (in a run) those of the run's other steps or turns.
          const elsewhere = state?.elsewhere.get(call.name) ?? 0
          if (elsewhere + (admitted.get(call.name) ?? 0) >= tool.policy.maxCallsPerRun) {
            return refusedOutcome(
              "limit",
              `Not made: ${tool.name} may be called at most ${tool.policy.maxCallsPerRun} times in a run (maxCallsPerRun)`
            )
          }
          return undefined
        }

        // The call's `execute_tool` span is the invoker's.
        const invoke = (tool: Tool, call: ToolCall) =>
          invoker
            .invoke(tool, call.arguments, {
              tenantId: key.tenantId,
              runId: key.runId,
              callId: call.id,
              scope: idempotencyScope,
              agentChain: input.agentChain,
              askAgent: input.askAgent
            })
            .pipe(
              Effect.tap((outcome) => {
                const result = outcome.ok ? "ok" : "error"
                return Effect.all([
                  Metric.update(Metrics.toolCalls(tool.kind, result), 1),
                  Metric.update(Metrics.toolDuration(tool.kind, result), outcome.durationMs / 1000)
                ])
              })
            )

        for (let turn = 0; ; turn++) {
          const toolChoice: ToolChoice | undefined = offered === undefined ? undefined : stopped ? "none" : "auto"
          const kept = state?.turns.get(turn)
          let reply: ModelReply
          if (kept !== undefined) reply = kept
          else {
            reply = yield* input.callModel({
              system: input.system,
              messages,
              tools: offered,
              toolChoice,
              ...(input.responseFormat === undefined ? {} : { responseFormat: input.responseFormat })
            })
            // Only a reply whose calls will be made is kept: one without calls has no effect to protect, and
            // asked again after a crash, the model answers again.
            if (state !== undefined && reply.toolCalls.length > 0 && stopped === undefined) {
              const saved = yield* Effect.orDie(repo.saveTurn(key, turn, reply))
              reply = saved.reply
              // Another attempt of this loop got here first (two nodes briefly ran the same step): its calls
              // may have ended meanwhile, and are replayed rather than made again.
              if (!saved.first) state = yield* Effect.orDie(repo.loadState(key))
            }
          }
          tokens += reply.inputTokens + reply.outputTokens
          if (reply.toolCalls.length === 0 || stopped !== undefined || offered === undefined) {
            const format = input.responseFormat
            const problems = format === undefined ? [] : outputProblems(format, reply.text)
            if (problems.length === 0) return { reply, tokens, calls, stopped } satisfies LoopOutcome
            if (retriedOutput) return { reply, tokens, calls, stopped, invalidOutput: problems } satisfies LoopOutcome
            // Asked once more, told what was wrong.
            retriedOutput = true
            messages.push(
              { role: "assistant", content: reply.text },
              {
                role: "user",
                content:
                  `Your reply does not match the JSON Schema "${format!.name}": ${describeProblems(problems)}. ` +
                  "Reply again with only the JSON."
              }
            )
            continue
          }
          messages.push({ role: "assistant", content: reply.text, toolCalls: reply.toolCalls })
          const seqBase = asked
          asked += reply.toolCalls.length
          // Calls that wait for a person's decision: none of the turn's calls is made until each of them is
          // decided, and the loop ends waiting for them, to be run again then.
          const decisions = new Map<string, ApprovalState>()
          if (input.approvals !== undefined) {
            const waitingFor: Array<string> = []
            for (const [i, call] of reply.toolCalls.entries()) {
              const record = state?.calls.get(call.id)
              if (record !== undefined && record.status !== "running") continue
              const tool = byName.get(call.name)
              if (tool === undefined || !needsApproval(tool.policy, call.arguments)) continue
              if (refusalOf(call, tool, seqBase + i) !== undefined) continue
              const known = yield* input.approvals.decisionOf(call.id)
              // Arguments the invoker would refuse are not put to a person: the call is made at once, and fails
              // as it would after an approval. A decision asked for before (by an older version) stands.
              if (known === undefined && invoker.refusesArguments(tool, call.arguments)) continue
              const decision =
                known ?? (yield* input.approvals.request(call, tool, reply.text.trim() === "" ? null : reply.text))
              if (decision.status === "pending") waitingFor.push(decision.id)
              else decisions.set(call.id, decision)
            }
            if (waitingFor.length > 0) return { reply, tokens, calls, stopped, waitingFor } satisfies LoopOutcome
          }
          // In order: each call replayed (one that ended before a crash), refused, or to be made.
          const decided: Array<Effect.Effect<ToolCallRecord>> = []
          for (const [i, call] of reply.toolCalls.entries()) {
            const record = state?.calls.get(call.id)
            if (record !== undefined && record.status !== "running") {
              if (record.errorKind === "invalid_arguments" || record.errorKind === "unknown_tool") invalid++
              if (record.errorKind !== "limit" && record.errorKind !== "unknown_tool") admit(call.name)
              decided.push(Effect.succeed(record))
              continue
            }
            const tool = byName.get(call.name)
            const decision = decisions.get(call.id)
            const refusal =
              decision !== undefined && decision.status !== "approved"
                ? notApproved(decision)
                : decision === undefined &&
                    input.approvals === undefined &&
                    tool !== undefined &&
                    needsApproval(tool.policy, call.arguments) &&
                    !invoker.refusesArguments(tool, call.arguments)
                  ? refusedOutcome(
                      "approval_required",
                      "Not made: this call needs a person's approval, which a chat cannot wait for"
                    )
                  : refusalOf(call, tool, seqBase + i)
            if (refusal === undefined) admit(call.name)
            // Approved with other arguments: the call is made, and recorded, with those.
            const edited = decision?.status === "approved" ? decision.editedArguments : undefined
            const made =
              edited === null || edited === undefined ? call : { ...call, arguments: edited as ToolCall["arguments"] }
            decided.push(oneCall(made, turn, seqBase + i, tool, refusal))
          }
          const records = yield* Effect.all(decided, { concurrency: callConcurrency })
          calls.push(...records)
          records.forEach((record) => {
            messages.push({
              role: "tool",
              callId: record.callId,
              name: record.tool,
              content: (record.status === "succeeded" ? record.result : record.error) ?? "",
              isError: record.status !== "succeeded"
            })
          })
          if (asked >= maxCalls) stopped = `maxToolCallsPerTurn (${maxCalls}) reached`
          else if (invalid >= maxInvalidCalls) stopped = `${maxInvalidCalls} calls with invalid arguments`
        }
      })

    return { run } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make).pipe(Layer.provide([ToolCallsRepo.layer, ToolInvoker.layer]))
}
