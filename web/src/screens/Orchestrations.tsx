import { type FormEvent, useEffect, useState } from "react"
import { type Execution, executionEventNames, type OrchestrationView } from "../../../src/Orchestrations/Api.ts"
import { ApiProblem, call, urls } from "../api.ts"
import { ApiCall, Confirm, Field, formatDate, ProblemMessage, useLoad } from "../components.tsx"
import { navigate, type Route, withQuery } from "../router.tsx"
import { followEvents } from "../sse.ts"

interface StepDraft {
  id: string
  agentId: string
  prompt: string
  dependsOn: Array<string>
}

interface Draft {
  name: string
  description: string
  steps: Array<StepDraft>
}

const newStep = (index: number, agentId = ""): StepDraft => ({ id: `step${index + 1}`, agentId, prompt: "", dependsOn: [] })
const draftOf = (o: OrchestrationView): Draft => ({
  name: o.name,
  description: o.description,
  steps: o.steps.map((s) => ({ id: s.id, agentId: s.agentId, prompt: s.prompt, dependsOn: [...(s.dependsOn ?? [])] }))
})
const toPayload = (d: Draft) => ({
  name: d.name,
  description: d.description,
  steps: d.steps.map((s) => ({ id: s.id, agentId: s.agentId as never, prompt: s.prompt, ...(s.dependsOn.length > 0 ? { dependsOn: s.dependsOn } : {}) }))
})

const finalStatuses = new Set(["completed", "failed", "cancelled"])

/**
 * An execution followed live: its stored state, read again at every
 * (re)connection of its event stream, updated by the events in between.
 */
const useLiveExecution = (initial: Execution, onFinal: () => void) => {
  const [execution, setExecution] = useState(initial)
  const [log, setLog] = useState<Array<string>>([])
  useEffect(() => setExecution(initial), [initial])
  useEffect(() => {
    if (finalStatuses.has(initial.status)) return
    const reread = () => call((c) => c.executions.get({ params: { id: initial.id } })).then(setExecution, () => undefined)
    const close = followEvents(urls.executions.events({ params: { id: initial.id } }), executionEventNames, {
      onOpen: reread,
      onEvent: (event) => {
        const data = event.data as { stepId?: string; tokens?: number }
        if (event.event !== "stream.end") setLog((l) => [...l, data.stepId ? `${event.event} ${data.stepId}` : event.event])
        if (event.event === "execution.running") setExecution((e) => ({ ...e, status: "running" }))
        if (event.event.startsWith("execution.") && event.event !== "execution.running" || event.event === "stream.end") {
          close()
          void reread().then(onFinal)
        }
      }
    })
    return close
  }, [initial.id])
  return { execution, log }
}

const ExecutionRow = ({ initial, selected, route, onFinal }: {
  readonly initial: Execution
  readonly selected: boolean
  readonly route: Route
  readonly onFinal: () => void
}) => {
  const { execution, log } = useLiveExecution(initial, onFinal)
  const cancel = () => call((c) => c.executions.cancel({ params: { id: execution.id } })).catch(() => undefined)
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
        <span className={`status status-${execution.status}`}>{execution.status}</span> {formatDate(execution.createdAt)}
      </a>
      {selected && (
        <div className="detail">
          {execution.output !== null && <><h4>Output</h4><pre tabIndex={0} data-testid="execution-output">{execution.output}</pre></>}
          {execution.error !== null && <p className="field-error">{execution.error}</p>}
          <p className="muted">{execution.tokensUsed} tokens{execution.durationMs !== null && `, ${execution.durationMs} ms`}</p>
          {log.length > 0 && <p className="muted">Events: {log.join(" → ")}</p>}
          {!finalStatuses.has(execution.status) && <button type="button" className="danger" onClick={cancel}>Cancel</button>}
          <ApiCall call={{ method: "GET", path: `/api/v1/executions/${execution.id}/events`, credential: "key" }} title="Follow it with an API key" />
        </div>
      )}
    </li>
  )
}

