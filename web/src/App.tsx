import { useEffect, useRef } from "react"
import { AgentsScreen } from "./agents/AgentsScreen.tsx"
import { ApprovalsScreen } from "./approvals/ApprovalsScreen.tsx"
import { AuthScreen } from "./auth/AuthScreen.tsx"
import { useSession } from "./auth/hooks.ts"
import { ChatScreen } from "./chat/ChatScreen.tsx"
import { KeysScreen } from "./keys/KeysScreen.tsx"
import { KnowledgeScreen } from "./knowledge/KnowledgeScreen.tsx"
import { OrchestrationsScreen } from "./orchestrations/OrchestrationsScreen.tsx"
import { OverviewScreen } from "./overview/OverviewScreen.tsx"
import { Link, navigate, type Route, useRoute } from "./router.tsx"
import { ProblemMessage } from "./shared/components.tsx"
import { SchedulesScreen } from "./schedules/SchedulesScreen.tsx"
import { SecretsScreen } from "./secrets/SecretsScreen.tsx"
import { TeamsScreen } from "./teams/TeamsScreen.tsx"
import { ToolsScreen } from "./tools/ToolsScreen.tsx"
import { UsageScreen } from "./usage/UsageScreen.tsx"

// Each feature's folder holds its data hooks (the only code that calls the
// API) and its screens (layout only); this shell picks a screen by the path.
const screens: ReadonlyArray<{
  readonly path: string
  readonly title: string
  readonly render: (route: Route) => React.ReactNode
}> = [
  { path: "/", title: "Getting started", render: () => <OverviewScreen /> },
  { path: "/keys", title: "API keys", render: () => <KeysScreen /> },
  { path: "/agents", title: "Agents", render: (route) => <AgentsScreen route={route} /> },
  { path: "/chat", title: "Chat", render: (route) => <ChatScreen route={route} /> },
  { path: "/orchestrations", title: "Orchestrations", render: (route) => <OrchestrationsScreen route={route} /> },
  { path: "/knowledge", title: "Knowledge", render: (route) => <KnowledgeScreen route={route} /> },
  { path: "/teams", title: "Teams", render: (route) => <TeamsScreen route={route} /> },
  { path: "/schedules", title: "Schedules", render: () => <SchedulesScreen /> },
  { path: "/approvals", title: "Approvals", render: () => <ApprovalsScreen /> },
  { path: "/tools", title: "Tools", render: (route) => <ToolsScreen route={route} /> },
  { path: "/secrets", title: "Secrets", render: () => <SecretsScreen /> },
  { path: "/usage", title: "Usage and plan", render: (route) => <UsageScreen route={route} /> }
]

export const App = () => {
  const route = useRoute()
  const session = useSession()
  const main = useRef<HTMLElement>(null)
  const screen = screens.find((s) => s.path === route.path)

  // Each view names itself in the title, and focus moves to its content (for screen readers) on navigation.
  useEffect(() => {
    document.title = `${screen?.title ?? (route.path === "/register" ? "Create an account" : "Log in")} · Agent Host`
    main.current?.focus()
  }, [route.path])

  if (session.loading && session.account === undefined)
    return (
      <p className="loading" role="status">
        Loading…
      </p>
    )
  if (session.error !== undefined)
    return (
      <main id="main">
        <ProblemMessage problem={session.error} />
      </main>
    )
  if (session.account === null || session.account === undefined) {
    return <AuthScreen mode={route.path === "/register" ? "register" : "login"} onSignedIn={session.reload} />
  }
  if (route.path === "/login" || route.path === "/register") {
    queueMicrotask(() => navigate("/", { replace: true }))
    return null
  }

  return (
    <>
      <a className="skip" href="#main">
        Skip to content
      </a>
      <header className="top">
        <span className="brand">Agent Host</span>
        <nav aria-label="Main">
          <ul>
            {screens.map((s) => (
              <li key={s.path}>
                <Link to={s.path} aria-current={s.path === route.path ? "page" : undefined}>
                  {s.title}
                </Link>
              </li>
            ))}
            <li>
              <a href="/docs">API reference</a>
            </li>
          </ul>
        </nav>
        <div className="account">
          <span>{session.account.user.email}</span>
          <button type="button" className="secondary" onClick={session.logout}>
            Log out
          </button>
        </div>
      </header>
      <main id="main" ref={main} tabIndex={-1}>
        {screen ? (
          screen.render(route)
        ) : (
          <>
            <h1>Not found</h1>
            <p>
              No screen here. <Link to="/">Back to the start</Link>.
            </p>
          </>
        )}
      </main>
    </>
  )
}
