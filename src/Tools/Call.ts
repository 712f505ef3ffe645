import * as Schema from "effect/Schema"
import { textRecord } from "../Domain/Input.ts"

// One call of a tool as it is shown (docs/tools.md#calling-a-tool): whether it
// went well, what the model reads of it, and the exchange behind it, secret
// values masked. Schemas only: the test route answers with them and the
// dashboard's client reads them.

/** Why a call did not go well. */
export const CallErrorKind = Schema.Literals(["invalid_arguments", "refused", "timeout", "status", "error"]).annotate({
  description:
    "Why the call did not go well: `invalid_arguments` (they do not match `parameters`; nothing was sent), " +
    "`refused` (the egress guard, `allowedHosts`, or an agent tool's depth or loop), `timeout` (`policy.timeoutMs` " +
    "passed), `status` (an HTTP answer other than 2xx), `error` (anything else: a missing secret, a failed " +
    "connection, a missing agent)."
})
export type CallErrorKind = typeof CallErrorKind.Type

/** A request as sent, secret values replaced by `[secret NAME]`. */
export const SentRequest = Schema.Struct({
  method: Schema.String,
  url: Schema.String,
  headers: Schema.Record(Schema.String, Schema.String).annotate({
    description: "Every header sent, lower-cased, those the service sets included."
  }),
  body: Schema.NullOr(Schema.String)
})
export type SentRequest = typeof SentRequest.Type

/** An answer as received, secret values replaced by `[secret NAME]`. */
export const ReceivedResponse = Schema.Struct({
  status: Schema.Int,
  headers: Schema.Record(Schema.String, Schema.String),
  body: Schema.String.annotate({ description: "The body as text, at most 1 MiB of it." }),
  truncated: Schema.Boolean.annotate({ description: "Whether the body went on past 1 MiB and was cut there." })
})
export type ReceivedResponse = typeof ReceivedResponse.Type

/** One request of an HTTP call: the first, then one per redirect followed. */
export const HttpHop = Schema.Struct({
  request: SentRequest,
  response: Schema.NullOr(ReceivedResponse).annotate({
    description: "Null when no answer came: the connection failed or the time ran out."
  })
})
export type HttpHop = typeof HttpHop.Type

export const HttpExchange = Schema.Struct({
  kind: Schema.Literal("http"),
  requests: Schema.Array(HttpHop).annotate({
    description: "What was sent and received, in order; empty when nothing was sent."
  })
})
export type HttpExchange = typeof HttpExchange.Type

export const KnowledgeExchange = Schema.Struct({
  kind: Schema.Literal("knowledge"),
  knowledgeIds: Schema.Array(Schema.String),
  query: Schema.NullOr(Schema.String).annotate({ description: "Null when the arguments had none." }),
  topK: Schema.Int,
  found: Schema.Int.annotate({ description: "How many chunks the search gave." })
})
export type KnowledgeExchange = typeof KnowledgeExchange.Type

export const AgentExchange = Schema.Struct({
  kind: Schema.Literal("agent"),
  agentId: Schema.String,
  message: Schema.NullOr(Schema.String).annotate({ description: "Null when the arguments had none." }),
  chain: Schema.Array(Schema.String).annotate({
    description: "The agents asking, outermost first, then the one asked."
  })
})
export type AgentExchange = typeof AgentExchange.Type

/** What a call sent and got, by kind. */
export const Exchange = Schema.Union([HttpExchange, KnowledgeExchange, AgentExchange]).annotate({
  description: "What the call sent and got, by the tool's kind, every secret value replaced by `[secret NAME]`."
})
export type Exchange = typeof Exchange.Type

/** One call's outcome, as the test route answers it. */
export const CallResult = Schema.Struct({
  ok: Schema.Boolean,
  errorKind: Schema.optionalKey(CallErrorKind),
  output: Schema.String.annotate({
    description:
      "What the model reads: the result (for `http`, JSON text `{ status, contentType, body }`), or the error " +
      "message. Every secret value is replaced by `[secret NAME]`."
  }),
  durationMs: Schema.Number,
  exchange: Exchange
})
export type CallResult = typeof CallResult.Type

/** The most arguments (keys) a test call may send. */
export const maxTestArguments = 256

export const TestCallRequest = Schema.Struct({
  arguments: Schema.optionalKey(
    textRecord(Schema.Unknown, { max: maxTestArguments }).annotate({
      description:
        "The arguments, as the model would send them: a JSON object, checked against the tool's `parameters` " +
        "(default `{}`)."
    })
  )
})
export type TestCallRequest = typeof TestCallRequest.Type