/** Orchestrations: the list, a step editor whose errors land on their step, execute, and the executions followed live. */
export const OrchestrationsScreen = ({ route }: { readonly route: Route }) => {
  const selected = route.query.get("orchestration")
  const executionId = route.query.get("execution")
  const orchestrations = useLoad(() => call((c) => c.orchestrations.list({ query: { limit: 100 } })), [])
  const agents = useLoad(() => call((c) => c.agents.list({ query: { limit: 100 } })), [])
  const current = orchestrations.data?.data.find((o) => o.id === selected)
  const executions = useLoad(
    () => selected ? call((c) => c.executions.list({ query: { orchestrationId: selected, limit: 20 } })) : Promise.resolve(undefined),
    [selected]
  )
  const [draft, setDraft] = useState<Draft>({ name: "", description: "", steps: [newStep(0)] })
  const [problem, setProblem] = useState<unknown>()
  const [saved, setSaved] = useState("")
  const [input, setInput] = useState("")
  const [variables, setVariables] = useState<Array<{ name: string; value: string }>>([])
  const [runProblem, setRunProblem] = useState<unknown>()
  const [deleting, setDeleting] = useState(false)

  const firstAgentId = agents.data?.data[0]?.id ?? ""
  useEffect(() => {
    setDraft(current ? draftOf(current) : { name: "", description: "", steps: [newStep(0, firstAgentId)] })
    setProblem(undefined)
  }, [current?.id, current?.updatedAt.getTime()])
  // The agents arrive after the form may have been filled in: they only give
  // a new orchestration's steps that have none their default agent, and never
  // reset what was typed.
  useEffect(() => {
    if (current || firstAgentId === "") return
    setDraft((d) => d.steps.some((s) => s.agentId === "") ? { ...d, steps: d.steps.map((s) => s.agentId === "" ? { ...s, agentId: firstAgentId } : s) } : d)
  }, [firstAgentId])

  const save = async (event: FormEvent) => {
    event.preventDefault()
    setProblem(undefined)
    setSaved("")
    try {
      if (current) {
        await call((c) => c.orchestrations.update({ params: { id: current.id }, payload: toPayload(draft) }))
        setSaved("Saved.")
      } else {
        const made = await call((c) => c.orchestrations.create({ payload: toPayload(draft) }))
        setSaved("Created.")
        navigate(withQuery(route, { orchestration: made.id }), { replace: true })
      }
      orchestrations.reload()
    } catch (error) {
      setProblem(error)
    }
  }

  const execute = async (event: FormEvent) => {
    event.preventDefault()
    if (!current) return
    setRunProblem(undefined)
    try {
      const vars = Object.fromEntries(variables.filter((v) => v.name !== "").map((v) => [v.name, v.value]))
      const started = await call((c) =>
        c.orchestrations.execute({
          params: { id: current.id },
          headers: {},
          payload: { input, ...(Object.keys(vars).length > 0 ? { variables: vars } : {}) }
        })
      )
      navigate(withQuery(route, { execution: started.executionId }), { replace: true })
      executions.reload()
    } catch (error) {
      setRunProblem(error)
    }
  }

  const remove = async () => {
    setDeleting(false)
    if (!current) return
    await call((c) => c.orchestrations.remove({ params: { id: current.id } })).catch(setProblem)
    navigate(withQuery(route, { orchestration: null, execution: null }), { replace: true })
    orchestrations.reload()
  }

  const stepError = (index: number) => problem instanceof ApiProblem ? problem.messagesFor(`payload.steps.${index}`) : []
  const setStep = (index: number, change: Partial<StepDraft>) =>
    setDraft((d) => ({ ...d, steps: d.steps.map((s, i) => i === index ? { ...s, ...change } : s) }))
  const generalErrors = problem instanceof ApiProblem ? problem.errors.filter((e) => !/^payload\.steps\.\d+/.test(e.path)) : []

  return (
    <>
      <h1>Orchestrations</h1>
      <div className="split">
        <section aria-labelledby="orchestrations-list">
          <h2 id="orchestrations-list">Your orchestrations</h2>
          <button type="button" className="secondary" onClick={() => navigate(withQuery(route, { orchestration: null, execution: null }))}>New orchestration</button>
          {orchestrations.data && orchestrations.data.data.length === 0 && <p>None yet.</p>}
          <ul className="list">
            {orchestrations.data?.data.map((o) => (
              <li key={o.id}>
                <a
                  href={`/app/orchestrations?orchestration=${o.id}`}
                  aria-current={o.id === selected ? "true" : undefined}
                  onClick={(e) => {
                    e.preventDefault()
                    navigate(withQuery(route, { orchestration: o.id, execution: null }))
                  }}
                >
                  <strong>{o.name}</strong> <span className="muted">{o.steps.length} step{o.steps.length === 1 ? "" : "s"} · {o.status}</span>
                </a>
              </li>
            ))}
          </ul>
        </section>
        <section aria-labelledby="orchestration-form">
          <h2 id="orchestration-form">{current ? `Edit ${current.name}` : "New orchestration"}</h2>
          <form onSubmit={save} noValidate>
            <Field label="Name" error={problem instanceof ApiProblem ? problem.messagesFor("payload.name")[0] : undefined}>
              {(props) => <input {...props} value={draft.name} onChange={(e) => setDraft({ ...draft, name: e.target.value })} />}
            </Field>
            <Field label="Description">
              {(props) => <input {...props} value={draft.description} onChange={(e) => setDraft({ ...draft, description: e.target.value })} />}
            </Field>
            {draft.steps.map((step, index) => {
              const errors = stepError(index)
              return (
                <fieldset key={index} className="step" data-testid={`step-${index}`} aria-invalid={errors.length > 0 || undefined}>
                  <legend>Step {index + 1}</legend>
                  <Field label={`Step ${index + 1} id`}>
                    {(props) => <input {...props} value={step.id} onChange={(e) => setStep(index, { id: e.target.value })} />}
                  </Field>
                  <Field label={`Step ${index + 1} agent`}>
                    {(props) => (
                      <select {...props} value={step.agentId} onChange={(e) => setStep(index, { agentId: e.target.value })}>
                        <option value="">Choose an agent…</option>
                        {agents.data?.data.map((a) => <option key={a.id} value={a.id}>{a.name}</option>)}
                      </select>
                    )}
                  </Field>
                  <Field label={`Step ${index + 1} prompt`} hint={<>Use <code>{"{{input}}"}</code>, <code>{"{{variables.NAME}}"}</code>, <code>{"{{steps.ID.output}}"}</code>.</>}>
                    {(props) => <textarea {...props} rows={3} value={step.prompt} onChange={(e) => setStep(index, { prompt: e.target.value })} />}
                  </Field>
                  {index > 0 && (
                    <div role="group" aria-label={`Step ${index + 1} waits for`} className="depends">
                      <span className="muted">Waits for:</span>
                      {draft.steps.slice(0, index).map((other) => (
                        <label key={other.id} className="check">
                          <input
                            type="checkbox"
                            checked={step.dependsOn.includes(other.id)}
                            onChange={(e) => setStep(index, { dependsOn: e.target.checked ? [...step.dependsOn, other.id] : step.dependsOn.filter((d) => d !== other.id) })}
                          />
                          {other.id}
                        </label>
                      ))}
                    </div>
                  )}
                  {errors.map((message) => <p key={message} className="field-error" role="alert">{message}</p>)}
                  {draft.steps.length > 1 && (
                    <button type="button" className="secondary" onClick={() => setDraft({ ...draft, steps: draft.steps.filter((_, i) => i !== index) })}>
                      Remove step {index + 1}
                    </button>
                  )}
                </fieldset>
              )
            })}
            <button type="button" className="secondary" onClick={() => setDraft({ ...draft, steps: [...draft.steps, newStep(draft.steps.length, firstAgentId)] })}>
              Add a step
            </button>
            {generalErrors.length > 0 || (problem !== undefined && !(problem instanceof ApiProblem && problem.errors.length > 0))
              ? <ProblemMessage problem={problem} />
              : null}
            <p role="status" className="saved">{saved}</p>
            <div className="actions">
              <button type="submit">{current ? "Save" : "Create orchestration"}</button>
              {current && <button type="button" className="danger" onClick={() => setDeleting(true)}>Delete</button>}
            </div>
          </form>
          <ApiCall call={current ? { method: "PUT", path: `/api/orchestrations/${current.id}`, body: toPayload(draft) } : { method: "POST", path: "/api/orchestrations", body: toPayload(draft) }} />

          {current && (
            <>
              <h2 id="execute-title">Execute</h2>
              <form onSubmit={execute} aria-labelledby="execute-title" noValidate>
                <Field label="Input">
                  {(props) => <textarea {...props} rows={2} value={input} onChange={(e) => setInput(e.target.value)} />}
                </Field>
                {variables.map((v, i) => (
                  <div key={i} className="variable">
                    <Field label={`Variable ${i + 1} name`}>
                      {(props) => <input {...props} value={v.name} onChange={(e) => setVariables(variables.map((x, j) => j === i ? { ...x, name: e.target.value } : x))} />}
                    </Field>
                    <Field label={`Variable ${i + 1} value`}>
                      {(props) => <input {...props} value={v.value} onChange={(e) => setVariables(variables.map((x, j) => j === i ? { ...x, value: e.target.value } : x))} />}
                    </Field>
                  </div>
                ))}
                <button type="button" className="secondary" onClick={() => setVariables([...variables, { name: "", value: "" }])}>Add a variable</button>
                <ProblemMessage problem={runProblem} />
                <button type="submit">Execute</button>
              </form>
              <ApiCall call={{ method: "POST", path: `/api/v1/orchestrations/${current.id}/execute`, body: { input: input || "..." }, credential: "key" }} />

              <h2>Executions</h2>
              {executions.data && executions.data.data.length === 0 && <p>No executions yet.</p>}
              <ul className="list executions">
                {executions.data?.data.map((e) => (
                  <ExecutionRow key={e.id} initial={e} selected={e.id === executionId} route={route} onFinal={() => undefined} />
                ))}
              </ul>
            </>
          )}
        </section>
      </div>
      <Confirm open={deleting} title={`Delete “${current?.name ?? ""}”?`} confirmLabel="Delete orchestration" onCancel={() => setDeleting(false)} onConfirm={remove}>
        <p>Its executions stay readable. This cannot be undone.</p>
      </Confirm>
    </>
  )
}
