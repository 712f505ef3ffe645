import { type FormEvent, useEffect, useRef, useState } from "react"
import type { ChatResponse, Turn } from "../../../src/Agents/Api.ts"
import { call, urls } from "../api.ts"
import { ApiCall, formatDate, ProblemMessage, useLoad } from "../components.tsx"
import { navigate, type Route, withQuery } from "../router.tsx"
import { postEventStream } from "../sse.ts"

interface LiveTurn {
  readonly message: string
  readonly reply: string
  readonly done?: ChatResponse
  readonly stopped?: boolean
}

const Sources = ({ sources }: { readonly sources: ChatResponse["sources"] }) =>
  sources === undefined ? null : sources.length === 0 ? <p className="muted">No knowledge matched this message.</p> : (
    <details className="sources">
      <summary>{sources.length} source{sources.length === 1 ? "" : "s"}</summary>
      <ol>
        {sources.map((s) => <li key={s.chunkId}>chunk <code>{s.chunkId}</code> of document <code>{s.documentId}</code>, score {s.score.toFixed(3)}</li>)}
      </ol>
    </details>
  )

/** The chat playground: an agent and a conversation picked in the URL, replies streamed as they come, with a stop button. */
export const ChatScreen = ({ route }: { readonly route: Route }) => {
  const agentId = route.query.get("agent")
  const conversationId = route.query.get("conversation")
  const agents = useLoad(() => call((c) => c.agents.list({ query: { limit: 100 } })), [])
  const conversations = useLoad(
    () => agentId ? call((c) => c.agents.conversations({ params: { id: agentId as never }, query: { limit: 50 } })) : Promise.resolve(undefined),
    [agentId]
  )
  const turns = useLoad(
    () => agentId && conversationId
      ? call((c) => c.agents.turns({ params: { id: agentId as never, conversationId }, query: { limit: 100 } }))
      : Promise.resolve(undefined),
    [agentId, conversationId]
  )
  const [message, setMessage] = useState("")
  const [live, setLive] = useState<LiveTurn>()
  const [problem, setProblem] = useState<unknown>()
  const abort = useRef<AbortController>(undefined)
  const agent = agents.data?.data.find((a) => a.id === agentId)

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
        urls.agents.chat({ params: { id: agentId as never } }),
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
    if (done.conversationId !== conversationId) navigate(withQuery(route, { conversation: done.conversationId }), { replace: true })
    else turns.reload()
    conversations.reload()
  }, [live?.done])
  useEffect(() => {
    if (live?.done && turns.data?.data.some((t) => t.reply === live.done!.reply)) setLive(undefined)
  }, [turns.data])

  return (
    <>
      <h1>Chat</h1>
      <div className="toolbar">
        <label htmlFor="chat-agent">Agent</label>
        <select id="chat-agent" value={agentId ?? ""} onChange={(e) => navigate(withQuery(route, { agent: e.target.value, conversation: null }))}>
          <option value="">Choose an agent…</option>
          {agents.data?.data.filter((a) => a.status === "active").map((a) => <option key={a.id} value={a.id}>{a.name} ({a.model})</option>)}
        </select>
      </div>
      {agents.error !== undefined && <ProblemMessage problem={agents.error} />}
      {agentId && (
        <div className="split">
          <section aria-labelledby="conversations-title">
            <h2 id="conversations-title">Conversations</h2>
            <button type="button" className="secondary" onClick={() => navigate(withQuery(route, { conversation: null }))}>New conversation</button>
            {agent && !agent.memoryEnabled && <p className="muted">This agent does not remember conversations: each message stands alone.</p>}
            <ul className="list">
              {conversations.data?.data.map((c) => (
                <li key={c.id}>
                  <a
                    href={`/app${withQuery(route, { conversation: c.id })}`}
                    aria-current={c.id === conversationId ? "true" : undefined}
                    onClick={(e) => {
                      e.preventDefault()
                      navigate(withQuery(route, { conversation: c.id }))
                    }}
                  >
                    {formatDate(c.updatedAt)} <span className="muted">· {c.turns} turn{c.turns === 1 ? "" : "s"}</span>
                  </a>
                </li>
              ))}
            </ul>
          </section>
          <section aria-labelledby="messages-title">
            <h2 id="messages-title">{conversationId ? "Conversation" : "New conversation"}</h2>
            <ol className="messages" aria-live="polite" data-testid="messages">
              {turns.data?.data.map((t: Turn) => (
                <li key={t.index}>
                  <p className="you"><span className="who">You</span> {t.message}</p>
                  <p className="agent"><span className="who">{agent?.name ?? "Agent"}</span> {t.reply}</p>
                  <p className="muted meta">{t.model} · {t.tokens} tokens</p>
                </li>
              ))}
              {live && !(live.done && turns.data?.data.some((t) => t.reply === live.done!.reply)) && (
                <li data-testid="live-turn">
                  <p className="you"><span className="who">You</span> {live.message}</p>
                  <p className="agent"><span className="who">{agent?.name ?? "Agent"}</span> {live.reply}{streaming && <span className="muted"> …</span>}</p>
                  {live.done && <p className="muted meta" data-testid="reply-meta">{live.done.model} · {live.done.tokens} tokens</p>}
                  {live.done && <Sources sources={live.done.sources} />}
                  {live.stopped && <p className="muted">Stopped.</p>}
                </li>
              )}
            </ol>
            <ProblemMessage problem={problem} />
            <form onSubmit={send} className="chat-form">
              <label htmlFor="chat-message">Message</label>
              <textarea id="chat-message" rows={3} value={message} onChange={(e) => setMessage(e.target.value)} />
              <div className="actions">
                <button type="submit" disabled={streaming}>Send</button>
                {streaming && <button type="button" className="danger" onClick={() => abort.current?.abort()}>Stop</button>}
              </div>
            </form>
            <ApiCall
              call={{ method: "POST", path: `/api/v1/agents/${agentId}/chat`, body: { message: message || "Hello", ...(conversationId ? { conversationId } : {}) }, credential: "key" }}
            />
          </section>
        </div>
      )}
    </>
  )
}
