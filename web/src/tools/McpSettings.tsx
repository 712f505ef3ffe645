import type { Dispatch, SetStateAction } from "react"
import type { McpServerTool, Tool } from "../../../src/Tools/Tool.ts"
import { ApiCall, Field, formatDate, ProblemMessage } from "../shared/components.tsx"
import { namesOf, type ToolDraft } from "./hooks.ts"
import { type OAuthOutcome, type OAuthStatus, oauthStartCall } from "./oauth.ts"

// An mcp tool's own parts of the form: how its server is authenticated (the
// OAuth connection, when not headers), the server's tools as last listed, and
// which of them the model sees.

/** The stored mcp tool's listing, or undefined for a new tool or one of another kind. */
const listingOf = (tool: Tool | undefined) =>
  tool !== undefined && tool.settings.kind === "mcp"
    ? {
        serverTools: tool.settings.serverTools as ReadonlyArray<McpServerTool>,
        // Null (or empty) while a server waiting for its OAuth connection was never listed.
        listedAt: (tool.settings.listedAt as string | null) || null
      }
    : undefined

export interface OAuthState {
  readonly enabled: boolean
  readonly status: OAuthStatus | undefined
  readonly statusError: unknown
  readonly outcome: OAuthOutcome | undefined
  readonly busy: boolean
  readonly connect: () => void
  readonly disconnect: () => void
}

const statusLabels: Record<OAuthStatus["status"], { readonly text: string; readonly className: string }> = {
  connected: { text: "connected", className: "status-completed" },
  not_connected: { text: "not connected", className: "status-pending" },
  expired: { text: "expired: reconnect", className: "status-failed" }
}

const dateOf = (iso: string | null) => (iso === null ? null : new Date(iso))

/** An OAuth tool's connection: its status, Connect or Reconnect, Disconnect, and how the last connection went. */
export const OAuthConnection = ({ tool, oauth }: { readonly tool: Tool | undefined; readonly oauth: OAuthState }) => {
  if (tool === undefined || !oauth.enabled) {
    return (
      <p className="hint" data-testid="oauth">
        Save the tool, then connect: you approve its access at the server's authorization server, and come back here.
      </p>
    )
  }
  const status = oauth.status
  const outcome = oauth.outcome
  return (
    <div className="oauth" data-testid="oauth" data-status={status?.status ?? "unknown"}>
      {outcome?.connected === true && (
        <p role="status" className="saved">
          Connected {tool.name} to its server.
        </p>
      )}
      {outcome?.connected === false && (
        <div className="problem" role="alert">
          <strong>The OAuth connection came back with a problem</strong>
          <p>{outcome.detail === "" ? "The authorization server gave no reason." : outcome.detail}</p>
        </div>
      )}
      <ProblemMessage problem={oauth.statusError} />
      {status === undefined ? (
        oauth.statusError === undefined && <p className="muted">Reading the connection…</p>
      ) : (
        <>
          <p>
            OAuth:{" "}
            <span className={`status ${statusLabels[status.status].className}`} data-testid="oauth-status">
              {statusLabels[status.status].text}
            </span>
            {status.status === "connected" && (
              <>
                {" "}
                until {formatDate(dateOf(status.expiresAt), "it is revoked")}
                {status.connectedAt !== null && (
                  <span className="muted"> · since {formatDate(dateOf(status.connectedAt))}</span>
                )}
              </>
            )}
            {status.status === "expired" && status.expiresAt !== null && (
              <span className="muted"> · since {formatDate(dateOf(status.expiresAt))}</span>
            )}
          </p>
          {(status.authorizationServer !== null || status.scope !== null) && (
            <p className="muted">
              {status.authorizationServer !== null && (
                <>
                  Authorization server <code>{status.authorizationServer}</code>
                </>
              )}
              {status.authorizationServer !== null && status.scope !== null && " · "}
              {status.scope !== null && (
                <>
                  scope <code>{status.scope}</code>
                </>
              )}
            </p>
          )}
        </>
      )}
      <div className="actions">
        <button type="button" onClick={oauth.connect} disabled={oauth.busy}>
          {status === undefined || status.status === "not_connected" ? "Connect" : "Reconnect"}
        </button>
        {status !== undefined && status.status !== "not_connected" && (
          <button type="button" className="danger" onClick={oauth.disconnect} disabled={oauth.busy}>
            Disconnect
          </button>
        )}
      </div>
      <ApiCall title="Connect with the API" call={oauthStartCall(tool.id)} />
    </div>
  )
}

/**
 * The server's tools as last listed (the stored tool's, not the draft's): a
 * table of each one's name, description and the name the model calls it by
 * or why it is not exposed, "List again", and the choice of those exposed,
 * ticked in the table or, with nothing listed yet, named.
 */
