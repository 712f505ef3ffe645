import * as Schema from "effect/Schema"
import * as Model from "effect/schema/Model"
import * as Struct from "effect/Struct"
import * as HttpApiEndpoint from "effect/http-api/HttpApiEndpoint"
import * as HttpApiGroup from "effect/http-api/HttpApiGroup"
import * as HttpApiSchema from "effect/http-api/HttpApiSchema"
import * as OpenApi from "effect/http-api/OpenApi"
import { ApiKeyAuth, keyOperation, SessionAuth, sessionCredential, SessionQuota } from "../Auth/Api.ts"
import { operation } from "../Domain/ApiDocs.ts"
import { activeList, DefinitionStatus, Description, Name } from "../Domain/Definition.ts"
import * as Entity from "../Domain/Entity.ts"
import { eventStream } from "../Domain/EventStream.ts"
import { AgentId } from "../Domain/Ids.ts"
import { boundedArray, Text, text } from "../Domain/Input.ts"
import { managementEndpoints } from "../Domain/Management.ts"
import { maxPageSize, PageOf, pageQuery } from "../Domain/Page.ts"
import {
  BadGateway,
  BadRequest,
  GatewayTimeout,
  ModelNotAllowed,
  NotFound,
  QuotaReached,
  ServiceUnavailable,
  TokenBudgetSpent,
  OutputInvalid,
  TooManyStreams
} from "../Domain/Problems.ts"
import { ToolCallWithResult } from "../Orchestrations/Api.ts"
import { ResponseFormat, ResponseFormatInput } from "../Tools/ResponseFormat.ts"

/** A knowledge chunk a grounded chat answer was given, as the chat response names it. */
export const ChatSource = Schema.Struct({
  chunkId: Schema.String,
  documentId: Schema.String,
  knowledgeId: Schema.String,
  score: Schema.Number
})
export type ChatSource = typeof ChatSource.Type

export const AgentStatus = DefinitionStatus
export type AgentStatus = DefinitionStatus

// `local` is the built-in offline model; anything else is `provider/name`.
export const ModelId = text(
  Schema.isMaxLength(200),
  Schema.isPattern(/^(local|(openai|anthropic)\/[^\s/][^\s]*)$/, {
    message: "Expected `local`, `openai/<model>` or `anthropic/<model>`"
  })
)

const Instructions = text(Schema.isMaxLength(32_000))

export const maxAgentKnowledgeBases = 10

const KnowledgeIds = boundedArray(text(Schema.isMinLength(1), Schema.isMaxLength(64)), {
  max: maxAgentKnowledgeBases,
  tooMany: `Expected at most ${maxAgentKnowledgeBases} knowledge bases`,
  description: "Ids of the tenant's knowledge bases the agent is grounded on ([] for none)."
})

export const maxAgentTools = 32

const ToolIds = boundedArray(text(Schema.isMinLength(1), Schema.isMaxLength(64)), {
  max: maxAgentTools,
  tooMany: `Expected at most ${maxAgentTools} tools`,
  description: "Ids of the tenant's active tools the agent may call ([] for none)."
})

/** An agent: its row, its JSON, and what a client sends to create (`Agent.jsonCreate`) or update it (`Agent.jsonUpdate`). */
export class Agent extends Model.Class<Agent>("Agent")({
  id: Entity.id(AgentId),
  name: Entity.required(Schema.String, Name),
  description: Entity.withDefault(Schema.String, "", Description),
  // DEFAULT_MODEL when omitted.
  model: Entity.optional(Schema.String, ModelId),
  instructions: Entity.withDefault(Schema.String, "", Instructions),
  status: Entity.withDefault(AgentStatus, "active"),
  memoryEnabled: Entity.withDefault(Schema.Boolean, true),
  knowledgeIds: Entity.withDefault(
    Schema.Array(Schema.String).annotate({
      description:
        "The knowledge bases the agent is grounded on: its chats, orchestration steps and team turns " +
        "retrieve from them."
    }),
    [],
    KnowledgeIds
  ),
  toolIds: Entity.withDefault(
    Schema.Array(Schema.String).annotate({
      description: "The tenant's tools the agent is given (docs/tools.md)."
    }),
    [],
    ToolIds
  ),
  responseFormat: Entity.withDefault(Schema.NullOr(ResponseFormat), null, Schema.NullOr(ResponseFormatInput)),
  createdAt: Entity.generated(Schema.Date),
  updatedAt: Entity.generated(Schema.Date)
}) {}

