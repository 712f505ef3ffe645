import type { ChatResponse, Turn } from "../../../src/Agents/Api.ts"
import { ConversationId } from "../../../src/Agents/Api.ts"
import { AgentId } from "../../../src/Domain/Ids.ts"
import { navigate, type Route, withQuery } from "../router.tsx"
import { ApiCall, formatDate, LoadMore, ProblemMessage } from "../shared/components.tsx"
import { queryId } from "../shared/ids.ts"
import { ToolCalls } from "../tools/ToolCalls.tsx"
import { useChat } from "./hooks.ts"

const Sources = ({ sources }: { readonly sources: ChatResponse["sources"] }) =>
  sources === undefined ? null : sources.length === 0 ? (
    <p className="muted">No knowledge matched this message.</p>
  ) : (
    <details className="sources">
      <summary>
        {sources.length} source{sources.length === 1 ? "" : "s"}
      </summary>
      <ol>
        {sources.map((s) => (
          <li key={s.chunkId}>
            chunk <code>{s.chunkId}</code> of document <code>{s.documentId}</code>, score {s.score.toFixed(3)}
          </li>
        ))}
      </ol>
    </details>
  )

/** The chat playground: an agent and a conversation picked in the URL, replies streamed as they come, with a stop button. */
export const ChatScreen = ({ route }: { readonly route: Route }) => {
  const agentId = queryId(route, "agent", AgentId)
  const conversationId = queryId(route, "conversation", ConversationId)
  const {
    agents,
    agentsError,
    agent,
    conversations,
    turns,
    message,
    setMessage,
    live,
    callsOf,
    streaming,
    problem,
    send,
    stop
  } = useChat(route, agentId, conversationId)

  return (
    <>
      <h1>Chat</h1>
      <div className="toolbar">
        <label htmlFor="chat-agent">Agent</label>
        <select
          id="chat-agent"
          value={agentId ?? ""}
          onChange={(e) => navigate(withQuery(route, { agent: e.target.value, conversation: null }))}
        >
          <option value="">Choose an agent…</option>
          {agents
            ?.filter((a) => a.status === "active")
            .map((a) => (
              <option key={a.id} value={a.id}>
                {a.name} ({a.model})
              </option>
            ))}
        </select>
      </div>
      {agentsError !== undefined && <ProblemMessage problem={agentsError} />}
      {agentId && (
        <div className="split">
          <section aria-labelledby="conversations-title">
            <h2 id="conversations-title">Conversations</h2>
            <button
              type="button"
              className="secondary"
              onClick={() => navigate(withQuery(route, { conversation: null }))}
            >
              New conversation
            </button>
            {agent && !agent.memoryEnabled && (
              <p className="muted">This agent does not remember conversations: each message stands alone.</p>
            )}
            <ul className="list">
              {conversations.items?.map((c) => (
                <li key={c.id}>
                  <a
                    href={`/app${withQuery(route, { conversation: c.id })}`}
                    aria-current={c.id === conversationId ? "true" : undefined}
                    onClick={(e) => {
                      e.preventDefault()
                      navigate(withQuery(route, { conversation: c.id }))
                    }}
                  >
                    {formatDate(c.updatedAt)}{" "}
                    <span className="muted">
                      · {c.turns} turn{c.turns === 1 ? "" : "s"}
                    </span>
                  </a>
                </li>
              ))}
            </ul>
            <LoadMore list={conversations} label="Load more conversations" />
          </section>
          <section aria-labelledby="messages-title">
            <h2 id="messages-title">{conversationId ? "Conversation" : "New conversation"}</h2>
            <ol className="messages" aria-live="polite" data-testid="messages">
              {turns.items?.map((t: Turn) => (
                <li key={t.index}>
                  <p className="you">
                    <span className="who">You</span> {t.message}
                  </p>
                  <ToolCalls calls={callsOf(t.index)} />
                  <p className="agent">
                    <span className="who">{agent?.name ?? "Agent"}</span> {t.reply}
                  </p>
                  <p className="muted meta">
                    {t.model} · {t.tokens} tokens
                  </p>
                </li>
              ))}
              {live && (
                <li data-testid="live-turn">
                  <p className="you">
                    <span className="who">You</span> {live.message}
                  </p>
                  <ToolCalls calls={live.calls} />
                  <p className="agent">
                    <span className="who">{agent?.name ?? "Agent"}</span> {live.reply}
                    {streaming && <span className="muted"> …</span>}
                  </p>
                  {live.done && (
                    <p className="muted meta" data-testid="reply-meta">
                      {live.done.model} · {live.done.tokens} tokens
                    </p>
                  )}
                  {live.done && <Sources sources={live.done.sources} />}
                  {live.stopped && <p className="muted">Stopped.</p>}
                </li>
              )}
            </ol>
            <LoadMore list={turns} label="Load later messages" />
            <ProblemMessage problem={problem} />
            <form onSubmit={send} className="chat-form">
              <label htmlFor="chat-message">Message</label>
              <textarea id="chat-message" rows={3} value={message} onChange={(e) => setMessage(e.target.value)} />
              <div className="actions">
                <button type="submit" disabled={streaming}>
                  Send
                </button>
                {streaming && (
                  <button type="button" className="danger" onClick={stop}>
                    Stop
                  </button>
                )}
              </div>
            </form>
            <ApiCall
              call={{
                method: "POST",
                path: `/api/v1/agents/${agentId}/chat`,
                body: { message: message || "Hello", ...(conversationId ? { conversationId } : {}) },
                credential: "key"
              }}
            />
          </section>
        </div>
      )}
    </>
  )
}
