import * as Schema from "effect/Schema"
import * as HttpApiError from "effect/http-api/HttpApiError"

// Every error a client can receive is one of these RFC 9457 problems (or one
// of effect's built-in BadRequestProblem / InternalServerErrorProblem). The
// `type` tells problems with the same status apart.
const problemType = (slug: string) => `urn:agent-host:problem:${slug}` as const

export class NotFound extends HttpApiError.Problem<NotFound>()("NotFound", {
  type: problemType("not-found"),
  status: 404,
  title: "Not Found"
}) {}

export class Unauthorized extends HttpApiError.Problem<Unauthorized>()("Unauthorized", {
  type: problemType("unauthorized"),
  status: 401,
  title: "Unauthorized"
}) {}

export class Forbidden extends HttpApiError.Problem<Forbidden>()(
  "Forbidden",
  {
    type: problemType("forbidden"),
    status: 403,
    title: "Forbidden"
  },
  {
    requiredScope: Schema.optionalKey(Schema.String)
  }
) {}

export class Conflict extends HttpApiError.Problem<Conflict>()("Conflict", {
  type: problemType("conflict"),
  status: 409,
  title: "Conflict"
}) {}

export class ServiceUnavailable extends HttpApiError.Problem<ServiceUnavailable>()("ServiceUnavailable", {
  type: problemType("service-unavailable"),
  status: 503,
  title: "Service Unavailable"
}) {}

export class BadGateway extends HttpApiError.Problem<BadGateway>()("BadGateway", {
  type: problemType("model-provider-error"),
  status: 502,
  title: "Bad Gateway"
}) {}

export class GatewayTimeout extends HttpApiError.Problem<GatewayTimeout>()("GatewayTimeout", {
  type: problemType("model-provider-timeout"),
  status: 504,
  title: "Gateway Timeout"
}) {}

export class TooManyRequests extends HttpApiError.Problem<TooManyRequests>()(
  "TooManyRequests",
  {
    type: problemType("daily-limit-reached"),
    status: 429,
    title: "Too Many Requests"
  },
  {
    plan: Schema.String,
    limit: Schema.Int,
    resetAt: Schema.String
  }
) {}

export class TooManyStreams extends HttpApiError.Problem<TooManyStreams>()(
  "TooManyStreams",
  {
    type: problemType("too-many-streams"),
    status: 429,
    title: "Too Many Requests"
  },
  {
    limit: Schema.Int
  }
) {}

/** The 400 problem, with one entry per bad field: the same shape request decoding produces. */
export const BadRequest = HttpApiError.BadRequestProblem
export type BadRequest = HttpApiError.BadRequestProblem

/** A 400 naming one field of the request (of its payload unless said otherwise). */
export const invalidField = (field: string, message: string, slot: "payload" | "query" = "payload"): BadRequest =>
  new BadRequest({
    detail: `${slot}.${field}: ${message}`,
    errors: [{ path: [slot, field], message }]
  })

/** A 400 naming each bad part of the payload by its path in it (`["steps", 2, "agentId"]`). */
export const invalidFields = (
  issues: ReadonlyArray<{ readonly path: ReadonlyArray<string | number>; readonly message: string }>
): BadRequest =>
  new BadRequest({
    detail: issues.map((issue) => `payload.${issue.path.join(".")}: ${issue.message}`).join("; "),
    errors: issues.map((issue) => ({ path: ["payload", ...issue.path], message: issue.message }))
  })

/** The tenant's plan has spent its model tokens for the UTC day. */
export class TokenBudgetSpent extends HttpApiError.Problem<TokenBudgetSpent>()(
  "TokenBudgetSpent",
  {
    type: problemType("token-budget-spent"),
    status: 429,
    title: "Too Many Requests"
  },
  {
    plan: Schema.String,
    budget: Schema.Int.annotate({ description: "Model tokens per UTC day of the plan." }),
    used: Schema.Int,
    resetAt: Schema.String
  }
) {}

/**
 * The model's reply did not match the response format asked for, twice (the
 * second time told what was wrong): each problem by its path in the reply.
 */
export class OutputInvalid extends HttpApiError.Problem<OutputInvalid>()(
  "OutputInvalid",
  {
    type: problemType("output-invalid"),
    status: 422,
    title: "Unprocessable Content"
  },
  {
    errors: Schema.Array(
      Schema.Struct({
        path: Schema.Array(Schema.Union([Schema.String, Schema.Number])).annotate({
          description: "Where in the reply, as a path into its JSON ([] for the reply itself)."
        }),
        message: Schema.String
      })
    )
  }
) {}

/** The tenant's plan may not use this model (see FREE_MODELS / PRO_MODELS / BUSINESS_MODELS). */
export class ModelNotAllowed extends HttpApiError.Problem<ModelNotAllowed>()(
  "ModelNotAllowed",
  {
    type: problemType("model-not-allowed"),
    status: 403,
    title: "Forbidden"
  },
  {
    plan: Schema.String,
    model: Schema.String
  }
) {}

