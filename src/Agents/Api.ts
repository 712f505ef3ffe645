import * as Schema from "effect/Schema"
import * as Struct from "effect/Struct"
import * as HttpApiEndpoint from "effect/http-api/HttpApiEndpoint"
import * as HttpApiGroup from "effect/http-api/HttpApiGroup"
import * as HttpApiSchema from "effect/http-api/HttpApiSchema"
import * as OpenApi from "effect/http-api/OpenApi"
import { ApiKeyAuth, keyOperation, SessionAuth, sessionCredential, SessionQuota } from "../Auth/Api.ts"
import { operation } from "../Domain/ApiDocs.ts"
import { eventStream } from "../Domain/EventStream.ts"
import { cursorParam } from "../Domain/Cursor.ts"
import { AgentId, isId } from "../Domain/Ids.ts"
import { boundedArray, text } from "../Domain/Input.ts"
import {
  BadGateway,
  BadRequest,
  GatewayTimeout,
  ModelNotAllowed,
  NotFound,
  QuotaReached,
  ServiceUnavailable,
  TokenBudgetSpent,
  TooManyStreams
} from "../Domain/Problems.ts"

/** A knowledge chunk a grounded chat answer was given, as the chat response names it. */
export const ChatSource = Schema.Struct({
  chunkId: Schema.String,
  documentId: Schema.String,
  knowledgeId: Schema.String,
  score: Schema.Number
})
export type ChatSource = typeof ChatSource.Type

export const AgentStatus = Schema.Literals(["active", "inactive"])
export type AgentStatus = typeof AgentStatus.Type

// `local` is the built-in offline model; anything else is `provider/name`.
export const ModelId = text(
  Schema.isMaxLength(200),
  Schema.isPattern(/^(local|(openai|anthropic)\/[^\s/][^\s]*)$/, {
    message: "Expected `local`, `openai/<model>` or `anthropic/<model>`"
  })
)

const Name = text(
  Schema.isMinLength(1, { message: "Expected a non-empty name" }),
  Schema.isMaxLength(200)
)
const Description = text(Schema.isMaxLength(2000))
const Instructions = text(Schema.isMaxLength(32_000))

export const Agent = Schema.Struct({
  id: AgentId,
  name: Schema.String,
  description: Schema.String,
  model: Schema.String,
  instructions: Schema.String,
  status: AgentStatus,
  memoryEnabled: Schema.Boolean,
  knowledgeIds: Schema.Array(Schema.String).annotate({
    description: "The knowledge bases the agent is grounded on: its chats, orchestration steps and team turns " +
      "retrieve from them."
  }),
  createdAt: Schema.Date,
  updatedAt: Schema.Date
})
export type Agent = typeof Agent.Type

export const maxAgentKnowledgeBases = 10

const KnowledgeIds = boundedArray(text(Schema.isMinLength(1), Schema.isMaxLength(64)), {
  max: maxAgentKnowledgeBases,
  tooMany: `Expected at most ${maxAgentKnowledgeBases} knowledge bases`,
  description: "Ids of the tenant's knowledge bases the agent is grounded on ([] for none)."
})

/**
 * An agent as the key-authenticated API shows it: the reference's fields only.
 * Its instructions (the tenant's system prompt) stay on the management routes,
 * out of reach of a key that is often embedded in a less trusted client.
 */
export const V1Agent = Agent.mapFields(
  Struct.pick(["id", "name", "description", "model", "status", "memoryEnabled", "createdAt"])
)

export const CreateAgent = Schema.Struct({
  name: Name,
  description: Schema.optionalKey(Description),
  model: Schema.optionalKey(ModelId),
  instructions: Schema.optionalKey(Instructions),
  memoryEnabled: Schema.optionalKey(Schema.Boolean),
  status: Schema.optionalKey(AgentStatus),
  knowledgeIds: Schema.optionalKey(KnowledgeIds)
})
export type CreateAgent = typeof CreateAgent.Type

export const UpdateAgent = Schema.Struct({
  name: Schema.optionalKey(Name),
  description: Schema.optionalKey(Description),
  model: Schema.optionalKey(ModelId),
  instructions: Schema.optionalKey(Instructions),
  memoryEnabled: Schema.optionalKey(Schema.Boolean),
  status: Schema.optionalKey(AgentStatus),
  knowledgeIds: Schema.optionalKey(KnowledgeIds)
})
export type UpdateAgent = typeof UpdateAgent.Type

export const defaultPageSize = 50
export const maxPageSize = 200

