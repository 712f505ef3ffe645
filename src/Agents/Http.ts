import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Stream from "effect/Stream"
import type * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as HttpApiBuilder from "effect/http-api/HttpApiBuilder"
import { Api } from "../Api.ts"
import { CurrentPrincipal } from "../Auth/Api.ts"
import type { AgentId } from "../Domain/Ids.ts"
import { withBudgetHeaders } from "../Billing/Budget.ts"
import { forTenant, jsonPages, managementHandlers } from "../Http/Management.ts"
import { EventStreams } from "../Http/EventStreams.ts"
import * as ServerSentEvents from "../Http/ServerSentEvents.ts"
import { Agents } from "./Agents.ts"
import { AgentList, type ChatRequest, V1AgentList } from "./Api.ts"
import { Chat } from "./Chat.ts"
import type { ReplyEvent } from "./Conversation.ts"
import * as Traced from "../Observability/Traced.ts"

/**
 * Server-sent events: the tool calls' events (`tool.called`, `tool.succeeded`, `tool.failed`) of an agent
 * with tools, `delta` events, then `done` with the response, or `error` with a problem.
 */
const toEventStream = <E extends { readonly status: number }>(events: Stream.Stream<ReplyEvent, E>) =>
  ServerSentEvents.response(
    events.pipe(
      Stream.map((event): ServerSentEvents.ServerSentEvent => {
        switch (event._tag) {
          case "Delta":
            return { event: "delta", data: { text: event.text } }
          case "Done":
            return { event: "done", data: event.response }
          case "Tool":
            return { event: event.event, data: event.data }
        }
      }),
      Stream.catch((problem) => Stream.make({ event: "error", data: problem }))
    )
  )

const wantsEventStream = (request: HttpServerRequest.HttpServerRequest) =>
  (request.headers.accept ?? "").includes("text/event-stream")

/** A chat, as JSON or (on `Accept: text/event-stream`) as events, with a key or a session alike. */
const chatHandler = (chat: Chat["Service"], streams: EventStreams["Service"]) =>
  Traced.fn(function* ({
    params,
    payload,
    request
  }: {
    readonly params: { readonly id: AgentId }
    readonly payload: ChatRequest
    readonly request: HttpServerRequest.HttpServerRequest
  }) {
    const { tenantId } = yield* CurrentPrincipal
    if (wantsEventStream(request)) {
      // A streamed chat holds one of the tenant's event stream places while it
      // streams, taken once the request has passed its checks: a bad request
      // gets its own problem, not the cap's.
      return toEventStream(yield* withBudgetHeaders(chat.stream(tenantId, params.id, payload, streams.hold(tenantId))))
    }
    return yield* withBudgetHeaders(chat.send(tenantId, params.id, payload))
  })

export const AgentsHttp = HttpApiBuilder.group(
  Api,
  "agents",
  Traced.fn(function* (handlers) {
    const agents = yield* Agents
    const chat = yield* Chat
    const streams = yield* EventStreams
    const listJson = jsonPages(AgentList)
    return handlers.handleAll({
      ...managementHandlers(agents),
      list: forTenant((tenantId, { query }) => Effect.map(agents.list(tenantId, query), listJson)),
      conversations: forTenant((tenantId, { params, query }) => chat.conversations(tenantId, params.id, query)),
      turns: forTenant((tenantId, { params, query }) => chat.turns(tenantId, params.id, params.conversationId, query)),
      forget: forTenant((tenantId, { params }) => chat.forget(tenantId, params.id, params.conversationId)),
      toolCall: forTenant((tenantId, { params }) =>
        chat.toolCall(tenantId, params.id, params.conversationId, params.turnId, params.callId)
      ),
      chat: chatHandler(chat, streams)
    })
  })
)

export const AgentsV1Http = HttpApiBuilder.group(
  Api,
  "v1Agents",
  Traced.fn(function* (handlers) {
    const agents = yield* Agents
    const chat = yield* Chat
    const streams = yield* EventStreams
    const listJson = jsonPages(V1AgentList)
    return handlers.handleAll({
      list: forTenant((tenantId, { query }) =>
        Effect.map(agents.list(tenantId, query, { activeOnly: true }), listJson)
      ),
      toolCall: forTenant((tenantId, { params }) =>
        chat.toolCall(tenantId, params.id, params.conversationId, params.turnId, params.callId)
      ),
      chat: chatHandler(chat, streams)
    })
  })
)

export const layer = Layer.mergeAll(AgentsHttp, AgentsV1Http).pipe(
  Layer.provide([Agents.layer, Chat.layer, EventStreams.layer])
)