/** Too many login or register attempts from one client address or for one e-mail, or too many failed credentials from one address. */
export class TooManyAttempts extends HttpApiError.Problem<TooManyAttempts>()(
  "TooManyAttempts",
  {
    type: problemType("too-many-attempts"),
    status: 429,
    title: "Too Many Requests"
  },
  {
    retryAfter: Schema.Int.annotate({ description: "Seconds to wait before trying again (also in Retry-After)." })
  }
) {}

/** An upload over MAX_UPLOAD_BYTES. */
export class PayloadTooLarge extends HttpApiError.Problem<PayloadTooLarge>()(
  "PayloadTooLarge",
  {
    type: problemType("payload-too-large"),
    status: 413,
    title: "Payload Too Large"
  },
  {
    limit: Schema.Int
  }
) {}

/** An upload of a type the service cannot read. */
export class UnsupportedMediaType extends HttpApiError.Problem<UnsupportedMediaType>()("UnsupportedMediaType", {
  type: problemType("unsupported-media-type"),
  status: 415,
  title: "Unsupported Media Type"
}) {}

/** The same bytes are already a document of the knowledge base. */
export class DuplicateDocument extends HttpApiError.Problem<DuplicateDocument>()(
  "DuplicateDocument",
  {
    type: problemType("duplicate-document"),
    status: 409,
    title: "Conflict"
  },
  {
    documentId: Schema.String
  }
) {}

const quotaFields = {
  quota: Schema.String.annotate({
    description:
      "Which quota: knowledgeBases, documents, storedBytes, chunks, agents, orchestrations, teams, " +
      "apiKeys, webhookEndpoints, secrets or tools."
  }),
  setting: Schema.String.annotate({ description: "The setting that holds it for the plan, e.g. FREE_MAX_AGENTS." }),
  plan: Schema.String,
  limit: Schema.Int,
  used: Schema.Int.annotate({ description: "What the tenant has now." }),
  requested: Schema.Int.annotate({ description: "What the refused request would have added." })
}

/** A per-plan quota of what a tenant keeps (agents, knowledge bases, documents, chunks...) is reached. */
export class QuotaReached extends HttpApiError.Problem<QuotaReached>()(
  "QuotaReached",
  {
    type: problemType("quota-reached"),
    status: 429,
    title: "Too Many Requests"
  },
  quotaFields
) {}

/** The plan's stored bytes (MAX_STORED_BYTES) would be passed by an upload. */
export class StorageQuotaExceeded extends HttpApiError.Problem<StorageQuotaExceeded>()(
  "StorageQuotaExceeded",
  {
    type: problemType("storage-quota-exceeded"),
    status: 413,
    title: "Payload Too Large"
  },
  quotaFields
) {}

/** A document rechunked more often than RECHUNK_BURST / RECHUNK_INTERVAL allow. */
export class RechunkRateLimited extends HttpApiError.Problem<RechunkRateLimited>()(
  "RechunkRateLimited",
  {
    type: problemType("rechunk-rate-limited"),
    status: 429,
    title: "Too Many Requests"
  },
  {
    retryAfter: Schema.Int.annotate({
      description: "Seconds to wait before rechunking this document again (also in Retry-After)."
    })
  }
) {}

/** A webhook event was redelivered WEBHOOK_MAX_REDELIVERIES times already: it is not sent again. */
export class RedeliveryLimitReached extends HttpApiError.Problem<RedeliveryLimitReached>()(
  "RedeliveryLimitReached",
  {
    type: problemType("redelivery-limit-reached"),
    status: 409,
    title: "Conflict"
  },
  {
    setting: Schema.Literal("WEBHOOK_MAX_REDELIVERIES"),
    limit: Schema.Int.annotate({ description: "Redeliveries of one event at most." })
  }
) {}

/** The tenant redelivered more webhook events than WEBHOOK_REDELIVERIES_PER_TENANT per WEBHOOK_REDELIVERY_WINDOW. */
export class RedeliveryRateLimited extends HttpApiError.Problem<RedeliveryRateLimited>()(
  "RedeliveryRateLimited",
  {
    type: problemType("redelivery-rate-limited"),
    status: 429,
    title: "Too Many Requests"
  },
  {
    setting: Schema.Literal("WEBHOOK_REDELIVERIES_PER_TENANT"),
    limit: Schema.Int.annotate({ description: "Redeliveries per tenant in the window." }),
    windowSeconds: Schema.Int,
    retryAfter: Schema.Int.annotate({
      description: "Seconds to wait before the next redelivery fits (also in Retry-After)."
    })
  }
) {}

/**
 * The tenant has as many executions and team runs running as its plan allows
 * (FREE_MAX_RUNNING_RUNS...), and the request asked not to wait (`Prefer: wait=0`).
 */
export class TooManyRunningRuns extends HttpApiError.Problem<TooManyRunningRuns>()(
  "TooManyRunningRuns",
  {
    type: problemType("too-many-running-runs"),
    status: 429,
    title: "Too Many Requests"
  },
  {
    limit: Schema.Int.annotate({ description: "Executions and team runs the plan lets run at once." }),
    retryAfter: Schema.Int.annotate({ description: "Seconds to wait before trying again (also in Retry-After)." })
  }
) {}
