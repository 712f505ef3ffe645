import { useState } from "react"
import type { Agent } from "../../../src/Agents/Api.ts"
import { AgentId } from "../../../src/Domain/Ids.ts"
import { Link, navigate, type Route, withQuery } from "../router.tsx"
import { ApiCall, Confirm, Field, formatDate, LoadMore, ProblemMessage } from "../shared/components.tsx"
import { queryId } from "../shared/ids.ts"
import { exposedNames, useAllTools } from "../tools/hooks.ts"
import { type AgentDraft, agentPayload, useAgents } from "./hooks.ts"

/** Agents: the list (filtered by status in the URL), and the one selected (`?agent=`) to edit, or a new one. */
export const AgentsScreen = ({ route }: { readonly route: Route }) => {
  const status = route.query.get("status") ?? "all"
  const selected = queryId(route, "agent", AgentId)
  const { list, agent, draft, set, save, remove, problem, saved, fieldError } = useAgents(route, selected)
  const [deleting, setDeleting] = useState<Agent>()
  const { tools } = useAllTools()
  // The filter applies to the pages loaded; "Load more" reads on.
  const shown = (list.items ?? []).filter((a) => status === "all" || a.status === status)

  return (
    <>
      <h1>Agents</h1>
      <div className="split">
        <section aria-labelledby="agents-list">
          <h2 id="agents-list">Your agents</h2>
          <div className="toolbar">
            <label htmlFor="status-filter">Status</label>
            <select
              id="status-filter"
              value={status}
              onChange={(e) => navigate(withQuery(route, { status: e.target.value === "all" ? null : e.target.value }))}
            >
              <option value="all">All</option>
              <option value="active">Active</option>
              <option value="inactive">Inactive</option>
            </select>
            <button type="button" className="secondary" onClick={() => navigate(withQuery(route, { agent: null }))}>
              New agent
            </button>
          </div>
          {list.error !== undefined && <ProblemMessage problem={list.error} />}
          {list.items && shown.length === 0 && !list.hasMore && (
            <p>No agents{status === "all" ? " yet" : ` ${status}`}.</p>
          )}
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
                  <strong>{a.name}</strong>{" "}
                  <span className="muted">
                    {a.model} · {a.status}
                  </span>
                </a>
              </li>
            ))}
          </ul>
          <LoadMore list={list} label="Load more agents" />
          <ApiCall call={{ method: "GET", path: "/api/agents" }} />
        </section>

        <section aria-labelledby="agent-form">
          <h2 id="agent-form">{agent ? `Edit ${agent.name}` : "New agent"}</h2>
          {agent && (
            <p className="muted">
              Id <code>{agent.id}</code>, updated {formatDate(agent.updatedAt)}
            </p>
          )}
          <form onSubmit={save} noValidate>
            <Field label="Name" error={fieldError("name")}>
              {(props) => (
                <input {...props} required value={draft.name} onChange={(e) => set("name")(e.target.value)} />
              )}
            </Field>
            <Field label="Description" error={fieldError("description")}>
              {(props) => (
                <input {...props} value={draft.description} onChange={(e) => set("description")(e.target.value)} />
              )}
            </Field>
            <Field
              label="Model"
              hint={
                <>
                  <code>local</code> (built in, offline), <code>openai/&lt;model&gt;</code> or{" "}
                  <code>anthropic/&lt;model&gt;</code>
                </>
              }
              error={fieldError("model")}
            >
              {(props) => <input {...props} value={draft.model} onChange={(e) => set("model")(e.target.value)} />}
            </Field>
            <Field label="Instructions" hint="The system prompt." error={fieldError("instructions")}>
              {(props) => (
                <textarea
                  {...props}
                  rows={5}
                  value={draft.instructions}
                  onChange={(e) => set("instructions")(e.target.value)}
                />
              )}
            </Field>
            <label className="check">
              <input
                type="checkbox"
                checked={draft.memoryEnabled}
                onChange={(e) => set("memoryEnabled")(e.target.checked)}
              />
              Remember conversations
            </label>
            <fieldset data-testid="agent-tools">
              <legend>Tools</legend>
              {tools?.length === 0 && (
                <p>
                  No tools yet: define one on the <Link to="/tools">tools</Link> screen.
                </p>
              )}
              {tools?.map((t) => {
                const checked = draft.toolIds.includes(t.id)
                const serverTools = exposedNames(t)
                return (
                  <div key={t.id}>
                    <label className="check">
                      <input
                        type="checkbox"
                        checked={checked}
                        // An inactive tool cannot be given; one the agent has can still be taken away.
                        disabled={t.status !== "active" && !checked}
                        onChange={(e) =>
                          set("toolIds")(
                            e.target.checked ? [...draft.toolIds, t.id] : draft.toolIds.filter((id) => id !== t.id)
                          )
                        }
                      />
                      {t.name}
                      <span className="muted">
                        {t.kind}
                        {t.status === "active" ? "" : " · inactive"}
                      </span>
                    </label>
                    {/* An MCP server's tools are each one tool of the model: the names it will call them by. */}
                    {t.settings.kind === "mcp" &&
                      (serverTools.length === 0 ? (
                        <p className="server-tool-names muted">No server tools exposed yet.</p>
                      ) : (
                        <ul className="server-tool-names" aria-label={`${t.name}'s server tools`}>
                          {serverTools.map((name) => (
                            <li key={name}>
                              <code>{name}</code>
                            </li>
                          ))}
                        </ul>
                      ))}
                  </div>
                )
              })}
              {fieldError("toolIds") && <p className="field-error">{fieldError("toolIds")}</p>}
            </fieldset>
            <Field label="Status" error={fieldError("status")}>
              {(props) => (
                <select
                  {...props}
                  value={draft.status}
                  onChange={(e) => set("status")(e.target.value as AgentDraft["status"])}
                >
                  <option value="active">Active</option>
                  <option value="inactive">Inactive</option>
                </select>
              )}
            </Field>
            <ProblemMessage problem={problem} />
            <p role="status" className="saved">
              {saved}
            </p>
            <div className="actions">
              <button type="submit">{agent ? "Save" : "Create agent"}</button>
              {agent && (
                <button type="button" className="danger" onClick={() => setDeleting(agent)}>
                  Delete
                </button>
              )}
            </div>
          </form>
          <ApiCall
            call={
              agent
                ? { method: "PUT", path: `/api/agents/${agent.id}`, body: agentPayload(draft, agent) }
                : { method: "POST", path: "/api/agents", body: draft }
            }
          />
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
        onConfirm={() => {
          if (deleting === undefined) return
          setDeleting(undefined)
          void remove(deleting)
        }}
      >
        <p>Its conversations go with it. This cannot be undone.</p>
      </Confirm>
    </>
  )
}