export const ServerTools = ({
  tool,
  draft,
  setDraft,
  fieldError,
  listAgain,
  listing,
  oauth
}: {
  readonly tool: Tool | undefined
  readonly draft: ToolDraft
  readonly setDraft: Dispatch<SetStateAction<ToolDraft>>
  readonly fieldError: (path: string) => string | undefined
  readonly listAgain: (tool: Tool) => void
  readonly listing: boolean
  readonly oauth: OAuthState
}) => {
  const stored = listingOf(tool)
  const listed = stored?.serverTools ?? []
  const listedNames = listed.map((one) => one.name)
  const chosen = namesOf(draft.mcpTools)
  const picking = !draft.mcpAll && listed.length > 0
  // An OAuth tool not connected has nothing listed, and cannot list until it is.
  const awaitingConnection = oauth.enabled && oauth.status !== undefined && oauth.status.status !== "connected"

  const tick = (name: string, on: boolean) =>
    setDraft((d) => {
      const names = namesOf(d.mcpTools).filter((one) => one !== name)
      const next = on ? [...names, name] : names
      // In the listing's order, so the text reads as the table does.
      const rank = (one: string) => (listedNames.includes(one) ? listedNames.indexOf(one) : listedNames.length)
      return { ...d, mcpTools: next.sort((a, b) => rank(a) - rank(b)).join("\n") }
    })

  // Choosing a selection starts from every tool listed, to untick those not wanted.
  const choose = (all: boolean) =>
    setDraft((d) => ({
      ...d,
      mcpAll: all,
      mcpTools: !all && namesOf(d.mcpTools).length === 0 ? listedNames.join("\n") : d.mcpTools
    }))

  return (
    <div className="server-tools">
      <h3>Server tools</h3>
      <Field
        label="Server tools the model sees"
        hint={
          listed.length > 0
            ? "Each is called by the tool's name, two underscores and its own."
            : "Until the server's tools are listed, name those you want."
        }
        error={draft.mcpAll || listed.length > 0 ? fieldError("payload.settings.tools") : undefined}
      >
        {(props) => (
          <select {...props} value={draft.mcpAll ? "all" : "some"} onChange={(e) => choose(e.target.value === "all")}>
            <option value="all">All of them, and those the server adds</option>
            <option value="some">{listed.length > 0 ? "Only those ticked" : "Only those named"}</option>
          </select>
        )}
      </Field>
      {!draft.mcpAll && listed.length === 0 && (
        <Field
          label="Server tool names"
          hint="One a line, as the server names them."
          error={fieldError("payload.settings.tools")}
        >
          {(props) => (
            <textarea
              {...props}
              rows={3}
              spellCheck={false}
              value={draft.mcpTools}
              onChange={(e) => setDraft((d) => ({ ...d, mcpTools: e.target.value }))}
            />
          )}
        </Field>
      )}
      {tool === undefined || stored === undefined ? (
        <p className="hint">The server's tools are listed when the tool is saved.</p>
      ) : listed.length === 0 ? (
        <p data-testid="server-tools-empty">
          {awaitingConnection ? "Connect to list its tools." : "The server listed no tools."}
        </p>
      ) : (
        <table data-testid="server-tools">
          <caption>
            Listed {formatDate(dateOf(stored.listedAt), "never")}
            {picking && <span className="muted"> · tick those the model sees, then save</span>}
          </caption>
          <thead>
            <tr>
              {picking && <th scope="col">Exposed</th>}
              <th scope="col">Name</th>
              <th scope="col">Description</th>
              <th scope="col">The model calls it</th>
            </tr>
          </thead>
          <tbody>
            {listed.map((one) => (
              <tr key={one.name} data-exposed={String(one.exposedAs !== null)}>
                {picking && (
                  <td>
                    <input
                      type="checkbox"
                      aria-label={`Expose ${one.name}`}
                      checked={chosen.includes(one.name)}
                      onChange={(e) => tick(one.name, e.target.checked)}
                    />
                  </td>
                )}
                <th scope="row">
                  <code>{one.name}</code>
                </th>
                <td>{one.description}</td>
                <td>
                  {one.exposedAs === null ? (
                    <span className="muted">not exposed: {one.reason ?? "no reason given"}</span>
                  ) : (
                    <code>{one.exposedAs}</code>
                  )}
                </td>
              </tr>
            ))}
            {picking &&
              chosen
                .filter((name) => !listedNames.includes(name))
                .map((name) => (
                  <tr key={`unlisted-${name}`} data-exposed="false">
                    <td>
                      <input
                        type="checkbox"
                        aria-label={`Expose ${name}`}
                        checked
                        onChange={(e) => tick(name, e.target.checked)}
                      />
                    </td>
                    <th scope="row">
                      <code>{name}</code>
                    </th>
                    <td colSpan={2} className="muted">
                      Not among the server's tools as listed
                    </td>
                  </tr>
                ))}
          </tbody>
        </table>
      )}
      {tool !== undefined && stored !== undefined && !awaitingConnection && (
        <div className="actions">
          <button type="button" className="secondary" onClick={() => listAgain(tool)} disabled={listing}>
            {listing ? "Listing…" : "List again"}
          </button>
        </div>
      )}
    </div>
  )
}
