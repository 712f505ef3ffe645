import { call } from "../api.ts"
import { useLoad } from "../components.tsx"
import { Link } from "../router.tsx"

/** The first-run checklist, each step read from the account's own data. */
export const OverviewScreen = () => {
  const progress = useLoad(async () => {
    const [keys, agents, executions] = await Promise.all([
      call((c) => c.keys.list()),
      call((c) => c.agents.list({ query: { limit: 20 } })),
      call((c) => c.executions.list({ query: { limit: 1 } }))
    ])
    // A chat leaves a conversation with an agent that remembers, and spends model tokens with one that does not.
    const [conversations, usage] = await Promise.all([
      Promise.all(agents.data.map((agent) => call((c) => c.agents.conversations({ params: { id: agent.id }, query: { limit: 1 } })))),
      call((c) => c.billing.usage({ query: { days: 90 } }))
    ])
    const chatted = conversations.some((page) => page.total > 0) || usage.days.some((day) => day.tokens > 0)
    return { keys: keys.total > 0, agents: agents.data.length > 0, chatted, orchestrations: executions.total > 0 }
  }, [])
  const done = progress.data
  const steps = [
    { key: "keys", done: done?.keys, title: "Make an API key", body: <><Link to="/keys">API keys</Link>: programs call the API with one.</> },
    { key: "agents", done: done?.agents, title: "Make an agent", body: <><Link to="/agents">Agents</Link>: a name, a model (<code>local</code> works offline) and instructions.</> },
    {
      key: "chat",
      done: done?.chatted,
      title: "Chat with it",
      body: <><Link to="/chat">Chat</Link>: talk to an agent, its reply streamed as it is written.</>
    },
    {
      key: "orchestrations",
      done: done?.orchestrations,
      title: "Run an orchestration",
      body: <><Link to="/orchestrations">Orchestrations</Link>: steps of agents, run in the background and followed live.</>
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
