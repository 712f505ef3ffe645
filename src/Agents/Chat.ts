import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Pull from "effect/Pull"
import type * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import { TokenBudget } from "../Billing/Budget.ts"
import { AppConfig } from "../Config.ts"
import { decodeCursor, encodeCursor } from "../Domain/Cursor.ts"
import { type AgentId, newId, type TenantId } from "../Domain/Ids.ts"
import {
  BadGateway,
  GatewayTimeout,
  invalidField,
  NotFound,
  ServiceUnavailable,
  TokenBudgetSpent,
  OutputInvalid,
  type TooManyStreams
} from "../Domain/Problems.ts"
import { toSource } from "../Knowledge/Grounding.ts"
import { KnowledgeSearch } from "../Knowledge/Search.ts"
import { Agents } from "./Agents.ts"
import { type ChatRequest, isConversationId, isTurnIndex } from "./Api.ts"
import { defaultPageSize } from "../Domain/Page.ts"
import {
  type ChatEvent,
  type ChatFailed,
  chatScope,
  Conversation,
  entityId,
  makeTurns,
  type ReplyEvent
} from "./Conversation.ts"
import { AgentsRepo } from "./Repo.ts"
import { policyBounds } from "../Tools/Tool.ts"
import { defaultMaxToolCallsPerTurn } from "../Tools/Loop.ts"
import { ToolCallsRepo } from "../Tools/CallsRepo.ts"
import * as Traced from "../Observability/Traced.ts"

const unreachable = new ServiceUnavailable({ detail: "The conversation could not be reached; try again" })

/** A model failure as the problem a client gets; the cluster's own failures mean the conversation is unreachable. */
const toProblem = (error: { readonly _tag: string }) => {
  if (error._tag !== "ChatFailed") return unreachable
  return fromChatFailed(error as ChatFailed)
}

const fromChatFailed = (error: ChatFailed) => {
  switch (error.reason) {
    case "Timeout":
      return new GatewayTimeout({ detail: error.message })
    case "ProviderError":
      return new BadGateway({ detail: error.message })
    case "NotConfigured":
    case "UnknownModel":
    case "DatabaseUnavailable":
      return new ServiceUnavailable({ detail: error.message })
    case "InvalidOutput":
      return new OutputInvalid({ detail: error.message, errors: error.problems ?? [] })
    case "TokenBudgetSpent":
      // The turn's reservation was refused: the tokens left are spent or held by calls in flight.
      return error.spent === undefined
        ? new ServiceUnavailable({ detail: error.message })
        : new TokenBudgetSpent({ detail: error.message, ...error.spent })
  }
}