/** `limit` and `cursor` of a list whose keys (and so whose cursors' contents) are what `isKey` accepts. */
export const pageQuery = (isKey: (key: string) => boolean) => ({
  limit: Schema.optionalKey(
    Schema.NumberFromString.pipe(
      Schema.decodeTo(Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: maxPageSize })))
    ).annotate({ description: `Page size, 1 to ${maxPageSize} (default ${defaultPageSize}).` })
  ),
  cursor: Schema.optionalKey(cursorParam(isKey))
})

/** The page query of the lists keyed by our ids. */
export const PageQuery = pageQuery(isId)

export const AgentList = Schema.Struct({
  data: Schema.Array(Agent),
  total: Schema.Int,
  nextCursor: Schema.NullOr(Schema.String)
})

export const V1AgentList = Schema.Struct({
  data: Schema.Array(V1Agent),
  total: Schema.Int,
  nextCursor: Schema.NullOr(Schema.String)
})

// ---------------------------------------------------------------------------
// Chat and conversations
// ---------------------------------------------------------------------------

export const ConversationId = text(
  Schema.isMinLength(1, { message: "Expected a non-empty conversationId" }),
  Schema.isMaxLength(200),
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

export const ChatResponse = Schema.Struct({
  reply: Schema.String,
  conversationId: Schema.String,
  tokens: Schema.Int.annotate({ description: "Tokens the model reported for this turn, input plus output." }),
  model: Schema.String.annotate({ description: "The model that answered." }),
  sources: Schema.optionalKey(Schema.Array(ChatSource).annotate({
    description: "Only for an agent with knowledge bases: the chunks the model was given for this message, best " +
      "first ([] when nothing matched)."
  }))
})
export type ChatResponse = typeof ChatResponse.Type

export const Conversation = Schema.Struct({
  id: Schema.String,
  turns: Schema.Int,
  createdAt: Schema.Date,
  updatedAt: Schema.Date
})

export const ConversationList = Schema.Struct({
  data: Schema.Array(Conversation),
  total: Schema.Int,
  nextCursor: Schema.NullOr(Schema.String)
})

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

export const TurnList = Schema.Struct({
  data: Schema.Array(Turn),
  total: Schema.Int,
  nextCursor: Schema.NullOr(Schema.String)
})

const conversationParams = { id: AgentId, conversationId: ConversationId }

// Chat, with an API key or (for the dashboard's playground) a session: one shape, one behaviour.
/** A streamed chat's events: `delta`s of the reply, then `done` with the response, or `error` with a problem. */
export const chatEventNames = ["delta", "done", "error"] as const
export const ChatEvents = eventStream(
  chatEventNames,
  Schema.Union([
    Schema.Struct({ text: Schema.String }).annotate({ description: "`delta`: the next piece of the reply." }),
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
    TooManyStreams
  ]
} as const

const chatDoc = {
  summary: "Chat with an agent",
  description: "Sends a message and returns the reply. Without `conversationId` a new conversation starts; with " +
    "one, an agent with memory answers with that conversation's earlier turns in mind. With " +
    "`Accept: text/event-stream` the reply streams as server-sent events: `delta` events carrying `{ text }`, " +
    "then one `done` event carrying this response's JSON (or an `error` event carrying a problem).",
  errors: "400 on an empty or too long (MAX_MESSAGE_CHARS) message, 403 when the plan may not use the agent's " +
    "model, 404 when the agent is not the tenant's or is inactive, 429 when the day's model tokens are spent " +
    "or, streamed, beyond MAX_EVENT_STREAMS_PER_TENANT open event streams, " +
    "502 when the model provider fails, 503 when the model is not configured or the service cannot reach the " +
    "conversation, 504 when the model times out (MODEL_TIMEOUT)."
}

export class AgentsApi extends HttpApiGroup.make("agents")
  .add(
    HttpApiEndpoint.get("list", "/", {
      query: PageQuery,
      success: AgentList,
      error: BadRequest
    }).annotateMerge(operation({
      summary: "List agents",
      description: "The tenant's agents, active and inactive, a page at a time (`limit`, `cursor`).",
      credential: sessionCredential,
      errors: "400 on a bad `limit` or `cursor`."
    })),
    HttpApiEndpoint.post("create", "/", {
      payload: CreateAgent,
      success: Agent.pipe(HttpApiSchema.status(201)),
      error: [ModelNotAllowed, QuotaReached]
    }).annotateMerge(operation({
      summary: "Create an agent",
      description: "Creates an agent: a model (DEFAULT_MODEL when omitted), instructions and whether it remembers " +
        "conversations.",
      credential: sessionCredential,
      errors: "400 on invalid fields, 403 when the plan may not use the model, 429 when the tenant has as many " +
        "agents as its plan allows (MAX_AGENTS)."
    })),
    HttpApiEndpoint.get("get", "/:id", {
      params: { id: AgentId },
      success: Agent,
      error: NotFound
    }).annotateMerge(operation({
      summary: "Get an agent",
      description: "The agent, with its instructions.",
      credential: sessionCredential,
      errors: "404 when the agent is not the tenant's."
    })),
    HttpApiEndpoint.put("update", "/:id", {
      params: { id: AgentId },
      payload: UpdateAgent,
      success: Agent,
      error: [NotFound, ModelNotAllowed]
    }).annotateMerge(operation({
      summary: "Update an agent",
      description: "Changes the fields sent and leaves the others as they are.",
      credential: sessionCredential,
      errors: "400 on invalid fields, 403 when the plan may not use the new model, 404 when the agent is not the tenant's."
    })),
    HttpApiEndpoint.delete("remove", "/:id", {
      params: { id: AgentId },
      success: HttpApiSchema.NoContent,
      error: NotFound
    }).annotateMerge(operation({
      summary: "Delete an agent",
      description: "Deletes the agent.",
      credential: sessionCredential,
      errors: "404 when the agent is not the tenant's."
    })),
    HttpApiEndpoint.get("conversations", "/:id/conversations", {
      params: { id: AgentId },
      query: ConversationPageQuery,
      success: ConversationList,
      error: [NotFound, BadRequest]
    }).annotateMerge(operation({
      summary: "List an agent's conversations",
      description: "The conversations the agent remembers, with their turn counts, a page at a time (`limit`, `cursor`).",
      credential: sessionCredential,
      errors: "400 on a bad `limit` or `cursor`, 404 when the agent is not the tenant's."
    })),
    HttpApiEndpoint.get("turns", "/:id/conversations/:conversationId/messages", {
      params: conversationParams,
      query: TurnPageQuery,
      success: TurnList,
      error: [NotFound, BadRequest]
    }).annotateMerge(operation({
      summary: "List a conversation's turns",
      description: "The conversation's turns, oldest first, a page at a time (`limit`, `cursor`): each message, its " +
        "reply, the model and its tokens.",
      credential: sessionCredential,
      errors: "400 on a bad `limit` or `cursor`, 404 when the agent is not the tenant's or has no such conversation."
    })),
    HttpApiEndpoint.delete("forget", "/:id/conversations/:conversationId", {
      params: conversationParams,
      success: HttpApiSchema.NoContent,
      error: [NotFound, ServiceUnavailable]
    }).annotateMerge(operation({
      summary: "Forget a conversation",
      description: "Deletes the conversation's turns, so the agent no longer remembers them.",
      credential: sessionCredential,
      errors: "404 when the agent is not the tenant's or has no such conversation, 503 when the conversation " +
        "cannot be reached in CLUSTER_CALL_TIMEOUT (try again)."
    })),
    HttpApiEndpoint.post("chat", "/:id/chat", chatSpec).middleware(SessionQuota).annotateMerge(operation({
      ...chatDoc,
      credential: sessionCredential,
      errors: `${chatDoc.errors} Counted against the plan's daily requests as the API-key route is: 429 past them.`
    }))
  )
  .middleware(SessionAuth)
  .prefix("/api/agents")
  .annotateMerge(OpenApi.annotations({
    title: "Agents (management)",
    description: "Define a tenant's agents (model, instructions, memory) and read or forget their conversations."
  }))
{}

export class AgentsV1Api extends HttpApiGroup.make("v1Agents")
  .add(
    HttpApiEndpoint.get("list", "/", {
      query: PageQuery,
      success: V1AgentList,
      error: BadRequest
    }).annotateMerge(keyOperation("read", "bearer", {
      summary: "List active agents",
      description: "The tenant's active agents, without their instructions, a page at a time (`limit`, `cursor`).",
      errors: "400 on a bad `limit` or `cursor`."
    })),
    HttpApiEndpoint.post("chat", "/:id/chat", chatSpec).annotateMerge(keyOperation("chat", "bearer", chatDoc))
  )
  .middleware(ApiKeyAuth)
  .prefix("/api/v1/agents")
  .annotateMerge(OpenApi.annotations({
    title: "Agents (API key)",
    description: "List the tenant's active agents and chat with them, with an API key."
  }))
{}
