import { call } from "../shared/api.ts"
import { useLoad } from "../shared/data.ts"

/** Which first steps the account has taken, each read from its own data. */
export const useProgress = () =>
  useLoad(async () => {
    const [keys, agents, executions] = await Promise.all([
      call((c) => c.keys.list({ query: { limit: 1 } })),
      call((c) => c.agents.list({ query: { limit: 20 } })),
      call((c) => c.executions.list({ query: { limit: 1 } }))
    ])
    // A chat leaves a conversation with an agent that remembers, and spends
    // model tokens with one that does not. (A newcomer's first agents are
    // enough to tell: the usage covers the rest.)
    const [conversations, usage] = await Promise.all([
      Promise.all(
        agents.data.map((agent) =>
          call((c) => c.agents.conversations({ params: { id: agent.id }, query: { limit: 1 } }))
        )
      ),
      call((c) => c.billing.usage({ query: { days: 90 } }))
    ])
    const chatted = conversations.some((page) => page.total > 0) || usage.days.some((day) => day.tokens > 0)
    return { keys: keys.total > 0, agents: agents.data.length > 0, chatted, orchestrations: executions.total > 0 }
  }, [])
