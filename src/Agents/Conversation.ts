import * as Cause from "effect/Cause"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Queue from "effect/Queue"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import * as ClusterSchema from "effect/cluster/ClusterSchema"
import * as Entity from "effect/cluster/Entity"
import * as Rpc from "effect/rpc/Rpc"
import { isSqlError } from "effect/sql/SqlError"
import { isTransient, retryTransient } from "../Database/Errors.ts"
import { Plan } from "../Auth/Api.ts"
import { costOfFailure, type Reservation, TokenBudget } from "../Billing/Budget.ts"
import { type AgentId, newId, type TenantId } from "../Domain/Ids.ts"
import type { TokenBudgetSpent } from "../Domain/Problems.ts"
import { storable } from "../Domain/Text.ts"
import { citations, fitSources, GroundingSource, withSources } from "../Knowledge/Grounding.ts"
import { type ChatMessage, type ModelError, type ModelReply, Models, type ToolSpec } from "../Models/Models.ts"
import { AgentTools } from "../Tools/AgentTools.ts"
import { type LoopKey, type ToolCallRecord, ToolCallsRepo } from "../Tools/CallsRepo.ts"
import { describeProblems, type LoopModelRequest, requestTokens, type ToolEvent, ToolLoop } from "../Tools/Loop.ts"
import { ResponseFormat } from "../Tools/ResponseFormat.ts"
import type { Tool } from "../Tools/Tool.ts"
import { ChatResponse, type ChatToolCall } from "./Api.ts"
import { AgentsRepo } from "./Repo.ts"
import * as Traced from "../Observability/Traced.ts"

/**
 * One conversation (tenant, agent, conversationId) is one entity of effect's
 * cluster: its messages are handled one at a time and in order, while other
 * conversations run in parallel. The entity keeps the newest turns that fit
 * the model's context budget in memory once loaded, so a turn costs one model
 * call and one INSERT, and a long conversation costs no more than a short one.
 *
 * Messages are volatile (not persisted in the cluster's storage): a chat is a
 * synchronous request, and a caller whose node fails gets an error to retry
 * rather than a reply nobody waits for. So is a turn's tool loop: its calls
 * are recorded, but a turn cut short is not replayed (the caller retries the
 * chat, and the calls it repeats are made again).
 */

const Address = {
  tenantId: Schema.String,
  agentId: Schema.String,
  conversationId: Schema.String
}

const TurnInput = Schema.Struct({
  ...Address,
  message: Schema.String,
  model: Schema.String,
  instructions: Schema.String,
  memoryEnabled: Schema.Boolean,
  /** Retrieved for this message from the agent's knowledge bases, best first; absent for an agent without any. */
  sources: Schema.optionalKey(Schema.Array(GroundingSource)),
  /** The tenant's plan as the request found it, when it read it: a plan without a budget reserves nothing. */
  plan: Schema.optionalKey(Plan),
  /** The agent's tools, offered in the turn; absent for an agent without any (and in messages of earlier releases). */
  toolIds: Schema.optionalKey(Schema.Array(Schema.String)),
  /** The agent's response format: the reply is JSON matching it; absent for a plain reply. */
  responseFormat: Schema.optionalKey(ResponseFormat)
})
export type TurnInput = typeof TurnInput.Type

export class ChatFailed extends Schema.TaggedError<ChatFailed>()("ChatFailed", {
  reason: Schema.Literals([
    "NotConfigured",
    "Timeout",
    "ProviderError",
    "UnknownModel",
    "DatabaseUnavailable",
    "TokenBudgetSpent",
    "InvalidOutput"
  ]),
  /** InvalidOutput: where the reply did not match the response format. */
  problems: Schema.optionalKey(
    Schema.Array(
      Schema.Struct({ path: Schema.Array(Schema.Union([Schema.String, Schema.Number])), message: Schema.String })
    )
  ),
  message: Schema.String,
  status: Schema.optionalKey(Schema.Int),
  /** TokenBudgetSpent: the budget the turn's reservation was refused by. */
  spent: Schema.optionalKey(
    Schema.Struct({
      plan: Schema.String,
      budget: Schema.Int,
      used: Schema.Int,
      resetAt: Schema.String
    })
  )
}) {}

