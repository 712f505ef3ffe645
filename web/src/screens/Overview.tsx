import { call } from "../api.ts"
import { ApiCall, useLoad } from "../components.tsx"
import { Link } from "../router.tsx"

/** The first-run checklist, each step read from the account's own data. */
export const OverviewScreen = () => {
  const progress = useLoad(async () => {
    const [keys, agents, orchestrations, usage] = await Promise.all([
      call((c) => c.keys.list()),
      call((c) => c.agents.list({ query: { limit: 20 } })),
      call((c) => c.orchestrations.list({ query: { limit: 1 } })),
      call((c) => c.billing.usage({ query: { days: 90 } }))
    ])
    // A chat spends model tokens: any in the last 90 days counts.
    const tokens = usage.days.reduce((sum, day) => sum + day.tokens, 0)
    return { keys: keys.total > 0, agents: agents.data.length > 0, chatted: tokens > 0, orchestrations: orchestrations.data.length > 0 }
  }, [])
  const done = progress.data
  const steps = [
    { key: "keys", done: done?.keys, title: "Make an API key", body: <><Link to="/keys">API keys</Link>: programs call the API with one.</> },
    { key: "agents", done: done?.agents, title: "Make an agent", body: <><Link to="/agents">Agents</Link>: a name, a model (<code>local</code> works offline) and instructions.</> },
    {
      key: "chat",
      done: done?.chatted,
      title: "Chat with it",
      body: <ApiCall title="Chat with an API key" call={{ method: "POST", path: "/api/v1/agents/AGENT_ID/chat", body: { message: "Hello" }, credential: "key" }} />
    },
    {
      key: "orchestrations",
      done: done?.orchestrations,
      title: "Run an orchestration",
      body: <ApiCall title="Define one" call={{ method: "POST", path: "/api/orchestrations", body: { name: "Summarise", steps: [{ id: "s1", agentId: "AGENT_ID", prompt: "Summarise: {{input}}" }] } }} />
    }
  ]
  return (
    <>
      <h1>Getting started</h1>
      <ol className="checklist" aria-busy={progress.loading}>
        {steps.map((step) => (
          <li key={step.key} data-testid={`step-${step.key}`} data-done={step.done ? "true" : "false"}>
            <span className="mark" aria-hidden="true">{step.done ? "✓" : "○"}</span>
            <div>
              <h2>{step.title} <span className="visually-hidden">{step.done ? "(done)" : "(to do)"}</span></h2>
              {step.body}
            </div>
          </li>
        ))}
      </ol>
    </>
  )
}
