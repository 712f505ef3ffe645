import { Link } from "../router.tsx"
import { useProgress } from "./hooks.ts"

/** The first-run checklist, each step read from the account's own data. */
export const OverviewScreen = () => {
  const progress = useProgress()
  const done = progress.data
  const steps = [
    {
      key: "keys",
      done: done?.keys,
      title: "Make an API key",
      body: (
        <>
          <Link to="/keys">API keys</Link>: programs call the API with one.
        </>
      )
    },
    {
      key: "agents",
      done: done?.agents,
      title: "Make an agent",
      body: (
        <>
          <Link to="/agents">Agents</Link>: a name, a model (<code>local</code> works offline) and instructions.
        </>
      )
    },
    {
      key: "chat",
      done: done?.chatted,
      title: "Chat with it",
      body: (
        <>
          <Link to="/chat">Chat</Link>: talk to an agent, its reply streamed as it is written.
        </>
      )
    },
    {
      key: "orchestrations",
      done: done?.orchestrations,
      title: "Run an orchestration",
      body: (
        <>
          <Link to="/orchestrations">Orchestrations</Link>: steps of agents, run in the background and followed live.
        </>
      )
    }
  ]
  return (
    <>
      <h1>Getting started</h1>
      <ol className="checklist" aria-busy={progress.loading}>
        {steps.map((step) => (
          <li key={step.key} data-testid={`step-${step.key}`} data-done={step.done ? "true" : "false"}>
            <span className="mark" aria-hidden="true">
              {step.done ? "✓" : "○"}
            </span>
            <div>
              <h2>
                {step.title} <span className="visually-hidden">{step.done ? "(done)" : "(to do)"}</span>
              </h2>
              {step.body}
            </div>
          </li>
        ))}
      </ol>
    </>
  )
}
