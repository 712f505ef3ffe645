import { type FormEvent, useEffect, useState } from "react"
import type { Agent } from "../../../src/Agents/Api.ts"
import { ApiProblem, call } from "../api.ts"
import { ApiCall, Confirm, Field, formatDate, ProblemMessage, useLoad } from "../components.tsx"
import { navigate, type Route, withQuery } from "../router.tsx"

interface Draft {
  name: string
  description: string
  model: string
  instructions: string
  memoryEnabled: boolean
  status: "active" | "inactive"
}

const emptyDraft: Draft = { name: "", description: "", model: "local", instructions: "", memoryEnabled: true, status: "active" }

const draftOf = (agent: Agent): Draft => ({
  name: agent.name,
  description: agent.description,
  model: agent.model,
  instructions: agent.instructions,
  memoryEnabled: agent.memoryEnabled,
  status: agent.status
})

/** Agents: the list (filtered by status in the URL), and the one selected (`?agent=`) to edit, or a new one. */
export const AgentsScreen = ({ route }: { readonly route: Route }) => {
  const status = route.query.get("status") ?? "all"
  const selected = route.query.get("agent")
  const agents = useLoad(() => call((c) => c.agents.list({ query: { limit: 100 } })), [])
  const [draft, setDraft] = useState<Draft>(emptyDraft)
  const [problem, setProblem] = useState<unknown>()
  const [saved, setSaved] = useState("")
  const [deleting, setDeleting] = useState<Agent>()
  const agent = agents.data?.data.find((a) => a.id === selected)

  useEffect(() => {
    setDraft(agent ? draftOf(agent) : emptyDraft)
    setProblem(undefined)
  }, [agent?.id, agent?.updatedAt.getTime()])

  const shown = (agents.data?.data ?? []).filter((a) => status === "all" || a.status === status)

  const save = async (event: FormEvent) => {
    event.preventDefault()
    setProblem(undefined)
    setSaved("")
    try {
      if (agent) {
        await call((c) => c.agents.update({ params: { id: agent.id }, payload: draft }))
        setSaved(`Saved ${draft.name}.`)
      } else {
        const made = await call((c) => c.agents.create({ payload: draft }))
        setSaved(`Created ${made.name}.`)
        navigate(withQuery(route, { agent: made.id }), { replace: true })
      }
      agents.reload()
    } catch (error) {
      setProblem(error)
    }
  }

  const remove = async (target: Agent) => {
    setDeleting(undefined)
    try {
      await call((c) => c.agents.remove({ params: { id: target.id } }))
      navigate(withQuery(route, { agent: null }), { replace: true })
      agents.reload()
    } catch (error) {
      setProblem(error)
    }
  }

  const fieldError = (field: string) => problem instanceof ApiProblem ? problem.messagesFor(`payload.${field}`)[0] : undefined
  const set = <K extends keyof Draft>(key: K) => (value: Draft[K]) => setDraft((d) => ({ ...d, [key]: value }))

  return (
    <>
      <h1>Agents</h1>
      <div className="split">
        <section aria-labelledby="agents-list">
          <h2 id="agents-list">Your agents</h2>
          <div className="toolbar">
            <label htmlFor="status-filter">Status</label>
            <select id="status-filter" value={status} onChange={(e) => navigate(withQuery(route, { status: e.target.value === "all" ? null : e.target.value }))}>
              <option value="all">All</option>
              <option value="active">Active</option>
              <option value="inactive">Inactive</option>
            </select>
            <button type="button" className="secondary" onClick={() => navigate(withQuery(route, { agent: null }))}>New agent</button>
          </div>
          {agents.error !== undefined && <ProblemMessage problem={agents.error} />}
          {agents.data && shown.length === 0 && <p>No agents{status === "all" ? " yet" : ` ${status}`}.</p>}
          <ul className="list">
            {shown.map((a) => (
              <li key={a.id}>
                <a
                  href={`/app${withQuery(route, { agent: a.id })}`}
                  aria-current={a.id === selected ? "true" : undefined}
                  onClick={(e) => {
                    e.preventDefault()
                    navigate(withQuery(route, { agent: a.id }))
                  }}
                >
                  <strong>{a.name}</strong> <span className="muted">{a.model} · {a.status}</span>
                </a>
              </li>
            ))}
          </ul>
          <ApiCall call={{ method: "GET", path: "/api/agents" }} />
        </section>

        <section aria-labelledby="agent-form">
          <h2 id="agent-form">{agent ? `Edit ${agent.name}` : "New agent"}</h2>
          {agent && <p className="muted">Id <code>{agent.id}</code>, updated {formatDate(agent.updatedAt)}</p>}
          <form onSubmit={save} noValidate>
            <Field label="Name" error={fieldError("name")}>
              {(props) => <input {...props} required value={draft.name} onChange={(e) => set("name")(e.target.value)} />}
            </Field>
            <Field label="Description" error={fieldError("description")}>
              {(props) => <input {...props} value={draft.description} onChange={(e) => set("description")(e.target.value)} />}
            </Field>
            <Field label="Model" hint={<><code>local</code> (built in, offline), <code>openai/&lt;model&gt;</code> or <code>anthropic/&lt;model&gt;</code></>} error={fieldError("model")}>
              {(props) => <input {...props} value={draft.model} onChange={(e) => set("model")(e.target.value)} />}
            </Field>
            <Field label="Instructions" hint="The system prompt." error={fieldError("instructions")}>
              {(props) => <textarea {...props} rows={5} value={draft.instructions} onChange={(e) => set("instructions")(e.target.value)} />}
            </Field>
            <label className="check">
              <input type="checkbox" checked={draft.memoryEnabled} onChange={(e) => set("memoryEnabled")(e.target.checked)} />
              Remember conversations
            </label>
            <Field label="Status" error={fieldError("status")}>
              {(props) => (
                <select {...props} value={draft.status} onChange={(e) => set("status")(e.target.value as Draft["status"])}>
                  <option value="active">Active</option>
                  <option value="inactive">Inactive</option>
                </select>
              )}
            </Field>
            <ProblemMessage problem={problem} />
            <p role="status" className="saved">{saved}</p>
            <div className="actions">
              <button type="submit">{agent ? "Save" : "Create agent"}</button>
              {agent && <button type="button" className="danger" onClick={() => setDeleting(agent)}>Delete</button>}
            </div>
          </form>
          <ApiCall call={agent ? { method: "PUT", path: `/api/agents/${agent.id}`, body: draft } : { method: "POST", path: "/api/agents", body: draft }} />
          {agent && (
            <ApiCall
              title="List active agents with an API key"
              call={{ method: "GET", path: "/api/v1/agents", credential: "key" }}
            />
          )}
        </section>
      </div>
      <Confirm
        open={deleting !== undefined}
        title={`Delete “${deleting?.name ?? ""}”?`}
        confirmLabel="Delete agent"
        onCancel={() => setDeleting(undefined)}
        onConfirm={() => deleting && remove(deleting)}
      >
        <p>Its conversations go with it. This cannot be undone.</p>
      </Confirm>
    </>
  )
}
