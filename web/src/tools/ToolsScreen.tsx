import { useState } from "react"
import { ToolId } from "../../../src/Domain/Ids.ts"
import type { CallResult, HttpHop } from "../../../src/Tools/Call.ts"
import { httpMethods, policyBounds, type Tool, type ToolKind } from "../../../src/Tools/Tool.ts"
import { useAllAgents } from "../agents/hooks.ts"
import { ApprovalFields } from "../approvals/ApprovalFields.tsx"
import { useApprovalDefaults } from "../approvals/hooks.ts"
import { Link, navigate, type Route, withQuery } from "../router.tsx"
import { ApiProblem } from "../shared/api.ts"
import { useAllSecrets } from "../secrets/hooks.ts"
import { ApiCall, Confirm, Field, formatDate, LoadMore, ProblemMessage } from "../shared/components.tsx"
import { queryId } from "../shared/ids.ts"
import { type HttpMethod, parseObject, type ToolDraft, toPayload, useAllKnowledgeBases, useTools } from "./hooks.ts"
import { OAuthConnection, ServerTools } from "./McpSettings.tsx"

const kindLabels: Record<ToolKind, string> = {
  http: "HTTP request",
  knowledge: "Knowledge search",
  agent: "Ask another agent",
  mcp: "MCP server's tools"
}

const policyLabels = {
  timeoutMs: "Timeout (ms)",
  maxOutputBytes: "Most output bytes",
  maxCallsPerRun: "Most calls per run"
} as const

