import { type FormEvent, useEffect, useRef, useState } from "react"
import type { ChatResponse } from "../../../src/Agents/Api.ts"
import type { AgentId } from "../../../src/Domain/Ids.ts"
import { useAllAgents } from "../agents/hooks.ts"
import { navigate, type Route, withQuery } from "../router.tsx"
import { call, urls } from "../shared/api.ts"
import { pageQuery, usePaged } from "../shared/data.ts"
import { postEventStream } from "../shared/sse.ts"

/** The turn being sent: its reply as streamed so far, then its stored form once done. */
export interface LiveTurn {
  readonly message: string
  readonly reply: string
  readonly done?: ChatResponse
  readonly stopped?: boolean
}

/**
 * The chat playground's data: the agents to choose from, the chosen agent's
 * conversations and the chosen conversation's turns (a page at a time), and
 * sending a message with its reply streamed, which can be stopped.
 */
export const useChat = (route: Route, agentId: AgentId | null, conversationId: string | null) => {
  const { agents, error: agentsError } = useAllAgents()
  const conversations = usePaged(
    agentId
      ? (cursor) => call((c) => c.agents.conversations({ params: { id: agentId }, query: pageQuery(cursor) }))
      : undefined,
    [agentId]
  )
  const turns = usePaged(
    agentId && conversationId
      ? (cursor) => call((c) => c.agents.turns({ params: { id: agentId, conversationId }, query: pageQuery(cursor) }))
      : undefined,
    [agentId, conversationId]
  )
  const [message, setMessage] = useState("")
  const [live, setLive] = useState<LiveTurn>()
  const [problem, setProblem] = useState<unknown>()
  const abort = useRef<AbortController>(undefined)
  const agent = agents?.find((a) => a.id === agentId)

  useEffect(() => () => abort.current?.abort(), [])

  const streaming = live !== undefined && live.done === undefined && !live.stopped && problem === undefined

  const send = async (event: FormEvent) => {
    event.preventDefault()
    if (!agentId || message.trim() === "" || streaming) return
    const sent = message
    setMessage("")
    setProblem(undefined)
    setLive({ message: sent, reply: "" })
    const controller = new AbortController()
    abort.current = controller
    try {
      await postEventStream(
        urls.agents.chat({ params: { id: agentId } }),
        { message: sent, ...(conversationId ? { conversationId } : {}) },
        (e) => {
          if (e.event === "delta") setLive((t) => t && { ...t, reply: t.reply + (e.data as { text: string }).text })
          else if (e.event === "done") setLive((t) => t && { ...t, done: e.data as ChatResponse })
          else if (e.event === "error") setProblem(e.data)
        },
        controller.signal
      )
    } catch (error) {
      if (controller.signal.aborted) setLive((t) => t && { ...t, stopped: true })
      else setProblem(error)
    }
  }

  // Once a reply is done it is part of the stored conversation: show that.
  useEffect(() => {
    const done = live?.done
    if (done === undefined) return
    if (done.conversationId !== conversationId)
      navigate(withQuery(route, { conversation: done.conversationId }), { replace: true })
    else turns.reload()
    conversations.reload()
  }, [live?.done])
  const stored = live?.done !== undefined && (turns.items?.some((t) => t.reply === live.done!.reply) ?? false)
  useEffect(() => {
    if (stored) setLive(undefined)
  }, [turns.items])

  return {
    agents,
    agentsError,
    agent,
    conversations,
    turns,
    message,
    setMessage,
    /** The turn in flight, until its stored form is shown. */
    live: stored ? undefined : live,
    streaming,
    problem,
    send,
    stop: () => abort.current?.abort()
  }
}
