import { useState } from "react"
import type { CallStatus } from "../../../src/Tools/ToolCall.ts"
import { ProblemMessage } from "../shared/components.tsx"

/**
 * A tool call as far as it is known. A stored record (an execution's, a team
 * turn's) has every field; a chat's call is built from its streamed events,
 * so its arguments come first and its result or error later.
 */
export interface ToolCallView {
  readonly callId: string
  readonly tool: string
  readonly status: CallStatus
  readonly arguments?: unknown
  readonly result?: string | null
  readonly resultCut?: boolean
  readonly error?: string | null
  readonly errorKind?: string | null
  readonly attempts?: number
  readonly durationMs?: number | null
}

const statusClass = { running: "running", succeeded: "completed", failed: "failed", cancelled: "cancelled" } as const

const argumentsText = (args: unknown) => (typeof args === "string" ? args : JSON.stringify(args, null, 2))

const ToolCallItem = <C extends ToolCallView>({
  call,
  wholeResult
}: {
  readonly call: C
  readonly wholeResult: ((call: C) => Promise<string | null>) | undefined
}) => {
  const [whole, setWhole] = useState<string | null>()
  const [loading, setLoading] = useState(false)
  const [problem, setProblem] = useState<unknown>()
  const showWhole = async () => {
    if (wholeResult === undefined) return
    setLoading(true)
    setProblem(undefined)
    try {
      setWhole(await wholeResult(call))
    } catch (error) {
      setProblem(error)
    } finally {
      setLoading(false)
    }
  }
  const result = whole ?? call.result
  return (
    <li className="tool-call" data-testid="tool-call" data-tool={call.tool} data-status={call.status}>
      <p className="tool-call-head">
        <code>{call.tool}</code> <span className={`status status-${statusClass[call.status]}`}>{call.status}</span>
        {call.durationMs !== undefined && call.durationMs !== null && (
          <span className="muted" data-testid="tool-call-duration">
            {" "}
            · {call.durationMs} ms
          </span>
        )}
        {call.attempts !== undefined && call.attempts > 1 && <span className="muted"> · {call.attempts} attempts</span>}
      </p>
      {call.arguments !== undefined && (
        <>
          <p className="muted meta">Arguments</p>
          <pre tabIndex={0} className="tool-call-data" data-testid="tool-call-arguments">
            {argumentsText(call.arguments)}
          </pre>
        </>
      )}
      {call.error !== undefined && call.error !== null && (
        <p className="field-error" data-testid="tool-call-error">
          {call.errorKind ? `${call.errorKind}: ` : ""}
          {call.error}
        </p>
      )}
      {result !== undefined && result !== null && (
        <>
          <p className="muted meta">
            {whole !== undefined ? "The whole result" : "Result, as the model saw it"}
            {call.resultCut && whole === undefined && " (cut)"}
          </p>
          <pre tabIndex={0} className="tool-call-data" data-testid="tool-call-result">
            {result}
          </pre>
        </>
      )}
      {call.resultCut && wholeResult !== undefined && whole === undefined && (
        <button type="button" className="secondary" onClick={showWhole} disabled={loading}>
          {loading ? "Loading the whole result…" : "Show whole result"}
        </button>
      )}
      <ProblemMessage problem={problem} />
    </li>
  )
}

/**
 * The tool calls of a chat reply, an execution's step or a team turn, in the
 * order the model asked for them: each one's tool, status, duration and
 * attempts, its arguments, and its result as the model saw it or its error.
 * `wholeResult` reads a cut result whole (where the API keeps it).
 */
export const ToolCalls = <C extends ToolCallView>({
  calls,
  wholeResult
}: {
  readonly calls: ReadonlyArray<C> | undefined
  readonly wholeResult?: (call: C) => Promise<string | null>
}) =>
  calls === undefined || calls.length === 0 ? null : (
    <div className="tool-calls" data-testid="tool-calls">
      <p className="muted meta">
        {calls.length} tool call{calls.length === 1 ? "" : "s"}
      </p>
      <ol>
        {calls.map((c) => (
          <ToolCallItem key={c.callId} call={c} wholeResult={wholeResult} />
        ))}
      </ol>
    </div>
  )
