import { useState } from "react"
import { OrchestrationId } from "../../../src/Domain/Ids.ts"
import type { Execution } from "../../../src/Orchestrations/Api.ts"
import { navigate, type Route, withQuery } from "../router.tsx"
import { ApiProblem } from "../shared/api.ts"
import { ApiCall, Confirm, Field, formatDate, LoadMore, ProblemMessage } from "../shared/components.tsx"
import { queryId } from "../shared/ids.ts"
import { ToolCalls } from "../tools/ToolCalls.tsx"
import { finalStatuses, toPayload, useExecutionToolCalls, useLiveExecution, useOrchestrations } from "./hooks.ts"

/** An execution's tool calls, under the step that made them. */
const StepToolCalls = ({ executionId, version }: { readonly executionId: string; readonly version: unknown }) => {
  const { loaded, steps, problem, wholeResult } = useExecutionToolCalls(executionId, version)
  if (problem !== undefined) return <ProblemMessage problem={problem} />
  if (!loaded || steps.length === 0) return null
  return (
    <>
      <h4>Tool calls</h4>
      {steps.map(([stepId, calls]) => (
        <section key={stepId} className="step-calls" data-testid={`step-calls-${stepId}`} aria-label={`Step ${stepId}`}>
          <p>
            Step <code>{stepId}</code>
            {calls.some((c) => c.carried) && <span className="muted"> (carried from the execution retried)</span>}
          </p>
          <ToolCalls calls={calls} wholeResult={wholeResult} />
        </section>
      ))}
    </>
  )
}

const retriable = new Set(["failed", "cancelled"])

const ExecutionRow = ({
  initial,
  selected,
  route,
  onFinal,
  onRetried
}: {
  readonly initial: Execution
  readonly selected: boolean
  readonly route: Route
  readonly onFinal: () => void
  readonly onRetried: () => void
}) => {
  const { execution, log, cancel, retry, callEvents } = useLiveExecution(initial, onFinal)
  const [retryProblem, setRetryProblem] = useState<unknown>()
  const retryNow = () => {
    setRetryProblem(undefined)
    retry().then((id) => {
      navigate(withQuery(route, { execution: id }))
      onRetried()
    }, setRetryProblem)
  }
  return (
    <li className="execution" data-testid="execution" data-status={execution.status}>
      <a
        href={`/app${withQuery(route, { execution: execution.id })}`}
        aria-current={selected ? "true" : undefined}
        onClick={(e) => {
          e.preventDefault()
          navigate(withQuery(route, { execution: selected ? null : execution.id }))
        }}
      >
        <span className={`status status-${execution.status}`}>{execution.status}</span>{" "}
        {formatDate(execution.createdAt)}
      </a>
      {selected && (
        <div className="detail">
          {execution.output !== null && (
            <>
              <h4>Output</h4>
              <pre tabIndex={0} data-testid="execution-output">
                {execution.output}
              </pre>
            </>
          )}
          {execution.error !== null && <p className="field-error">{execution.error}</p>}
          {execution.retryOf !== undefined && (
            <p className="muted" data-testid="execution-retry-of">
              Retry of{" "}
              <a
                href={`/app${withQuery(route, { execution: execution.retryOf })}`}
                onClick={(e) => {
                  e.preventDefault()
                  navigate(withQuery(route, { execution: execution.retryOf ?? null }))
                }}
              >
                <code>{execution.retryOf}</code>
              </a>
              {execution.carriedSteps !== undefined && execution.carriedSteps.length > 0 && (
                <>
                  ; carried over, not run again: {execution.carriedSteps.join(", ")} ({execution.carriedTokens ?? 0}{" "}
                  tokens, counted there)
                </>
              )}
            </p>
          )}
          <p className="muted">
            {execution.tokensUsed} tokens{execution.durationMs !== null && `, ${execution.durationMs} ms`}
          </p>
          {log.length > 0 && <p className="muted">Events: {log.join(" → ")}</p>}
          <StepToolCalls executionId={execution.id} version={`${callEvents}:${execution.status}`} />
          {!finalStatuses.has(execution.status) && (
            <button type="button" className="danger" onClick={cancel}>
              Cancel
            </button>
          )}
          {retriable.has(execution.status) && (
            <button type="button" onClick={retryNow}>
              Retry
            </button>
          )}
          {retryProblem !== undefined && <ProblemMessage problem={retryProblem} />}
          <ApiCall
            call={{ method: "GET", path: `/api/v1/executions/${execution.id}/events`, credential: "key" }}
            title="Follow it with an API key"
          />
        </div>
      )}
    </li>
  )
}

