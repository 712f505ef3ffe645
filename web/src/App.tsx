import { useEffect, useRef } from "react"
import { call } from "./api.ts"
import { ProblemMessage, useLoad } from "./components.tsx"
import { Link, navigate, type Route, useRoute } from "./router.tsx"
import { AgentsScreen } from "./screens/Agents.tsx"
import { AuthScreen } from "./screens/Auth.tsx"
import { ChatScreen } from "./screens/Chat.tsx"
import { KeysScreen } from "./screens/Keys.tsx"
import { KnowledgeScreen } from "./screens/Knowledge.tsx"
import { OrchestrationsScreen } from "./screens/Orchestrations.tsx"
import { OverviewScreen } from "./screens/Overview.tsx"
import { TeamsScreen } from "./screens/Teams.tsx"
import { UsageScreen } from "./screens/Usage.tsx"

const screens: ReadonlyArray<{ readonly path: string; readonly title: string; readonly render: (route: Route) => React.ReactNode }> = [
  { path: "/", title: "Getting started", render: () => <OverviewScreen /> },
  { path: "/keys", title: "API keys", render: () => <KeysScreen /> },
  { path: "/agents", title: "Agents", render: (route) => <AgentsScreen route={route} /> },
  { path: "/chat", title: "Chat", render: (route) => <ChatScreen route={route} /> },
  { path: "/orchestrations", title: "Orchestrations", render: (route) => <OrchestrationsScreen route={route} /> },
  { path: "/knowledge", title: "Knowledge", render: (route) => <KnowledgeScreen route={route} /> },
  { path: "/teams", title: "Teams", render: (route) => <TeamsScreen route={route} /> },
  { path: "/usage", title: "Usage and plan", render: (route) => <UsageScreen route={route} /> }
]

export const App = () => {
  const route = useRoute()
  const me = useLoad(() => call((c) => c.auth.me()).then((account) => account, (error: unknown) => {
    if (typeof error === "object" && error !== null && "status" in error && error.status === 401) return null
    throw error
  }), [])
  const main = useRef<HTMLElement>(null)
  const screen = screens.find((s) => s.path === route.path)

  // Each view names itself in the title, and focus moves to its content (for screen readers) on navigation.
  useEffect(() => {
    document.title = `${screen?.title ?? (route.path === "/register" ? "Create an account" : "Log in")} · Agent Host`
    main.current?.focus()
  }, [route.path])

  if (me.loading && me.data === undefined) return <p className="loading" role="status">Loading…</p>
  if (me.error !== undefined) return <main id="main"><ProblemMessage problem={me.error} /></main>
  if (me.data === null || me.data === undefined) {
    return <AuthScreen mode={route.path === "/register" ? "register" : "login"} onSignedIn={me.reload} />
  }
  if (route.path === "/login" || route.path === "/register") {
    queueMicrotask(() => navigate("/", { replace: true }))
    return null
  }

  const logout = async () => {
    await call((c) => c.auth.logout()).catch(() => undefined)
    navigate("/login", { replace: true })
    me.reload()
  }

  return (
    <>
      <a className="skip" href="#main">Skip to content</a>
      <header className="top">
        <span className="brand">Agent Host</span>
        <nav aria-label="Main">
          <ul>
            {screens.map((s) => (
              <li key={s.path}><Link to={s.path} aria-current={s.path === route.path ? "page" : undefined}>{s.title}</Link></li>
            ))}
            <li><a href="/docs">API reference</a></li>
          </ul>
        </nav>
        <div className="account">
          <span>{me.data.user.email}</span>
          <button type="button" className="secondary" onClick={logout}>Log out</button>
        </div>
      </header>
      <main id="main" ref={main} tabIndex={-1}>
        {screen ? screen.render(route) : (
          <>
            <h1>Not found</h1>
            <p>No screen here. <Link to="/">Back to the start</Link>.</p>
          </>
        )}
      </main>
    </>
  )
}
