import * as Schema from "effect/Schema"

export const CallStatus = Schema.Literals(["running", "succeeded", "failed", "cancelled"])
export type CallStatus = typeof CallStatus.Type

/** A tool call as it is shown: on an execution's steps, a team run's transcript, a chat reply. */
export const ToolCallRecord = Schema.Struct({
  callId: Schema.String.annotate({ description: "The model's id of the call." }),
  tool: Schema.String.annotate({ description: "The tool's name." }),
  toolId: Schema.NullOr(Schema.String),
  arguments: Schema.Unknown.annotate({ description: "The arguments as the model sent them." }),
  status: CallStatus,
  result: Schema.NullOr(Schema.String).annotate({
    description: "The result as the model saw it: cut at the tool's maxOutputBytes, with a marker."
  }),
  resultCut: Schema.Boolean.annotate({
    description: "Whether `result` was cut; the whole result is at the call's own route."
  }),
  error: Schema.NullOr(Schema.String),
  errorKind: Schema.NullOr(Schema.String),
  attempts: Schema.Int.annotate({ description: "Times the call was made: 2 when a crash interrupted the first." }),
  durationMs: Schema.NullOr(Schema.Int),
  startedAt: Schema.Date,
  scope: Schema.String.annotate({
    description: "The step id, the team turn (`turn-N`), or for a chat turn `<agentId>/<conversationId>`."
  }),
  turn: Schema.Int.annotate({ description: "The model's turn in the loop that asked for the call, from 0." })
}).annotate({ identifier: "ToolCall" })
export type ToolCallRecord = typeof ToolCallRecord.Type
