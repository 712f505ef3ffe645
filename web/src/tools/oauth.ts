import { useEffect, useState } from "react"
import type { ToolId } from "../../../src/Domain/Ids.ts"
import type { OAuthStatus as OAuthStatusSchema } from "../../../src/Tools/Api.ts"
import type { Tool } from "../../../src/Tools/Tool.ts"
import { navigate, type Route, withQuery } from "../router.tsx"
import { call } from "../shared/api.ts"
import { useLoad } from "../shared/data.ts"

// An mcp tool whose server asks for OAuth: its connection's status, and
// connecting (the browser goes to the authorization server, which sends it
// back to /app/tools?tool=<id>&oauth=connected, or oauth=error&detail=...)
// and disconnecting.

/** A tool's OAuth connection, as `GET /api/tools/{id}/oauth` answers it. */
export type OAuthStatus = typeof OAuthStatusSchema.Type

/** How the browser came back from the authorization server, for the tool it was for. */
export interface OAuthOutcome {
  readonly toolId: string
  readonly connected: boolean
  readonly detail: string
}

/** Whether an mcp tool, as stored, authenticates with OAuth rather than headers. */
export const usesOAuth = (tool: Tool | undefined) =>
  tool !== undefined && tool.settings.kind === "mcp" && "auth" in tool.settings && tool.settings.auth === "oauth"

/** Starting a connection by hand (for the screen's "same with the API"). */
export const oauthStartCall = (id: string) => ({ method: "POST", path: `/api/tools/${id}/oauth/start` })

/**
 * The OAuth side of the tool selected: its status (read when the stored tool
 * uses OAuth), connecting, disconnecting, and the outcome of a connection the
 * browser came back from, taken out of the URL so that it shows once.
 */
export const useOAuth = (
  route: Route,
  selected: ToolId | null,
  tool: Tool | undefined,
  report: { readonly problem: (error: unknown) => void; readonly saved: (text: string) => void }
) => {
  const enabled = usesOAuth(tool)
  const id = tool?.id
  const status = useLoad(
    () =>
      enabled && id !== undefined ? call((c) => c.tools.oauthStatus({ params: { id } })) : Promise.resolve(undefined),
    [id, enabled, tool?.updatedAt.getTime()]
  )
  const [outcome, setOutcome] = useState<OAuthOutcome>()
  const [busy, setBusy] = useState(false)

  const returned = route.query.get("oauth")
  useEffect(() => {
    if (returned === null) return
    if (selected !== null) {
      setOutcome({ toolId: selected, connected: returned === "connected", detail: route.query.get("detail") ?? "" })
    }
    navigate(withQuery(route, { oauth: null, detail: null }), { replace: true })
  }, [returned])

  const connect = async () => {
    if (id === undefined) return
    report.problem(undefined)
    setOutcome(undefined)
    setBusy(true)
    try {
      const started = await call((c) => c.tools.oauthStart({ params: { id } }))
      // The authorization server's page: it sends the browser back here when done.
      window.location.assign(started.authorizationUrl)
    } catch (error) {
      report.problem(error)
      setBusy(false)
    }
  }

  const disconnect = async () => {
    if (id === undefined || tool === undefined) return
    report.problem(undefined)
    setOutcome(undefined)
    setBusy(true)
    try {
      await call((c) => c.tools.oauthDisconnect({ params: { id } }))
      report.saved(`Disconnected ${tool.name}.`)
      status.reload()
    } catch (error) {
      report.problem(error)
    } finally {
      setBusy(false)
    }
  }

  return {
    enabled,
    status: enabled ? status.data : undefined,
    statusError: enabled ? status.error : undefined,
    outcome: outcome !== undefined && outcome.toolId === selected ? outcome : undefined,
    busy,
    connect,
    disconnect,
    reload: status.reload
  }
}