/**
 * An agent as the key-authenticated API shows it: the reference's fields only.
 * Its instructions (the tenant's system prompt) stay on the management routes,
 * out of reach of a key that is often embedded in a less trusted client.
 */
export const V1Agent = Agent.json.mapFields(
  Struct.pick(["id", "name", "description", "model", "status", "memoryEnabled", "createdAt"])
)

// The dashboard reads the page size bound from here.
export { maxPageSize }

export const AgentList = PageOf(Agent.json)

export const V1AgentList = PageOf(V1Agent)

// ---------------------------------------------------------------------------
// Chat and conversations
// ---------------------------------------------------------------------------

export const ConversationId = text(
  Schema.isMinLength(1, { message: "Expected a non-empty conversationId" }),
  Schema.isMaxLength(200),
  // biome-ignore lint/suspicious/noControlCharactersInRegex: the pattern exists to refuse control characters
  Schema.isPattern(/^[^\u0000-\u001f\u007f]*$/, { message: "Expected no control characters" })
)

/** Whether a string can be a conversationId: the conversations list is keyed by them, so its cursors hold one. */
export const isConversationId = Schema.is(ConversationId)

/** The page query of an agent's conversations. */
export const ConversationPageQuery = pageQuery(isConversationId)

/** Whether a string can be a turn's index: a conversation's messages are paged by it. */
export const isTurnIndex = (key: string) => /^[1-9]\d{0,8}$/.test(key)

/** The page query of a conversation's turns. */
export const TurnPageQuery = pageQuery(isTurnIndex)

export const ChatRequest = Schema.Struct({
  message: text(Schema.isMinLength(1, { message: "Expected a non-empty message" })),
  conversationId: Schema.optionalKey(ConversationId)
})
export type ChatRequest = typeof ChatRequest.Type

/** A tool call a chat turn made, as its response names it; the whole record is kept with the tool calls (runKind `chat`). */
export const ChatToolCall = Schema.Struct({
  callId: Schema.String.annotate({ description: "The model's id of the call." }),
  tool: Schema.String.annotate({ description: "The tool's name." }),
  status: Schema.Literals(["succeeded", "failed"]),
  durationMs: Schema.Int,
  error: Schema.optionalKey(
    Schema.String.annotate({ description: "Only for a failed call: what the model was told (it saw the error)." })
  ),
  result: Schema.optionalKey(
    Schema.String.annotate({
      description:
        "Only for a succeeded call: the result as the model saw it, cut at the tool's `maxOutputBytes` (with a marker)."
    })
  ),
  // Optional in the schema only so that a node of the previous version can answer a turn during an upgrade.
  resultCut: Schema.optionalKey(
    Schema.Boolean.annotate({
      description:
        "Whether `result` was cut; the whole result is at " +
        "GET /api/v1/agents/{id}/conversations/{conversationId}/turns/{turnId}/tool-calls/{callId}."
    })
  )
})
export type ChatToolCall = typeof ChatToolCall.Type

export const ChatResponse = Schema.Struct({
  reply: Schema.String,
  conversationId: Schema.String,
  tokens: Schema.Int.annotate({ description: "Tokens the model reported for this turn, input plus output." }),
  model: Schema.String.annotate({ description: "The model that answered." }),
  sources: Schema.optionalKey(
    Schema.Array(ChatSource).annotate({
      description:
        "Only for an agent with knowledge bases: the chunks the model was given for this message, best " +
        "first ([] when nothing matched)."
    })
  ),
  turnId: Schema.optionalKey(
    Schema.String.annotate({
      description:
        "Only when the turn called tools: the turn's id, under which its calls are kept (read one with its whole " +
        "result at /api/v1/agents/{id}/conversations/{conversationId}/turns/{turnId}/tool-calls/{callId})."
    })
  ),
  toolCalls: Schema.optionalKey(
    Schema.Array(ChatToolCall).annotate({
      description:
        "Only when the turn called tools (docs/agents.md#tools-in-chat): the calls, in the order the model asked " +
        "for them. The stored history keeps the message and this reply, not the calls."
    })
  )
})
export type ChatResponse = typeof ChatResponse.Type

export const Conversation = Schema.Struct({
  id: Schema.String,
  turns: Schema.Int,
  createdAt: Schema.Date,
  updatedAt: Schema.Date
})

export const ConversationList = PageOf(Conversation)

export const Turn = Schema.Struct({
  index: Schema.Int,
  message: Schema.String,
  reply: Schema.String,
  model: Schema.String,
  inputTokens: Schema.Int,
  outputTokens: Schema.Int,
  tokens: Schema.Int,
  createdAt: Schema.Date,
  completedAt: Schema.Date
})
export type Turn = typeof Turn.Type

