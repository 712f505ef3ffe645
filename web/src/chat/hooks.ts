import { type FormEvent, useEffect, useRef, useState } from "react"
import type { ChatResponse, ChatToolEvent } from "../../../src/Agents/Api.ts"
import type { AgentId } from "../../../src/Domain/Ids.ts"
import { useAllAgents } from "../agents/hooks.ts"
import { navigate, type Route, withQuery } from "../router.tsx"
import { call, urls } from "../shared/api.ts"
import { pageQuery, usePaged } from "../shared/data.ts"
import { postEventStream } from "../shared/sse.ts"
import type { ToolCallView } from "../tools/ToolCalls.tsx"

/** The turn being sent: its reply as streamed so far, then its stored form once done. */
export interface LiveTurn {
  readonly message: string
  readonly reply: string
  /** The calls its turn made, from the tool events as they come. */
  readonly calls: ReadonlyArray<ToolCallView>
  readonly done?: ChatResponse
  readonly stopped?: boolean
}

/** A tool event applied to the calls seen so far: a call added when called, then ended with its result or error. */
const withToolEvent = (
  calls: ReadonlyArray<ToolCallView>,
  name: string,
  e: typeof ChatToolEvent.Type
): ReadonlyArray<ToolCallView> => {
  if (name === "tool.called") {
    const call: ToolCallView = {
      callId: e.callId,
      tool: e.tool,
      status: "running",
      arguments: e.arguments,
      ...(e.attempt !== undefined ? { attempts: e.attempt } : {})
    }
    return calls.some((c) => c.callId === e.callId)
      ? calls.map((c) => (c.callId === e.callId ? { ...c, ...call } : c))
      : [...calls, call]
  }
  const ended: Partial<ToolCallView> =
    name === "tool.succeeded"
      ? { status: "succeeded", result: e.result ?? null, durationMs: e.durationMs ?? null }
      : { status: "failed", error: e.error ?? null, errorKind: e.errorKind ?? null, durationMs: e.durationMs ?? null }
  return calls.some((c) => c.callId === e.callId)
    ? calls.map((c) => (c.callId === e.callId ? { ...c, ...ended } : c))
    : [...calls, { callId: e.callId, tool: e.tool, status: "running", ...ended }]
}

/** The calls of a finished turn: as its events told them, or as its response names them when no event came. */
const finalCalls = (calls: ReadonlyArray<ToolCallView>, done: ChatResponse): ReadonlyArray<ToolCallView> =>
  done.toolCalls === undefined
    ? calls
    : done.toolCalls.map((named) => {
        const seen = calls.find((c) => c.callId === named.callId)
        return {
          ...seen,
          callId: named.callId,
          tool: named.tool,
          status: named.status,
          durationMs: named.durationMs,
          ...(named.error !== undefined ? { error: named.error } : {})
        }
      })

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
  // The stored history keeps a turn's message and reply, not its calls: the
  // calls of the turns sent from this page are kept here, by conversation and
  // turn index, so a reply keeps them once it is shown as stored.
  const [turnCalls, setTurnCalls] = useState<Record<string, ReadonlyArray<ToolCallView>>>({})
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
    setLive({ message: sent, reply: "", calls: [] })
    const controller = new AbortController()
    abort.current = controller
    try {
      await postEventStream(
        urls.agents.chat({ params: { id: agentId } }),
        { message: sent, ...(conversationId ? { conversationId } : {}) },
        (e) => {
          if (e.event === "delta") setLive((t) => t && { ...t, reply: t.reply + (e.data as { text: string }).text })
          else if (e.event === "done")
            setLive((t) => {
              if (t === undefined) return t
              const done = e.data as ChatResponse
              return { ...t, done, calls: finalCalls(t.calls, done) }
            })
          else if (e.event.startsWith("tool."))
            setLive((t) => t && { ...t, calls: withToolEvent(t.calls, e.event, e.data as typeof ChatToolEvent.Type) })
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
  const storedTurn = live?.done === undefined ? undefined : turns.items?.findLast((t) => t.reply === live.done!.reply)
  const stored = storedTurn !== undefined
  useEffect(() => {
    if (!stored) return
    if (live !== undefined && live.calls.length > 0 && conversationId !== null) {
      const key = `${conversationId}/${storedTurn.index}`
      setTurnCalls((kept) => ({ ...kept, [key]: live.calls }))
    }
    setLive(undefined)
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
    /** The calls a stored turn made, when it was sent from this page. */
    callsOf: (index: number) =>
      // Until the effect above keeps them, the stored form of the live turn shows the live calls.
      storedTurn?.index === index && live !== undefined
        ? live.calls
        : conversationId === null
          ? undefined
          : turnCalls[`${conversationId}/${index}`],
    streaming,
    problem,
    send,
    stop: () => abort.current?.abort()
  }
}