export const ChatEvent = Schema.Union([
  // First of a streamed reply, once its tokens are reserved: what fails before it (the budget,
  // the database) is refused before the response starts; the client never sees it.
  Schema.TaggedStruct("Started", {}),
  Schema.TaggedStruct("Delta", { text: Schema.String }),
  Schema.TaggedStruct("Done", { response: ChatResponse }),
  // A call of the agent's tools, before the reply: `event` is its server-sent event's name.
  Schema.TaggedStruct("Tool", {
    event: Schema.Literals(["tool.called", "tool.succeeded", "tool.failed"]),
    data: Schema.Record(Schema.String, Schema.Unknown)
  })
])
export type ChatEvent = typeof ChatEvent.Type
/** What a client of a streamed chat receives. */
export type ReplyEvent = Exclude<ChatEvent, { readonly _tag: "Started" }>

export const Send = Rpc.make("Send", { payload: TurnInput, success: ChatResponse, error: ChatFailed })
export const StreamReply = Rpc.make("StreamReply", {
  payload: TurnInput,
  success: ChatEvent,
  error: ChatFailed,
  stream: true
})
export const Forget = Rpc.make("Forget", { payload: Address, success: Schema.Boolean })

export const Conversation = Entity.make("Conversation", [Send, StreamReply, Forget]).annotateRpcs(
  ClusterSchema.Persisted,
  false
)

/** The entity id of a conversation; the parts travel in each message too. */
export const entityId = (tenantId: string, agentId: string, conversationId: string) =>
  `${tenantId}/${agentId}/${conversationId}`

/**
 * The scope of a conversation's tool calls: each turn's are recorded under
 * the turn's own id (`turnId`) and this, so they are read by conversation and
 * turn, and forgotten with the conversation.
 */
export const chatScope = (agentId: string, conversationId: string) => `${agentId}/${conversationId}`

interface StoredTurn {
  readonly message: string
  readonly reply: string
  /** Tokens of message and reply, for trimming to the model's budget. */
  readonly cost: number
}

/** A turn's tokens, as its stored row counts them: every model call's. */
interface TurnTokens {
  readonly inputTokens: number
  readonly outputTokens: number
}

interface StoredRow {
  readonly seq: number
  readonly message: string
  readonly reply: string
}

const toChatFailed = (error: ModelError) =>
  new ChatFailed({
    reason: error.reason,
    message: error.message,
    ...(error.status === undefined ? {} : { status: error.status })
  })

const budgetSpent = (error: TokenBudgetSpent) =>
  new ChatFailed({
    reason: "TokenBudgetSpent",
    message: error.detail ?? "The day's model tokens are spent",
    spent: { plan: error.plan, budget: error.budget, used: error.used, resetAt: error.resetAt }
  })

/** A call as the chat response names it: a chat's calls end succeeded or failed. */
const callSummary = (record: ToolCallRecord): ChatToolCall => ({
  callId: record.callId,
  tool: record.tool,
  status: record.status === "succeeded" ? "succeeded" : "failed",
  durationMs: record.durationMs ?? 0,
  ...(record.status === "succeeded" || record.error === null ? {} : { error: record.error }),
  ...(record.status === "succeeded" && record.result !== null ? { result: record.result } : {}),
  resultCut: record.resultCut
})

/**
 * The conversation's statements, tried again a few seconds while the database
 * is briefly unreachable, then a typed failure (a 503 for the client). A
 * defect would restart the entity and replay the turn, asking the model again
 * while the client waits.
 */
const withDatabase = <A, R>(effect: Effect.Effect<A, never, R>): Effect.Effect<A, ChatFailed, R> =>
  retryTransient(
    Effect.catchDefect(effect, (defect) => (isSqlError(defect) ? Effect.fail(defect) : Effect.die(defect))),
    Duration.seconds(10)
  ).pipe(
    Effect.catch((error) =>
      isTransient(error)
        ? Effect.fail(
            new ChatFailed({ reason: "DatabaseUnavailable", message: "The database is unavailable; try again shortly" })
          )
        : Effect.die(error)
    )
  )

/**
 * The turns of one conversation: what the entity runs, and what a chat with
 * an agent without memory runs on the node that took the request (nothing is
 * stored per conversation then, so there is nothing to keep in order and no
 * entity to route to). Each call of this holds its own history.
 */