/** Header names and values, as a table of what was sent or received. */
const Headers = ({
  headers,
  caption
}: {
  readonly headers: Readonly<Record<string, string>>
  readonly caption: string
}) =>
  Object.keys(headers).length === 0 ? null : (
    <details>
      <summary>
        {caption} ({Object.keys(headers).length})
      </summary>
      <table>
        <caption className="visually-hidden">{caption}</caption>
        <thead>
          <tr>
            <th scope="col">Header</th>
            <th scope="col">Value</th>
          </tr>
        </thead>
        <tbody>
          {Object.entries(headers).map(([name, value]) => (
            <tr key={name}>
              <th scope="row">
                <code>{name}</code>
              </th>
              <td>
                <code>{value}</code>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </details>
  )

const Hop = ({ hop, index }: { readonly hop: HttpHop; readonly index: number }) => (
  <li className="hop">
    <h4>{index === 0 ? "Sent" : `Sent after redirect ${index}`}</h4>
    <p>
      <code>
        {hop.request.method} {hop.request.url}
      </code>
    </p>
    <Headers headers={hop.request.headers} caption={`Request ${index + 1} headers`} />
    {hop.request.body !== null && <pre tabIndex={0}>{hop.request.body}</pre>}
    <h4>Received</h4>
    {hop.response === null ? (
      <p className="muted">No answer: the connection failed or the time ran out.</p>
    ) : (
      <>
        <p>
          Status <strong>{hop.response.status}</strong>
          {hop.response.truncated && <span className="muted"> · body cut at 1 MiB</span>}
        </p>
        <Headers headers={hop.response.headers} caption={`Response ${index + 1} headers`} />
        {hop.response.body !== "" && <pre tabIndex={0}>{hop.response.body}</pre>}
      </>
    )}
  </li>
)

/** A test call's outcome: what the model would read, and what was sent and received. */
const Outcome = ({ result }: { readonly result: CallResult }) => {
  const exchange = result.exchange
  return (
    <div data-testid="test-outcome" data-ok={String(result.ok)}>
      <p>
        <span className={`status ${result.ok ? "status-completed" : "status-failed"}`}>
          {result.ok ? "ok" : `failed: ${result.errorKind ?? "error"}`}
        </span>{" "}
        <span className="muted">{Math.round(result.durationMs)} ms</span>
      </p>
      <h3>What the model reads</h3>
      <pre tabIndex={0} data-testid="test-output">
        {result.output}
      </pre>
      <h3>The exchange</h3>
      {exchange.kind === "http" &&
        (exchange.requests.length === 0 ? (
          <p>Nothing was sent.</p>
        ) : (
          <ol className="exchange" data-testid="exchange">
            {exchange.requests.map((hop, i) => (
              <Hop key={i} hop={hop} index={i} />
            ))}
          </ol>
        ))}
      {exchange.kind === "knowledge" && (
        <p data-testid="exchange">
          Searched {exchange.knowledgeIds.length} knowledge base{exchange.knowledgeIds.length === 1 ? "" : "s"} for{" "}
          {exchange.query === null ? "no query" : <q>{exchange.query}</q>} (top {exchange.topK}): {exchange.found}{" "}
          found.
        </p>
      )}
      {exchange.kind === "agent" && (
        <p data-testid="exchange">
          Agent <code>{exchange.agentId}</code>, asked{" "}
          {exchange.message === null ? "nothing" : <q>{exchange.message}</q>}
          {exchange.chain.length > 0 && (
            <>
              {" "}
              · chain <code>{exchange.chain.join(" › ")}</code>
            </>
          )}
        </p>
      )}
    </div>
  )
}

/** Tools: the list, the one selected (`?tool=`) to edit and test, or a new one. */
export const ToolsScreen = ({ route }: { readonly route: Route }) => {
  const selected = queryId(route, "tool", ToolId)
  const {
    list,
    tool,
    draft,
    set,
    setDraft,
    setKind,
    save,
    setStatus,
    remove,
    listAgain,
    listing,
    oauth,
    problem,
    saved,
    fieldError,
    test
  } = useTools(route, selected)
  const { agents } = useAllAgents()
  const bases = useAllKnowledgeBases()
  const secrets = useAllSecrets()
  // The tenant's approval defaults, named on each approval field's "tenant default".
  const approvalDefaults = useApprovalDefaults().view
  const [deleting, setDeleting] = useState<Tool>()
  // Reached over the network (an http tool, an mcp server at a URL): a URL, headers and hosts.
  const remote = draft.kind === "http" || (draft.kind === "mcp" && !draft.mcpStdio)
  const payload = toPayload(draft, tool?.policy)
  const request = "value" in payload ? payload.value : draft
  const testArguments = parseObject(test.arguments, "payload.arguments")
  const testArgumentsError =
    test.problem instanceof ApiProblem ? test.problem.messagesFor("payload.arguments")[0] : undefined

  const setHeader = (index: number, change: Partial<{ name: string; value: string }>) =>
    setDraft((d) => ({ ...d, headers: d.headers.map((h, i) => (i === index ? { ...h, ...change } : h)) }))

  return (
    <>
      <h1>Tools</h1>
      <p>
        What your agents may do besides talking: call one of your HTTP services, search your knowledge bases, ask
        another agent, or use the tools of an MCP server. Give a tool to agents on the <Link to="/agents">agents</Link>{" "}
        screen; keep the credentials it sends as <Link to="/secrets">secrets</Link>.
      </p>
      <div className="split">
        <section aria-labelledby="tools-list">
          <h2 id="tools-list">Your tools</h2>
          <div className="toolbar">
            <button type="button" className="secondary" onClick={() => navigate(withQuery(route, { tool: null }))}>
              New tool
            </button>
          </div>
          {list.error !== undefined && <ProblemMessage problem={list.error} />}
          {list.items && list.items.length === 0 && <p>No tools yet.</p>}
          <ul className="list" data-testid="tools">
            {list.items?.map((t) => (
              <li key={t.id}>
                <a
                  href={`/app${withQuery(route, { tool: t.id })}`}
                  aria-current={t.id === selected ? "true" : undefined}
                  onClick={(e) => {
                    e.preventDefault()
                    navigate(withQuery(route, { tool: t.id }))
                  }}
                >
                  <strong>{t.name}</strong>{" "}
                  <span className="muted">
                    {t.kind} · {t.status}
                  </span>
                </a>
              </li>
            ))}
          </ul>
          <LoadMore list={list} label="Load more tools" />
          <ApiCall call={{ method: "GET", path: "/api/tools" }} />
        </section>

        <section aria-labelledby="tool-form">
          <h2 id="tool-form">{tool ? `Edit ${tool.name}` : "New tool"}</h2>
          {tool && (
            <p className="muted">
              Id <code>{tool.id}</code>, {tool.status}, updated {formatDate(tool.updatedAt)}
            </p>
          )}
          <form onSubmit={save} noValidate>
            <Field
              label="Name"
              hint="What the model calls it by: letters, digits, _ and -, such as lookup_order."
              error={fieldError("payload.name")}
            >
              {(props) => (
                <input
                  {...props}
                  required
                  maxLength={64}
                  spellCheck={false}
                  value={draft.name}
                  onChange={(e) => set("name")(e.target.value)}
                />
              )}
            </Field>
            <Field
              label="Description"
              hint="What it does and when to use it: the model reads this to decide."
              error={fieldError("payload.description")}
            >
              {(props) => (
                <textarea
                  {...props}
                  rows={3}
                  value={draft.description}
                  onChange={(e) => set("description")(e.target.value)}
                />
              )}
            </Field>
            <Field label="Kind" error={fieldError("payload.settings.kind")}>
              {(props) => (
                <select {...props} value={draft.kind} onChange={(e) => setKind(e.target.value as ToolKind)}>
                  {(Object.keys(kindLabels) as Array<ToolKind>).map((kind) => (
                    <option key={kind} value={kind}>
                      {kindLabels[kind]}
                    </option>
                  ))}
                </select>
              )}
            </Field>

            {(draft.kind === "http" || draft.kind === "mcp") && (
              <fieldset>
                <legend>{draft.kind === "http" ? "HTTP request" : "MCP server"}</legend>
                {draft.kind === "mcp" && (
                  <Field
                    label="Server"
                    hint="Where its tools are: a server reached at a URL, or one the operator runs."
                  >
                    {(props) => (
                      <select
                        {...props}
                        value={draft.mcpStdio ? "stdio" : "url"}
                        onChange={(e) => set("mcpStdio")(e.target.value === "stdio")}
                      >
                        <option value="url">Reached at a URL (Streamable HTTP)</option>
                        <option value="stdio">Run by the operator (stdio)</option>
                      </select>
                    )}
                  </Field>
                )}
                {draft.kind === "mcp" && draft.mcpStdio && (
                  <Field
                    label="Server name"
                    hint="The name the operator gave the server in the service's configuration."
                    error={fieldError("payload.settings.server")}
                  >
                    {(props) => (
                      <input
                        {...props}
                        spellCheck={false}
                        value={draft.mcpServer}
                        onChange={(e) => set("mcpServer")(e.target.value)}
                      />
                    )}
                  </Field>
                )}
                {draft.kind === "http" && (
                  <Field label="Method" error={fieldError("payload.settings.method")}>
                    {(props) => (
                      <select
                        {...props}
                        value={draft.method}
                        onChange={(e) => set("method")(e.target.value as HttpMethod)}
                      >
                        {httpMethods.map((method) => (
                          <option key={method} value={method}>
                            {method}
                          </option>
                        ))}
                      </select>
                    )}
                  </Field>
                )}
                {remote && (
                  <Field
                    label="URL"
                    hint={
                      draft.kind === "mcp" ? (
                        <>
                          The server's Streamable HTTP endpoint, such as <code>https://mcp.shop.example/mcp</code>.
                        </>
                      ) : (
                        <>
                          <code>{"{{args.NAME}}"}</code> in its path and query stands for an argument, such as{" "}
                          <code>{"https://api.shop.example/orders/{{args.id}}"}</code>.
                        </>
                      )
                    }
                    error={fieldError("payload.settings.url")}
                  >
                    {(props) => (
                      <input
                        {...props}
                        type="url"
                        spellCheck={false}
                        value={draft.url}
                        onChange={(e) => set("url")(e.target.value)}
                      />
                    )}
                  </Field>
                )}
                {draft.kind === "mcp" && remote && (
                  <Field
                    label="Authentication"
                    hint="Headers sent with every request, or an OAuth connection you approve at the server's authorization server."
                    error={fieldError("payload.settings.auth")}
                  >
                    {(props) => (
                      <select
                        {...props}
                        value={draft.mcpAuth}
                        onChange={(e) => set("mcpAuth")(e.target.value as ToolDraft["mcpAuth"])}
                      >
                        <option value="headers">Headers</option>
                        <option value="oauth">OAuth</option>
                      </select>
                    )}
                  </Field>
                )}
                {draft.kind === "mcp" && remote && draft.mcpAuth === "oauth" && (
                  <OAuthConnection tool={tool?.settings.kind === "mcp" ? tool : undefined} oauth={oauth} />
                )}
                {remote && (
                  <fieldset>
                    <legend>Headers</legend>
                    <p className="hint">
                      {draft.kind === "mcp" && draft.mcpAuth === "oauth"
                        ? "Sent with every call besides the connection's Authorization"
                        : "Sent with every call"}
                      ; a value may name a secret as <code>{"{{secrets.NAME}}"}</code>
                      {secrets !== undefined && secrets.length > 0 && (
                        <>
                          {" "}
                          (yours:{" "}
                          {secrets.map((secret, i) => (
                            <span key={secret.id}>
                              {i > 0 && ", "}
                              <code>{secret.name}</code>
                            </span>
                          ))}
                          )
                        </>
                      )}
                      .
                    </p>
                    {draft.headers.map((header, i) => (
                      <div key={i} className="header-row">
                        <input
                          aria-label={`Header ${i + 1} name`}
                          placeholder="Name"
                          spellCheck={false}
                          value={header.name}
                          onChange={(e) => setHeader(i, { name: e.target.value })}
                        />
                        <input
                          aria-label={`Header ${i + 1} value`}
                          placeholder="Value"
                          spellCheck={false}
                          value={header.value}
                          onChange={(e) => setHeader(i, { value: e.target.value })}
                        />
                        <button
                          type="button"
                          className="secondary"
                          aria-label={`Remove header ${i + 1}`}
                          onClick={() => setDraft((d) => ({ ...d, headers: d.headers.filter((_, j) => j !== i) }))}
                        >
                          Remove
                        </button>
                      </div>
                    ))}
                    <button
                      type="button"
                      className="secondary"
                      onClick={() => setDraft((d) => ({ ...d, headers: [...d.headers, { name: "", value: "" }] }))}
                    >
                      Add a header
                    </button>
                    {fieldError("payload.settings.headers") && (
                      <p className="field-error">{fieldError("payload.settings.headers")}</p>
                    )}
                  </fieldset>
                )}
                {draft.kind === "http" && draft.method !== "GET" && (
                  <Field
                    label="Body"
                    hint={
                      <>
                        A template over <code>{"{{args.NAME}}"}</code> (the argument as JSON) and{" "}
                        <code>{"{{secrets.NAME}}"}</code>. Empty: the arguments as a JSON object
                        {draft.method === "DELETE" ? " (none for DELETE)" : ""}.
                      </>
                    }
                    error={fieldError("payload.settings.body")}
                  >
                    {(props) => (
                      <textarea
                        {...props}
                        className="code"
                        rows={4}
                        spellCheck={false}
                        value={draft.body}
                        onChange={(e) => set("body")(e.target.value)}
                      />
                    )}
                  </Field>
                )}
                {remote && (
                  <Field
                    label="Allowed hosts"
                    hint={
                      draft.kind === "mcp"
                        ? "One a line: the URL's host."
                        : "One a line: the URL's host, and any a followed redirect may go to."
                    }
                    error={fieldError("payload.settings.allowedHosts")}
                  >
                    {(props) => (
                      <textarea
                        {...props}
                        rows={2}
                        spellCheck={false}
                        value={draft.allowedHosts}
                        onChange={(e) => set("allowedHosts")(e.target.value)}
                      />
                    )}
                  </Field>
                )}
                {draft.kind === "http" && (
                  <label className="check">
                    <input
                      type="checkbox"
                      checked={draft.followRedirects}
                      onChange={(e) => set("followRedirects")(e.target.checked)}
                    />
                    Follow redirects to the allowed hosts
                  </label>
                )}
                {draft.kind === "mcp" && (
                  <ServerTools
                    tool={tool}
                    draft={draft}
                    setDraft={setDraft}
                    fieldError={fieldError}
                    listAgain={listAgain}
                    listing={listing}
                    oauth={oauth}
                  />
                )}
              </fieldset>
            )}

            {draft.kind === "knowledge" && (
              <fieldset>
                <legend>Knowledge bases searched</legend>
                {bases?.length === 0 && (
                  <p>
                    No knowledge bases yet: make one on the <Link to="/knowledge">knowledge</Link> screen.
                  </p>
                )}
                {bases?.map((b) => (
                  <label key={b.id} className="check">
                    <input
                      type="checkbox"
                      checked={draft.knowledgeIds.includes(b.id)}
                      onChange={(e) =>
                        set("knowledgeIds")(
                          e.target.checked
                            ? [...draft.knowledgeIds, b.id]
                            : draft.knowledgeIds.filter((id) => id !== b.id)
                        )
                      }
                    />
                    {b.name}
                  </label>
                ))}
                {fieldError("payload.settings.knowledgeIds") && (
                  <p className="field-error">{fieldError("payload.settings.knowledgeIds")}</p>
                )}
                <Field
                  label="Chunks per search"
                  hint="1 to 50; empty: the service's default."
                  error={fieldError("payload.settings.topK")}
                >
                  {(props) => (
                    <input
                      {...props}
                      type="number"
                      min={1}
                      max={50}
                      value={draft.topK}
                      onChange={(e) => set("topK")(e.target.value)}
                    />
                  )}
                </Field>
              </fieldset>
            )}

            {draft.kind === "agent" && (
              <Field
                label="Agent asked"
                hint="The model's message goes to this agent, and its reply comes back."
                error={fieldError("payload.settings.agentId")}
              >
                {(props) => (
                  <select {...props} value={draft.agentId} onChange={(e) => set("agentId")(e.target.value)}>
                    <option value="">Choose an agent</option>
                    {agents?.map((a) => (
                      <option key={a.id} value={a.id}>
                        {a.name} ({a.model})
                      </option>
                    ))}
                  </select>
                )}
              </Field>
            )}

            <Field
              label="Parameters (JSON Schema)"
              hint={
                <>
                  The arguments the model sends, as a draft-07 JSON Schema with <code>"type": "object"</code>
                  {draft.kind === "knowledge" && (
                    <>
                      ; a search reads <code>query</code>
                    </>
                  )}
                  {draft.kind === "agent" && (
                    <>
                      ; the agent is sent <code>message</code>
                    </>
                  )}
                  {draft.kind === "mcp" && (
                    <>
                      ; not read for an MCP server, whose tools each bring their own: leave{" "}
                      <code>{'{ "type": "object" }'}</code>
                    </>
                  )}
                  .
                </>
              }
              error={fieldError("payload.parameters")}
            >
              {(props) => (
                <textarea
                  {...props}
                  className="code"
                  rows={draft.kind === "mcp" ? 3 : 10}
                  spellCheck={false}
                  value={draft.parameters}
                  onChange={(e) => set("parameters")(e.target.value)}
                />
              )}
            </Field>

            <fieldset>
              <legend>Policy</legend>
              {(["timeoutMs", "maxOutputBytes", "maxCallsPerRun"] as const).map((key) => (
                <Field
                  key={key}
                  label={policyLabels[key]}
                  hint={`${policyBounds[key].minimum.toLocaleString("en")} to ${policyBounds[key].maximum.toLocaleString("en")}; default ${policyBounds[key].default.toLocaleString("en")}.`}
                  error={fieldError(`payload.policy.${key}`)}
                >
                  {(props) => (
                    <input
                      {...props}
                      type="number"
                      min={policyBounds[key].minimum}
                      max={policyBounds[key].maximum}
                      placeholder={String(policyBounds[key].default)}
                      value={draft[key]}
                      onChange={(e) => set(key)(e.target.value)}
                    />
                  )}
                </Field>
              ))}
              <fieldset>
                <legend>Approvals</legend>
                <p className="hint">
                  A field on “Tenant default” (the timeout: left empty) takes the tenant's, as set on the{" "}
                  <Link to="/approvals">approvals</Link> screen.
                </p>
                <ApprovalFields
                  draft={draft.approval}
                  onChange={set("approval")}
                  fieldError={fieldError}
                  path="payload.policy"
                  tenant={{ view: approvalDefaults }}
                />
              </fieldset>
            </fieldset>

            <ProblemMessage problem={problem} />
            <p role="status" className="saved">
              {saved}
            </p>
            <div className="actions">
              <button type="submit">{tool ? "Save" : "Create tool"}</button>
              {tool && (
                <button
                  type="button"
                  className="secondary"
                  onClick={() => setStatus(tool, tool.status === "active" ? "inactive" : "active")}
                >
                  {tool.status === "active" ? "Deactivate" : "Activate"}
                </button>
              )}
              {tool && (
                <button type="button" className="danger" onClick={() => setDeleting(tool)}>
                  Delete
                </button>
              )}
            </div>
          </form>
          <ApiCall
            call={
              tool
                ? { method: "PUT", path: `/api/tools/${tool.id}`, body: request }
                : { method: "POST", path: "/api/tools", body: request }
            }
          />

          {tool && (
            <section aria-labelledby="test-title">
              <h2 id="test-title">Test {tool.name}</h2>
              <p className="hint">
                One call, as a run would make it{tool.status === "inactive" ? " (inactive tools too)" : ""}: the
                arguments are checked against the parameters first.
              </p>
              <form onSubmit={test.run} noValidate>
                <Field label="Arguments (JSON)" error={testArgumentsError}>
                  {(props) => (
                    <textarea
                      {...props}
                      className="code"
                      rows={5}
                      spellCheck={false}
                      value={test.arguments}
                      onChange={(e) => test.setArguments(e.target.value)}
                    />
                  )}
                </Field>
                <button type="submit" disabled={test.running}>
                  {test.running ? "Testing…" : "Run the test"}
                </button>
              </form>
              {testArgumentsError === undefined && <ProblemMessage problem={test.problem} />}
              <div role="status">{test.running && <span className="muted">Calling…</span>}</div>
              {test.result && <Outcome result={test.result} />}
              <ApiCall
                call={{
                  method: "POST",
                  path: `/api/tools/${tool.id}/test`,
                  body: { arguments: "value" in testArguments ? testArguments.value : {} }
                }}
              />
            </section>
          )}
        </section>
      </div>
      <Confirm
        open={deleting !== undefined}
        title={`Delete “${deleting?.name ?? ""}”?`}
        confirmLabel="Delete tool"
        onCancel={() => setDeleting(undefined)}
        onConfirm={() => {
          if (deleting === undefined) return
          setDeleting(undefined)
          void remove(deleting)
        }}
      >
        <p>A tool that agents have is kept: take it out of their tools first. This cannot be undone.</p>
      </Confirm>
    </>
  )
}