/** Chat with an agent, and the conversations it remembers. */
export class Chat extends Context.Service<Chat>()("agent-host/Chat", {
  make: Effect.gen(function* () {
    const agents = yield* Agents
    const repo = yield* AgentsRepo
    const config = yield* AppConfig
    const budget = yield* TokenBudget
    const knowledge = yield* KnowledgeSearch
    const clientFor = yield* Conversation.client
    const toolCalls = yield* ToolCallsRepo
    // Turns of agents without memory: nothing is kept per conversation, so
    // they run here, without a trip through the cluster.
    const stateless = yield* makeTurns
    // A turn may take every retry of the model call; past that the cluster is not answering.
    const callBound = Duration.sum(
      Duration.times(config.modelTimeout, config.modelMaxRetries + 1),
      Duration.seconds(30 * (config.modelMaxRetries + 1))
    )
    // A turn with tools may make a model call per call it asks for, and one more for its answer, and wait
    // for each tool up to the longest timeout a tool may have.
    const loopBound = Duration.sum(
      Duration.times(callBound, defaultMaxToolCallsPerTurn + 1),
      Duration.millis(defaultMaxToolCallsPerTurn * policyBounds.timeoutMs.maximum)
    )

    const prepare = Traced.fn("Chat.prepare")(function* (tenantId: TenantId, agentId: AgentId, request: ChatRequest) {
      if (request.message.trim() === "") return yield* invalidField("message", "Expected a non-empty message")
      if (request.message.length > config.maxMessageChars) {
        return yield* invalidField("message", `Expected at most ${config.maxMessageChars} characters`)
      }
      const agent = yield* agents.get(tenantId, agentId)
      if (agent.status !== "active") return yield* new NotFound({ detail: `No active agent ${agentId}` })
      // Refused at once when the day's tokens are spent; the turn reserves its
      // worst case, and settles its tokens, where its prompt is made (Conversation).
      const standing = yield* budget.admit(tenantId, agent.model)
      // The message is the query: what the agent is asked is what it looks up.
      const grounded = agent.knowledgeIds.length > 0
      const found = grounded
        ? yield* knowledge.search({ tenantId, knowledgeIds: agent.knowledgeIds, query: request.message })
        : []
      const conversationId = request.conversationId ?? newId()
      const tools = agent.toolIds.length > 0
      return {
        turns: agent.memoryEnabled ? entityTurns(entityId(tenantId, agentId, conversationId)) : stateless,
        bound: tools || (agent.responseFormat ?? null) !== null ? loopBound : callBound,
        input: {
          tenantId,
          agentId,
          conversationId,
          message: request.message,
          model: agent.model,
          instructions: agent.instructions,
          memoryEnabled: agent.memoryEnabled,
          ...(grounded ? { sources: found.map(toSource) } : {}),
          ...(standing === undefined ? {} : { plan: standing.plan }),
          ...(tools ? { toolIds: agent.toolIds } : {}),
          ...(agent.responseFormat === null || agent.responseFormat === undefined
            ? {}
            : { responseFormat: agent.responseFormat })
        }
      }
    })

    // A conversation with memory is its entity's: one turn at a time, on the node that holds it.
    const entityTurns = (id: string) => {
      const client = clientFor(id)
      return { send: client.Send, streamReply: client.StreamReply }
    }

    const send = Traced.fn("Chat.send")(function* (tenantId: TenantId, agentId: AgentId, request: ChatRequest) {
      const { bound, input, turns } = yield* prepare(tenantId, agentId, request)
      return yield* turns
        .send(input)
        .pipe(
          Effect.mapError(toProblem),
          Effect.timeoutOrElse({ duration: bound, orElse: () => Effect.fail(unreachable) })
        )
    })

    /**
     * The reply as events, for the request's scope, once the turn has
     * reserved its tokens: what refuses the chat until then (the request,
     * the agent, the budget, `beforeStart`) fails this, a problem before the
     * response starts; what fails after ends the stream with a problem.
     * `beforeStart` (the stream's place) comes after every check of the
     * request, just before the turn starts.
     */
    const stream = Traced.fn("Chat.stream")(function* (
      tenantId: TenantId,
      agentId: AgentId,
      request: ChatRequest,
      beforeStart: Effect.Effect<void, TooManyStreams, Scope.Scope>
    ) {
      const { bound, input, turns } = yield* prepare(tenantId, agentId, request)
      yield* beforeStart
      const pull = yield* Stream.toPull(
        (turns.streamReply(input) as Stream.Stream<ChatEvent, { readonly _tag: string }>).pipe(
          Stream.mapError(toProblem),
          Stream.timeoutOrElse({ duration: bound, orElse: () => Stream.fail(unreachable) })
        )
      )
      // Up to `Started`: the turn's failures until then are the request's.
      let ended = false
      let first: ReadonlyArray<ChatEvent> = []
      while (!ended && !first.some((event) => event._tag === "Started")) {
        first = yield* Pull.catchDone(pull, () =>
          Effect.sync(() => {
            ended = true
            return []
          })
        )
      }
      const rest = ended ? Stream.empty : Stream.fromPull(Effect.succeed(pull))
      return Stream.concat(Stream.fromArray(first), rest).pipe(
        Stream.filter((event): event is ReplyEvent => event._tag !== "Started")
      )
    })

    const conversations = Traced.fn("Chat.conversations")(function* (
      tenantId: TenantId,
      agentId: AgentId,
      page: { readonly limit?: number | undefined; readonly cursor?: string | undefined }
    ) {
      yield* agents.get(tenantId, agentId)
      const after = yield* decodeCursor(page.cursor, isConversationId)
      return yield* repo.conversations(tenantId, agentId, { after, limit: page.limit ?? defaultPageSize })
    })

    /** A page of a conversation's turns, oldest first; the cursor is the last turn's index. */
    const turns = Traced.fn("Chat.turns")(function* (
      tenantId: TenantId,
      agentId: AgentId,
      conversationId: string,
      page: { readonly limit?: number | undefined; readonly cursor?: string | undefined }
    ) {
      yield* agents.get(tenantId, agentId)
      const cursor = yield* decodeCursor(page.cursor, isTurnIndex)
      const total = yield* repo.turnCount(tenantId, agentId, conversationId)
      if (Option.isNone(total)) return yield* new NotFound({ detail: `No conversation ${conversationId}` })
      const limit = page.limit ?? defaultPageSize
      // One extra row tells whether another page follows.
      const rows = yield* repo.turnPage(tenantId, agentId, conversationId, {
        bound: cursor === null ? null : Number(cursor),
        limit: limit + 1
      })
      const data = rows.slice(0, limit)
      return {
        data,
        total: total.value,
        nextCursor: rows.length > limit ? encodeCursor(String(data[data.length - 1]!.index)) : null
      }
    })

    /** Forgets through the entity, so its cached history goes with the rows. */
    const forget = Traced.fn("Chat.forget")(function* (tenantId: TenantId, agentId: AgentId, conversationId: string) {
      yield* agents.get(tenantId, agentId)
      const removed = yield* clientFor(entityId(tenantId, agentId, conversationId))
        .Forget({
          tenantId,
          agentId,
          conversationId
        })
        .pipe(
          Effect.mapError(() => unreachable),
          Effect.timeoutOrElse({ duration: config.clusterCallTimeout, orElse: () => Effect.fail(unreachable) })
        )
      if (!removed) return yield* new NotFound({ detail: `No conversation ${conversationId}` })
    })

    /** One tool call of a turn of the conversation, with its whole result (a failed call's is null). */
    const toolCall = Traced.fn("Chat.toolCall")(function* (
      tenantId: TenantId,
      agentId: AgentId,
      conversationId: string,
      turnId: string,
      callId: string
    ) {
      yield* agents.get(tenantId, agentId)
      const found = yield* toolCalls
        .tenantCall(tenantId, "chat", turnId, chatScope(agentId, conversationId), callId)
        .pipe(Effect.orDie)
      if (Option.isNone(found)) {
        return yield* new NotFound({
          detail: `No tool call ${callId} of turn ${turnId} of conversation ${conversationId}`
        })
      }
      const { fullResult, record } = found.value
      return { ...record, fullResult: record.status === "succeeded" ? (fullResult ?? record.result) : null }
    })

    return { send, stream, conversations, turns, forget, toolCall } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make).pipe(
    Layer.provide([Agents.layer, AgentsRepo.layer, TokenBudget.layer, KnowledgeSearch.layer, ToolCallsRepo.layer])
  )
}