export const makeTurns = Effect.gen(function* () {
  const models = yield* Models
  const repo = yield* AgentsRepo
  const tokenBudget = yield* TokenBudget
  const agentTools = yield* AgentTools
  const loop = yield* ToolLoop
  const toolCalls = yield* ToolCallsRepo
  // Only the newest turns whose tokens fit the model's whole context budget
  // (the most any prompt can carry) are held, oldest first; older turns stay
  // in Postgres. Loaded on the first message that needs them; the entity is
  // the only writer of its conversation.
  let history: Array<StoredTurn> | undefined
  let held = 0

  const costOf = (message: string, reply: string) => models.countTokens(message) + models.countTokens(reply)

  // Newest first, a batch at a time, until a turn does not fit: a long
  // conversation costs what fits the budget, not its whole history.
  const loadBatch = 32
  const newestBefore = (input: TurnInput, before: number | null): Effect.Effect<ReadonlyArray<StoredRow>, ChatFailed> =>
    withDatabase(
      repo.recentTurns(input.tenantId as TenantId, input.agentId as AgentId, input.conversationId, {
        bound: before,
        limit: loadBatch
      })
    )
  const loadHistory = (input: TurnInput) =>
    Effect.gen(function* () {
      if (history !== undefined) return history
      const budget = models.contextBudget(input.model)
      const newestFirst: Array<StoredTurn> = []
      let total = 0
      let before: number | null = null
      load: while (true) {
        const rows: ReadonlyArray<StoredRow> = yield* newestBefore(input, before)
        for (const row of rows) {
          const cost = costOf(row.message, row.reply)
          if (total + cost > budget) break load
          total += cost
          newestFirst.push({ message: row.message, reply: row.reply, cost })
        }
        if (rows.length < loadBatch) break
        before = rows[rows.length - 1]!.seq
      }
      history = newestFirst.reverse()
      held = total
      return history
    })

  /**
   * The system prompt (the instructions, then the sources that fit in half
   * of what the instructions and the message leave), and the history that
   * fits the rest of the model's budget, newest kept.
   */
  const prompt = (input: TurnInput) =>
    Effect.gen(function* () {
      const instructionsTokens = models.countTokens(input.instructions)
      const messageTokens = models.countTokens(input.message)
      const room = models.contextBudget(input.model) - instructionsTokens - messageTokens
      const sources = input.sources === undefined ? undefined : fitSources(input.sources, Math.floor(room / 2))
      const system = withSources(input.instructions, sources ?? [])
      const systemTokens = system === input.instructions ? instructionsTokens : models.countTokens(system)
      const newMessage: ChatMessage = { role: "user", content: input.message }
      // The prompt's tokens, as the turn's reservation counts them.
      const estimate = (messages: number, tokens: number) =>
        models.promptEstimate(input.model, tokens, messages + (system === "" ? 0 : 1))
      if (!input.memoryEnabled) {
        return { system, sources, messages: [newMessage], promptTokens: estimate(1, systemTokens + messageTokens) }
      }
      const turns = yield* loadHistory(input)
      let budget = models.contextBudget(input.model) - systemTokens - messageTokens
      let first = turns.length
      while (first > 0 && turns[first - 1]!.cost <= budget) {
        first--
        budget -= turns[first]!.cost
      }
      const messages: Array<ChatMessage> = []
      let historyTokens = 0
      for (const turn of turns.slice(first)) {
        messages.push({ role: "user", content: turn.message }, { role: "assistant", content: turn.reply })
        historyTokens += turn.cost
      }
      messages.push(newMessage)
      return {
        system,
        sources,
        messages,
        promptTokens: estimate(messages.length, systemTokens + messageTokens + historyTokens)
      }
    })

  /**
   * The turn's hold on the tenant's day, its worst case (the prompt and the
   * plan's max_tokens), or the refusal of the budget. The request checked
   * the model a moment ago; the plan it read spares a business tenant the statement.
   */
  const reserve = (input: TurnInput, promptTokens: number): Effect.Effect<Reservation, ChatFailed> =>
    withDatabase(
      Effect.result(
        tokenBudget.reserve(input.tenantId as TenantId, { model: undefined, promptTokens, plan: input.plan }).pipe(
          // Not asked: no model to check.
          Effect.catchTag("ModelNotAllowed", Effect.die)
        )
      )
    ).pipe(
      Effect.flatMap((result) =>
        result._tag === "Success" ? Effect.succeed(result.success) : Effect.fail(budgetSpent(result.failure))
      )
    )

  const tokensOf = (reply: ModelReply): TurnTokens => ({
    inputTokens: reply.inputTokens,
    outputTokens: reply.outputTokens
  })

  // Stores the turn: the message and the final reply only. A loop's tool
  // calls and results are not history: they are recorded with the calls,
  // and the next turn's prompt carries the message and the reply.
  const remember = (input: TurnInput, reply: ModelReply, tokens: TurnTokens, createdAt: Date) =>
    Effect.gen(function* () {
      yield* Effect.logInfo("Conversation turn").pipe(Effect.annotateLogs({ conversationId: input.conversationId }))
      if (!input.memoryEnabled) return
      const turns = yield* loadHistory(input)
      yield* withDatabase(
        repo.appendTurn({
          tenantId: input.tenantId as TenantId,
          agentId: input.agentId as AgentId,
          conversationId: input.conversationId,
          message: input.message,
          reply: storable(reply.text),
          model: reply.model,
          inputTokens: tokens.inputTokens,
          outputTokens: tokens.outputTokens,
          createdAt,
          completedAt: new Date()
        })
      )
      const cost = costOf(input.message, reply.text)
      turns.push({ message: input.message, reply: reply.text, cost })
      held += cost
      // The oldest turns leave memory once they could no longer be sent.
      const budget = models.contextBudget(input.model)
      while (turns.length > 0 && held > budget) held -= turns.shift()!.cost
    })

  // Settled here, where the tokens are known, even if the caller has stopped waiting.
  const settleAndRemember = (input: TurnInput, reply: ModelReply, createdAt: Date, reservation: Reservation) =>
    Effect.andThen(
      tokenBudget.settleInBackground(reservation, reply.inputTokens + reply.outputTokens),
      remember(input, reply, tokensOf(reply), createdAt)
    )

  const toResponse = (
    input: TurnInput,
    reply: ModelReply,
    tokens: number,
    sources: ReadonlyArray<GroundingSource> | undefined,
    loopOutcome?: { readonly turnId: string; readonly calls: ReadonlyArray<ToolCallRecord> }
  ): ChatResponse => ({
    reply: reply.text,
    conversationId: input.conversationId,
    tokens,
    model: reply.model,
    ...(sources === undefined ? {} : { sources: citations(sources) }),
    ...(loopOutcome === undefined || loopOutcome.calls.length === 0
      ? {}
      : { turnId: loopOutcome.turnId, toolCalls: loopOutcome.calls.map(callSummary) })
  })

  /** The agent's active tools; an agent without any costs no statement. */
  const toolsFor = (input: TurnInput): Effect.Effect<ReadonlyArray<Tool>, ChatFailed> =>
    input.toolIds === undefined || input.toolIds.length === 0
      ? Effect.succeed([])
      : withDatabase(agentTools.toolsOf(input.tenantId as TenantId, input.toolIds))

  /**
   * The turn's tool loop (docs/agents.md#tools-in-chat): model, calls,
   * results, model, until it answers. Each model call reserves its own worst
   * case of the day's tokens (the budget is checked per call, and a spent
   * one fails the turn as it refuses a turn without tools) and settles its
   * tokens when it answers. `first` is a reservation already made for the
   * first call (a streamed turn's, made before its response starts). The
   * calls are recorded under the turn's own id (`turnId`, the run id) and
   * the conversation's scope (`chatScope`), runKind `chat`, and not
   * replayed: a turn cut short is retried by its caller.
   */
  const runLoop = (
    input: TurnInput,
    tools: ReadonlyArray<Tool>,
    request: { readonly system: string; readonly messages: ReadonlyArray<ChatMessage> },
    options: {
      readonly first?: { held: Reservation | undefined }
      readonly emit?: (event: ToolEvent) => Effect.Effect<void>
    } = {}
  ) => {
    const key: LoopKey = {
      tenantId: input.tenantId as TenantId,
      runKind: "chat",
      runId: newId(),
      scope: chatScope(input.agentId, input.conversationId)
    }
    let inputTokens = 0
    let outputTokens = 0
    const callModel = (call: LoopModelRequest) =>
      tokenBudget.reserving(
        Effect.suspend(() => {
          const held = options.first?.held
          if (held === undefined) return reserve(input, requestTokens(models, input.model, call))
          options.first!.held = undefined
          return Effect.succeed(held)
        }),
        (held) => models.generate({ ...call, model: input.model, maxOutputTokens: held.maxOutputTokens }),
        (reply, held) =>
          Effect.sync(() => {
            inputTokens += reply.inputTokens
            outputTokens += reply.outputTokens
          }).pipe(
            Effect.andThen(tokenBudget.settleInBackground(held, reply.inputTokens + reply.outputTokens)),
            Effect.as(reply)
          )
      )
    return loop
      .run({
        key,
        durable: false,
        system: request.system,
        messages: request.messages,
        tools,
        agentChain: [input.agentId],
        askAgent: agentTools.askAgent(key),
        callModel,
        emit: options.emit,
        responseFormat: input.responseFormat
      })
      .pipe(
        Effect.flatMap((outcome) =>
          outcome.invalidOutput === undefined
            ? Effect.succeed({ ...outcome, turnId: key.runId, turnTokens: { inputTokens, outputTokens } })
            : Effect.fail(
                new ChatFailed({
                  reason: "InvalidOutput",
                  message: `The reply does not match the response format "${input.responseFormat?.name}": ${describeProblems(outcome.invalidOutput)}`,
                  problems: outcome.invalidOutput.map((problem) => ({
                    path: [...problem.path],
                    message: problem.message
                  }))
                })
              )
        ),
        Effect.mapError((error) => (error._tag === "ModelError" ? toChatFailed(error) : error)),
        // The calls' records are written as the loop goes; a database lost meanwhile fails the turn, to be retried.
        Effect.catchDefect((defect) =>
          isSqlError(defect)
            ? Effect.fail(
                new ChatFailed({
                  reason: "DatabaseUnavailable",
                  message: "The database is unavailable; try again shortly"
                })
              )
            : Effect.die(defect)
        )
      )
  }

  /**
   * A turn with tools: the loop, then the turn stored and its response.
   * Once the loop has answered, the turn is stored even if the caller has
   * stopped waiting (each call's tokens were settled as it answered).
   */
  const loopTurn = (
    input: TurnInput,
    tools: ReadonlyArray<Tool>,
    request: { readonly system: string; readonly messages: ReadonlyArray<ChatMessage> },
    sources: ReadonlyArray<GroundingSource> | undefined,
    createdAt: Date,
    options: Parameters<typeof runLoop>[3] = {}
  ) =>
    Effect.uninterruptibleMask((restore) =>
      Effect.flatMap(restore(runLoop(input, tools, request, options)), (outcome) =>
        Effect.as(
          remember(input, outcome.reply, outcome.turnTokens, createdAt),
          toResponse(input, outcome.reply, outcome.tokens, sources, outcome)
        )
      )
    )

  /**
   * A streamed turn with tools. Whether a model call is the answer is known
   * only once it is complete (a provider may send text before the calls it
   * asks for), so the loop's calls are not streamed: the tool events go out
   * as the calls are made, then the answer's text as one `Delta`, then
   * `Done`. The first call's tokens are reserved before `Started`, so a spent
   * budget refuses the request before its response starts, as without tools.
   */
  const streamWithTools = (
    input: TurnInput,
    tools: ReadonlyArray<Tool>,
    request: { readonly system: string; readonly messages: ReadonlyArray<ChatMessage> },
    sources: ReadonlyArray<GroundingSource> | undefined,
    createdAt: Date
  ) =>
    Effect.gen(function* () {
      const specs = tools.map(
        (tool): ToolSpec => ({
          name: tool.name,
          description: tool.description,
          parameters: tool.parameters
        })
      )
      const first: { held: Reservation | undefined } = { held: undefined }
      // The loop takes the reservation for its first call; one it never took (the stream ended first) is given back.
      yield* Effect.acquireRelease(
        Effect.tap(
          reserve(input, requestTokens(models, input.model, { ...request, tools: specs, toolChoice: "auto" })),
          (held) => Effect.sync(() => (first.held = held))
        ),
        () =>
          Effect.suspend(() => {
            const unused = first.held
            first.held = undefined
            return unused === undefined ? Effect.void : tokenBudget.settleInBackground(unused, 0)
          })
      )
      const events = Stream.callback<ChatEvent, ChatFailed>((queue) =>
        Effect.gen(function* () {
          const response = yield* loopTurn(input, tools, request, sources, createdAt, {
            first,
            emit: (event) =>
              Effect.asVoid(
                Queue.offer(queue, {
                  _tag: "Tool",
                  event: event.type,
                  data: { callId: event.callId, tool: event.tool, ...event.data }
                })
              )
          })
          if (response.reply !== "") yield* Queue.offer(queue, { _tag: "Delta", text: response.reply })
          yield* Queue.offer(queue, { _tag: "Done", response })
          yield* Queue.end(queue)
        })
      )
      return Stream.concat(Stream.succeed<ChatEvent>({ _tag: "Started" }), events)
    })

  return {
    send: Traced.fn("Conversation.send")(function* (payload: TurnInput) {
      const createdAt = new Date()
      const { messages, promptTokens, sources, system } = yield* prompt(payload)
      const tools = yield* toolsFor(payload)
      // A turn with tools or a response format runs the loop; a plain one, a single call.
      if (tools.length > 0 || payload.responseFormat !== undefined) {
        return yield* loopTurn(payload, tools, { system, messages }, sources, createdAt)
      }
      return yield* tokenBudget
        .reserving(
          reserve(payload, promptTokens),
          (held) => models.generate({ model: payload.model, system, messages, maxOutputTokens: held.maxOutputTokens }),
          // Once the model has answered, its tokens are charged (and the turn
          // stored) even if the caller stops waiting.
          (reply, held) =>
            Effect.as(
              Effect.uninterruptible(settleAndRemember(payload, reply, createdAt, held)),
              toResponse(payload, reply, reply.inputTokens + reply.outputTokens, sources)
            )
        )
        .pipe(Effect.mapError((error) => (error._tag === "ModelError" ? toChatFailed(error) : error)))
    }),
    // The turn is stored when the model is done and before `Done` is sent; a
    // stream interrupted earlier (the client went away) stores nothing, and
    // settles its reservation with what the provider may have spent: the
    // prompt, and the text it had sent.
    streamReply: (payload: TurnInput) =>
      Stream.unwrap(
        Effect.gen(function* () {
          const createdAt = new Date()
          const { messages, promptTokens, sources, system } = yield* prompt(payload)
          const tools = yield* toolsFor(payload)
          if (tools.length > 0 || payload.responseFormat !== undefined) {
            return yield* streamWithTools(payload, tools, { system, messages }, sources, createdAt)
          }
          let failure: ModelError | undefined
          let answered: ModelReply | undefined
          // Whatever ends the stream before its reply settled the reservation settles it here.
          const reservation = yield* Effect.acquireRelease(reserve(payload, promptTokens), (held, exit) =>
            tokenBudget.settling(held)
              ? Effect.void
              : tokenBudget.settleInBackground(
                  held,
                  answered !== undefined
                    ? answered.inputTokens + answered.outputTokens
                    : costOfFailure(
                        held,
                        failure !== undefined
                          ? Cause.fail(failure)
                          : Exit.isFailure(exit)
                            ? exit.cause
                            : Cause.interrupt()
                      )
                )
          )
          const reply = models
            .stream({ model: payload.model, system, messages, maxOutputTokens: reservation.maxOutputTokens })
            .pipe(
              Stream.tapError((error) => Effect.sync(() => (failure = error))),
              Stream.mapError(toChatFailed),
              Stream.mapEffect((event): Effect.Effect<ChatEvent, ChatFailed> => {
                if (event._tag === "Delta") {
                  return Effect.succeed({ _tag: "Delta", text: event.text })
                }
                answered = event.reply
                return Effect.as(settleAndRemember(payload, event.reply, createdAt, reservation), {
                  _tag: "Done",
                  response: toResponse(
                    payload,
                    event.reply,
                    event.reply.inputTokens + event.reply.outputTokens,
                    sources
                  )
                })
              })
            )
          return Stream.concat(Stream.succeed<ChatEvent>({ _tag: "Started" }), reply)
        })
      ),
    // The conversation's tool calls go with its turns; an agent without memory keeps no turns, only calls.
    forget: Traced.fn("Conversation.forget")(function* (payload: typeof Forget.payloadSchema.Type) {
      history = undefined
      held = 0
      const removed = yield* repo.forget(
        payload.tenantId as TenantId,
        payload.agentId as AgentId,
        payload.conversationId
      )
      const calls = yield* toolCalls
        .forgetChat(payload.tenantId as TenantId, chatScope(payload.agentId, payload.conversationId))
        .pipe(Effect.orDie)
      return removed || calls > 0
    })
  } as const
})

/**
 * A conversation with memory lives on one node while it is used; one idle for
 * two minutes leaves memory (its turns are in Postgres and are read again on
 * its next message), so a burst of conversations does not stay resident.
 */
export const layer = Conversation.toLayer(
  Effect.map(makeTurns, (turns) =>
    Conversation.of({
      Send: ({ payload }) => turns.send(payload),
      StreamReply: ({ payload }) => turns.streamReply(payload),
      Forget: ({ payload }) => turns.forget(payload)
    })
  ),
  { maxIdleTime: "2 minutes" }
).pipe(Layer.provide(ToolCallsRepo.layer))
