import { type FormEvent, useEffect, useState } from "react"
import type { Agent } from "../../../src/Agents/Api.ts"
import type { AgentId } from "../../../src/Domain/Ids.ts"
import { navigate, type Route, withQuery } from "../router.tsx"
import { ApiProblem, call } from "../shared/api.ts"
import { allPages, pageQuery, useLoad, usePaged, useSelected } from "../shared/data.ts"

/** The tenant's agents, a page at a time. */
export const useAgentList = () => usePaged((cursor) => call((c) => c.agents.list({ query: pageQuery(cursor) })), [])

/** Every agent of the tenant, for choosing one (chat, steps, members); undefined until read. */
export const useAllAgents = () => {
  const agents = useLoad(
    () => allPages((cursor, limit) => call((c) => c.agents.list({ query: pageQuery(cursor, limit) }))),
    []
  )
  return { agents: agents.data, error: agents.error }
}

export interface AgentDraft {
  name: string
  description: string
  model: string
  instructions: string
  memoryEnabled: boolean
  status: "active" | "inactive"
  toolIds: Array<string>
}

const emptyDraft: AgentDraft = {
  name: "",
  description: "",
  model: "local",
  instructions: "",
  memoryEnabled: true,
  status: "active",
  toolIds: []
}

const draftOf = (agent: Agent): AgentDraft => ({
  name: agent.name,
  description: agent.description,
  model: agent.model,
  instructions: agent.instructions,
  memoryEnabled: agent.memoryEnabled,
  status: agent.status,
  toolIds: [...agent.toolIds]
})

/** Whether two lists of ids hold the same ids, in any order. */
const sameIds = (a: ReadonlyArray<string>, b: ReadonlyArray<string>) =>
  a.length === b.length && a.every((id) => b.includes(id))

/**
 * The request body of a draft. An edit sends the tools only when they were
 * changed: an agent keeps a tool set inactive since, and the service refuses
 * inactive tools in what it is sent.
 */
export const agentPayload = (draft: AgentDraft, agent: Agent | undefined) => {
  if (agent === undefined || !sameIds(draft.toolIds, agent.toolIds)) return draft
  const { toolIds: _, ...rest } = draft
  return rest
}

/**
 * The agents screen's data: the list, the agent selected in the URL (`?agent=`)
 * in a form to edit, or a new one's form; saving and deleting.
 */
export const useAgents = (route: Route, selected: AgentId | null) => {
  const list = useAgentList()
  const selection = useSelected(list, selected, (id) => call((c) => c.agents.get({ params: { id } })))
  const agent = selection.item
  const [draft, setDraft] = useState<AgentDraft>(emptyDraft)
  const [problem, setProblem] = useState<unknown>()
  const [saved, setSaved] = useState("")

  useEffect(() => {
    setDraft(agent ? draftOf(agent) : emptyDraft)
    setProblem(undefined)
  }, [agent?.id, agent?.updatedAt.getTime()])

  const save = async (event: FormEvent) => {
    event.preventDefault()
    setProblem(undefined)
    setSaved("")
    try {
      if (agent) {
        await call((c) => c.agents.update({ params: { id: agent.id }, payload: agentPayload(draft, agent) }))
        setSaved(`Saved ${draft.name}.`)
      } else {
        const made = await call((c) => c.agents.create({ payload: draft }))
        setSaved(`Created ${made.name}.`)
        navigate(withQuery(route, { agent: made.id }), { replace: true })
      }
      list.reload()
      selection.reload()
    } catch (error) {
      setProblem(error)
    }
  }

  const remove = async (target: Agent) => {
    try {
      await call((c) => c.agents.remove({ params: { id: target.id } }))
      navigate(withQuery(route, { agent: null }), { replace: true })
      list.reload()
    } catch (error) {
      setProblem(error)
    }
  }

  const set =
    <K extends keyof AgentDraft>(key: K) =>
    (value: AgentDraft[K]) =>
      setDraft((d) => ({ ...d, [key]: value }))
  const fieldError = (field: string) =>
    problem instanceof ApiProblem ? problem.messagesFor(`payload.${field}`)[0] : undefined

  return { list, agent, draft, set, save, remove, problem, saved, fieldError }
}