export const TurnList = PageOf(Turn)

const conversationParams = { id: AgentId, conversationId: ConversationId }
const chatToolCallParams = { ...conversationParams, turnId: Text, callId: Text }

// Chat, with an API key or (for the dashboard's playground) a session: one shape, one behaviour.
/**
 * A streamed chat's events: `delta`s of the reply, then `done` with the response, or `error` with a problem;
 * before the reply, an agent with tools sends `tool.called` and `tool.succeeded` or `tool.failed` per call.
 */
export const chatEventNames = ["delta", "done", "error", "tool.called", "tool.succeeded", "tool.failed"] as const
/** What a chat's tool event carries: the call, and its arguments (called), result (succeeded) or error (failed). */
export const ChatToolEvent = Schema.Struct({
  callId: Schema.String,
  tool: Schema.String,
  arguments: Schema.optionalKey(Schema.Unknown),
  attempt: Schema.optionalKey(Schema.Int),
  durationMs: Schema.optionalKey(Schema.Int),
  result: Schema.optionalKey(Schema.NullOr(Schema.String)),
  error: Schema.optionalKey(Schema.NullOr(Schema.String)),
  errorKind: Schema.optionalKey(Schema.NullOr(Schema.String))
})
export const ChatEvents = eventStream(
  chatEventNames,
  Schema.Union([
    Schema.Struct({ text: Schema.String }).annotate({ description: "`delta`: the next piece of the reply." }),
    ChatToolEvent.annotate({
      description:
        "`tool.called` (`arguments`), `tool.succeeded` (`result`, `durationMs`), `tool.failed` (`error`, " +
        "`errorKind`, `durationMs`): a call of the agent's tools, before the reply."
    }),
    ChatResponse.annotate({ description: "`done`: the response, as without streaming." }),
    Schema.Struct({ status: Schema.Int, title: Schema.String, detail: Schema.optionalKey(Schema.String) }).annotate({
      description: "`error`: the problem that ended the stream."
    })
  ])
)

const chatSpec = {
  params: { id: AgentId },
  payload: ChatRequest,
  success: [ChatResponse, ChatEvents],
  error: [
    NotFound,
    BadRequest,
    BadGateway,
    GatewayTimeout,
    ServiceUnavailable,
    TokenBudgetSpent,
    ModelNotAllowed,
    TooManyStreams,
    OutputInvalid
  ]
} as const

const chatDoc = {
  summary: "Chat with an agent",
  description:
    "Sends a message and returns the reply. Without `conversationId` a new conversation starts; with " +
    "one, an agent with memory answers with that conversation's earlier turns in mind. With " +
    "`Accept: text/event-stream` the reply streams as server-sent events: `delta` events carrying `{ text }`, " +
    "then one `done` event carrying this response's JSON (or an `error` event carrying a problem). An agent " +
    "with tools may call them before it answers: the response then names the calls (`toolCalls`), and a " +
    "streamed reply sends `tool.called` and `tool.succeeded` or `tool.failed` events for each before its `delta`s.",
  errors:
    "400 on an empty or too long (MAX_MESSAGE_CHARS) message, 403 when the plan may not use the agent's " +
    "model, 404 when the agent is not the tenant's or is inactive, 429 when the day's model tokens are spent " +
    "or, streamed, beyond MAX_EVENT_STREAMS_PER_TENANT open event streams, " +
    "502 when the model provider fails, 503 when the model is not configured or the service cannot reach the " +
    "conversation, 504 when the model times out (MODEL_TIMEOUT)."
}