/** Orchestrations: the list, a step editor whose errors land on their step, execute, and the executions followed live. */
export const OrchestrationsScreen = ({ route }: { readonly route: Route }) => {
  const selected = queryId(route, "orchestration", OrchestrationId)
  const executionId = route.query.get("execution")
  const {
    list,
    agents,
    current,
    executions,
    draft,
    setDraft,
    setStep,
    addStep,
    removeStep,
    save,
    saved,
    problem,
    stepErrors,
    fieldError,
    generalErrors,
    remove,
    run
  } = useOrchestrations(route, selected)
  const [deleting, setDeleting] = useState(false)

  return (
    <>
      <h1>Orchestrations</h1>
      <div className="split">
        <section aria-labelledby="orchestrations-list">
          <h2 id="orchestrations-list">Your orchestrations</h2>
          <button
            type="button"
            className="secondary"
            onClick={() => navigate(withQuery(route, { orchestration: null, execution: null }))}
          >
            New orchestration
          </button>
          {list.items && list.items.length === 0 && <p>None yet.</p>}
          <ul className="list">
            {list.items?.map((o) => (
              <li key={o.id}>
                <a
                  href={`/app/orchestrations?orchestration=${o.id}`}
                  aria-current={o.id === selected ? "true" : undefined}
                  onClick={(e) => {
                    e.preventDefault()
                    navigate(withQuery(route, { orchestration: o.id, execution: null }))
                  }}
                >
                  <strong>{o.name}</strong>{" "}
                  <span className="muted">
                    {o.steps.length} step{o.steps.length === 1 ? "" : "s"} · {o.status}
                  </span>
                </a>
              </li>
            ))}
          </ul>
          <LoadMore list={list} label="Load more orchestrations" />
        </section>
        <section aria-labelledby="orchestration-form">
          <h2 id="orchestration-form">{current ? `Edit ${current.name}` : "New orchestration"}</h2>
          <form onSubmit={save} noValidate>
            <Field label="Name" error={fieldError("name")}>
              {(props) => (
                <input {...props} value={draft.name} onChange={(e) => setDraft({ ...draft, name: e.target.value })} />
              )}
            </Field>
            <Field label="Description">
              {(props) => (
                <input
                  {...props}
                  value={draft.description}
                  onChange={(e) => setDraft({ ...draft, description: e.target.value })}
                />
              )}
            </Field>
            {draft.steps.map((step, index) => {
              const errors = stepErrors(index)
              return (
                <fieldset
                  key={index}
                  className="step"
                  data-testid={`step-${index}`}
                  aria-invalid={errors.length > 0 || undefined}
                >
                  <legend>Step {index + 1}</legend>
                  <Field label={`Step ${index + 1} id`}>
                    {(props) => (
                      <input {...props} value={step.id} onChange={(e) => setStep(index, { id: e.target.value })} />
                    )}
                  </Field>
                  <Field label={`Step ${index + 1} agent`}>
                    {(props) => (
                      <select
                        {...props}
                        value={step.agentId}
                        onChange={(e) => setStep(index, { agentId: e.target.value })}
                      >
                        <option value="">Choose an agent…</option>
                        {agents?.map((a) => (
                          <option key={a.id} value={a.id}>
                            {a.name}
                          </option>
                        ))}
                      </select>
                    )}
                  </Field>
                  <Field
                    label={`Step ${index + 1} prompt`}
                    hint={
                      <>
                        Use <code>{"{{input}}"}</code>, <code>{"{{variables.NAME}}"}</code>,{" "}
                        <code>{"{{steps.ID.output}}"}</code>.
                      </>
                    }
                  >
                    {(props) => (
                      <textarea
                        {...props}
                        rows={3}
                        value={step.prompt}
                        onChange={(e) => setStep(index, { prompt: e.target.value })}
                      />
                    )}
                  </Field>
                  {index > 0 && (
                    <div role="group" aria-label={`Step ${index + 1} waits for`} className="depends">
                      <span className="muted">Waits for:</span>
                      {draft.steps.slice(0, index).map((other) => (
                        <label key={other.id} className="check">
                          <input
                            type="checkbox"
                            checked={step.dependsOn.includes(other.id)}
                            onChange={(e) =>
                              setStep(index, {
                                dependsOn: e.target.checked
                                  ? [...step.dependsOn, other.id]
                                  : step.dependsOn.filter((d) => d !== other.id)
                              })
                            }
                          />
                          {other.id}
                        </label>
                      ))}
                    </div>
                  )}
                  {errors.map((message) => (
                    <p key={message} className="field-error" role="alert">
                      {message}
                    </p>
                  ))}
                  {draft.steps.length > 1 && (
                    <button type="button" className="secondary" onClick={() => removeStep(index)}>
                      Remove step {index + 1}
                    </button>
                  )}
                </fieldset>
              )
            })}
            <button type="button" className="secondary" onClick={addStep}>
              Add a step
            </button>
            {generalErrors.length > 0 ||
            (problem !== undefined && !(problem instanceof ApiProblem && problem.errors.length > 0)) ? (
              <ProblemMessage problem={problem} />
            ) : null}
            <p role="status" className="saved">
              {saved}
            </p>
            <div className="actions">
              <button type="submit">{current ? "Save" : "Create orchestration"}</button>
              {current && (
                <button type="button" className="danger" onClick={() => setDeleting(true)}>
                  Delete
                </button>
              )}
            </div>
          </form>
          <ApiCall
            call={
              current
                ? { method: "PUT", path: `/api/orchestrations/${current.id}`, body: toPayload(draft) }
                : { method: "POST", path: "/api/orchestrations", body: toPayload(draft) }
            }
          />

          {current && (
            <>
              <h2 id="execute-title">Execute</h2>
              <form onSubmit={run.execute} aria-labelledby="execute-title" noValidate>
                <Field label="Input">
                  {(props) => (
                    <textarea {...props} rows={2} value={run.input} onChange={(e) => run.setInput(e.target.value)} />
                  )}
                </Field>
                {run.variables.map((v, i) => (
                  <div key={i} className="variable">
                    <Field label={`Variable ${i + 1} name`}>
                      {(props) => (
                        <input
                          {...props}
                          value={v.name}
                          onChange={(e) =>
                            run.setVariables(
                              run.variables.map((x, j) => (j === i ? { ...x, name: e.target.value } : x))
                            )
                          }
                        />
                      )}
                    </Field>
                    <Field label={`Variable ${i + 1} value`}>
                      {(props) => (
                        <input
                          {...props}
                          value={v.value}
                          onChange={(e) =>
                            run.setVariables(
                              run.variables.map((x, j) => (j === i ? { ...x, value: e.target.value } : x))
                            )
                          }
                        />
                      )}
                    </Field>
                  </div>
                ))}
                <button
                  type="button"
                  className="secondary"
                  onClick={() => run.setVariables([...run.variables, { name: "", value: "" }])}
                >
                  Add a variable
                </button>
                <ProblemMessage problem={run.problem} />
                <button type="submit">Execute</button>
              </form>
              <ApiCall
                call={{
                  method: "POST",
                  path: `/api/v1/orchestrations/${current.id}/execute`,
                  body: { input: run.input || "..." },
                  credential: "key"
                }}
              />

              <h2>Executions</h2>
              {executions.items && executions.items.length === 0 && <p>No executions yet.</p>}
              <ul className="list executions">
                {executions.items?.map((e) => (
                  <ExecutionRow
                    key={e.id}
                    initial={e}
                    selected={e.id === executionId}
                    route={route}
                    onFinal={() => undefined}
                    onRetried={executions.reload}
                  />
                ))}
              </ul>
              <LoadMore list={executions} label="Load more executions" />
            </>
          )}
        </section>
      </div>
      <Confirm
        open={deleting}
        title={`Delete “${current?.name ?? ""}”?`}
        confirmLabel="Delete orchestration"
        onCancel={() => setDeleting(false)}
        onConfirm={() => {
          setDeleting(false)
          void remove()
        }}
      >
        <p>Its executions stay readable. This cannot be undone.</p>
      </Confirm>
    </>
  )
}