export class AgentsApi extends HttpApiGroup.make("agents")
  .add(
    ...managementEndpoints({
      name: "agent",
      model: Agent,
      credential: sessionCredential,
      errors: { create: [ModelNotAllowed, QuotaReached], update: [NotFound, ModelNotAllowed] },
      docs: {
        list: { description: "The tenant's agents, active and inactive, a page at a time (`limit`, `cursor`)." },
        create: {
          description:
            "Creates an agent: a model (DEFAULT_MODEL when omitted), instructions and whether it " +
            "remembers conversations.",
          errors:
            "400 on invalid fields, 403 when the plan may not use the model, 429 when the tenant has as many " +
            "agents as its plan allows (MAX_AGENTS)."
        },
        get: { description: "The agent, with its instructions." },
        update: {
          errors:
            "400 on invalid fields, 403 when the plan may not use the new model, 404 when the agent is not " +
            "the tenant's."
        }
      }
    }),
    HttpApiEndpoint.get("conversations", "/:id/conversations", {
      params: { id: AgentId },
      query: ConversationPageQuery,
      success: ConversationList,
      error: [NotFound, BadRequest]
    }).annotateMerge(
      operation({
        summary: "List an agent's conversations",
        description:
          "The conversations the agent remembers, with their turn counts, a page at a time (`limit`, `cursor`).",
        credential: sessionCredential,
        errors: "400 on a bad `limit` or `cursor`, 404 when the agent is not the tenant's."
      })
    ),
    HttpApiEndpoint.get("turns", "/:id/conversations/:conversationId/messages", {
      params: conversationParams,
      query: TurnPageQuery,
      success: TurnList,
      error: [NotFound, BadRequest]
    }).annotateMerge(
      operation({
        summary: "List a conversation's turns",
        description:
          "The conversation's turns, oldest first, a page at a time (`limit`, `cursor`): each message, its " +
          "reply, the model and its tokens.",
        credential: sessionCredential,
        errors: "400 on a bad `limit` or `cursor`, 404 when the agent is not the tenant's or has no such conversation."
      })
    ),
    HttpApiEndpoint.get("toolCall", "/:id/conversations/:conversationId/turns/:turnId/tool-calls/:callId", {
      params: chatToolCallParams,
      success: ToolCallWithResult,
      error: NotFound
    }).annotateMerge(
      operation({
        summary: "Get one tool call of a chat turn with its whole result",
        description:
          "A call a chat turn made (`turnId` and `callId` as the chat response names them), with `fullResult`: the " +
          "whole result, of which the model saw a cut when `resultCut` (the tool's `maxOutputBytes`); null for a " +
          "call that failed. Kept until the conversation is forgotten.",
        credential: sessionCredential,
        errors:
          "404 when the agent is not the tenant's, or the conversation's turn made no such call (or was forgotten)."
      })
    ),
    HttpApiEndpoint.delete("forget", "/:id/conversations/:conversationId", {
      params: conversationParams,
      success: HttpApiSchema.NoContent,
      error: [NotFound, ServiceUnavailable]
    }).annotateMerge(
      operation({
        summary: "Forget a conversation",
        description:
          "Deletes the conversation's turns, so the agent no longer remembers them, and the tool calls its turns " +
          "made (their records and whole results).",
        credential: sessionCredential,
        errors:
          "404 when the agent is not the tenant's or has no such conversation, 503 when the conversation " +
          "cannot be reached in CLUSTER_CALL_TIMEOUT (try again)."
      })
    ),
    HttpApiEndpoint.post("chat", "/:id/chat", chatSpec)
      .middleware(SessionQuota)
      .annotateMerge(
        operation({
          ...chatDoc,
          credential: sessionCredential,
          errors: `${chatDoc.errors} Counted against the plan's daily requests as the API-key route is: 429 past them.`
        })
      )
  )
  .middleware(SessionAuth)
  .prefix("/api/agents")
  .annotateMerge(
    OpenApi.annotations({
      title: "Agents (management)",
      description: "Define a tenant's agents (model, instructions, memory) and read or forget their conversations."
    })
  ) {}

export class AgentsV1Api extends HttpApiGroup.make("v1Agents")
  .add(
    activeList(V1AgentList, (doc) => keyOperation("read", "bearer", doc), {
      summary: "List active agents",
      description: "The tenant's active agents, without their instructions, a page at a time (`limit`, `cursor`)."
    }),
    HttpApiEndpoint.post("chat", "/:id/chat", chatSpec).annotateMerge(keyOperation("chat", "bearer", chatDoc)),
    HttpApiEndpoint.get("toolCall", "/:id/conversations/:conversationId/turns/:turnId/tool-calls/:callId", {
      params: chatToolCallParams,
      success: ToolCallWithResult,
      error: NotFound
    }).annotateMerge(
      keyOperation("chat", "bearer", {
        summary: "Get one tool call of a chat turn with its whole result",
        description:
          "A call a chat turn made (`turnId` and `callId` as the chat response names them), with `fullResult`: the " +
          "whole result, of which the model saw a cut when `resultCut` (the tool's `maxOutputBytes`); null for a " +
          "call that failed.",
        errors: "404 when the agent is not the tenant's, or the conversation's turn made no such call."
      })
    )
  )
  .middleware(ApiKeyAuth)
  .prefix("/api/v1/agents")
  .annotateMerge(
    OpenApi.annotations({
      title: "Agents (API key)",
      description: "List the tenant's active agents and chat with them, with an API key."
    })
  ) {}
