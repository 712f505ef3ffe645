import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import * as SqlClient from "effect/sql/SqlClient"
import * as Crypto from "node:crypto"
import type { Plan } from "../Auth/Api.ts"
import { AppConfig } from "../Config.ts"
import type { TenantId } from "../Domain/Ids.ts"
import { ServiceUnavailable } from "../Domain/Problems.ts"
import { StripeWebhookRepo } from "./Repo.ts"
import { InvalidWebhook, type WebhookOutcome } from "./StripeApi.ts"
import * as Traced from "../Observability/Traced.ts"

// ---------------------------------------------------------------------------
// Signature (https://docs.stripe.com/webhooks#verify-manually)
// ---------------------------------------------------------------------------

/** Seconds a signed timestamp may differ from our clock, either way: Stripe's default. */
export const signatureToleranceSeconds = 300

const hexSignature = /^[0-9a-f]{64}$/

interface SignatureHeader {
  readonly timestamp: number
  readonly signatures: ReadonlyArray<string>
}

/**
 * `t=<unix seconds>,v1=<hex>[,v1=<hex>...]`. Several v1 entries appear while a
 * secret is being rolled; other schemes (v0 of test events) are skipped, as
 * Stripe's libraries do.
 */
const parseSignatureHeader = (header: string): Option.Option<SignatureHeader> => {
  let timestamp: number | undefined
  const signatures: Array<string> = []
  for (const item of header.split(",")) {
    const separator = item.indexOf("=")
    if (separator === -1) return Option.none()
    const key = item.slice(0, separator).trim()
    const value = item.slice(separator + 1).trim()
    if (key === "t") {
      if (timestamp !== undefined || !/^\d{1,12}$/.test(value)) return Option.none()
      timestamp = Number(value)
    } else if (key === "v1") {
      signatures.push(value)
    }
  }
  return timestamp === undefined || signatures.length === 0 ? Option.none() : Option.some({ timestamp, signatures })
}

/**
 * Checks a delivery as Stripe specifies: HMAC-SHA256 over `<t>.<raw body>`
 * with the endpoint secret, any v1 may match (compared in constant time),
 * then the timestamp within the tolerance so a captured delivery cannot be
 * replayed later.
 */
export const verifySignature = (options: {
  readonly secret: Redacted.Redacted<string>
  readonly header: string | undefined
  readonly body: Uint8Array
  readonly nowSeconds: number
}): Option.Option<string> => {
  if (options.header === undefined || options.header.trim() === "") {
    return Option.some("No stripe-signature header value was provided")
  }
  const parsed = parseSignatureHeader(options.header)
  if (Option.isNone(parsed)) return Option.some("Unable to extract timestamp and signatures from header")
  const { signatures, timestamp } = parsed.value
  const expected = Buffer.from(
    Crypto.createHmac("sha256", Redacted.value(options.secret))
      .update(`${timestamp}.`)
      .update(options.body)
      .digest("hex")
  )
  const matches = signatures.some(
    (signature) => hexSignature.test(signature) && Crypto.timingSafeEqual(expected, Buffer.from(signature))
  )
  if (!matches) return Option.some("No signatures found matching the expected signature for payload")
  if (Math.abs(options.nowSeconds - timestamp) > signatureToleranceSeconds) {
    return Option.some("Timestamp outside the tolerance zone")
  }
  return Option.none()
}

// ---------------------------------------------------------------------------
// Events: only the fields we read, so Stripe adding fields changes nothing
// ---------------------------------------------------------------------------

export const Envelope = Schema.Struct({
  id: Schema.String.check(Schema.isMinLength(1), Schema.isMaxLength(255)),
  type: Schema.String.check(Schema.isMinLength(1), Schema.isMaxLength(255)),
  created: Schema.Int
})

const eventOf = <S extends Schema.Top>(object: S) => Schema.Struct({ data: Schema.Struct({ object }) })

const CheckoutSessionCompleted = eventOf(
  Schema.Struct({
    client_reference_id: Schema.optionalKey(Schema.NullOr(Schema.String)),
    customer: Schema.optionalKey(Schema.NullOr(Schema.String)),
    subscription: Schema.optionalKey(Schema.NullOr(Schema.String))
  })
)

const SubscriptionEvent = eventOf(
  Schema.Struct({
    id: Schema.String,
    customer: Schema.String,
    status: Schema.String,
    metadata: Schema.optionalKey(Schema.NullOr(Schema.Record(Schema.String, Schema.String))),
    items: Schema.Struct({
      data: Schema.Array(Schema.Struct({ price: Schema.Struct({ id: Schema.String }) })).check(Schema.isMinLength(1))
    })
  })
)

// Statuses in which the customer has what they pay for. past_due, unpaid,
// canceled, incomplete, incomplete_expired and paused mean no paid plan:
// Stripe sends another update when a payment brings the subscription back.
const entitledStatuses: ReadonlySet<string> = new Set(["active", "trialing"])

/**
 * How far along its life a subscription is, to order events from the same
 * second: incomplete first, then past due and the like, then paying, then
 * ended. So a reordered `created` (incomplete) never overrides an `active` of
 * the same second, while a cancellation always applies.
 */
const lifecycleRank = (type: string, status: string): number => {
  if (type === "customer.subscription.deleted") return 3
  switch (status) {
    case "incomplete":
      return 0
    case "active":
    case "trialing":
      return 2
    case "canceled":
    case "incomplete_expired":
      return 3
    default:
      // past_due, unpaid, paused, and any status Stripe adds later.
      return 1
  }
}

const subscriptionEventTypes: ReadonlySet<string> = new Set([
  "customer.subscription.created",
  "customer.subscription.updated",
  "customer.subscription.deleted"
])

/** What one event did, as recorded in stripe_events. */
export interface Applied {
  readonly outcome: Exclude<WebhookOutcome, "duplicate">
  readonly tenantId: TenantId | null
  readonly reason: string | null
}

const processed = (tenantId: TenantId): Applied => ({ outcome: "processed", tenantId, reason: null })
const ignored = (reason: string, tenantId: TenantId | null = null): Applied => ({
  outcome: "ignored",
  tenantId,
  reason
})
const failed = (reason: string): Applied => ({ outcome: "failed", tenantId: null, reason })

// ---------------------------------------------------------------------------
// The service
// ---------------------------------------------------------------------------

const decodeJson = (body: Uint8Array): Option.Option<unknown> => {
  try {
    return Option.some(JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(body)))
  } catch {
    return Option.none()
  }
}

// Stored in stripe_events.error; schema messages can grow with the input.
const shortReason = (reason: string) => (reason.length > 1000 ? `${reason.slice(0, 997)}...` : reason)

/**
 * Stripe's deliveries: verified, applied at most once per event id, and each
 * applied in the same transaction as its stripe_events row. A plan change is
 * a row update, so the quota sees it on the tenant's next request.
 */
export class StripeWebhook extends Context.Service<StripeWebhook>()("agent-host/StripeWebhook", {
  make: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const repo = yield* StripeWebhookRepo
    const config = yield* AppConfig

    const planOfPrice = (priceId: string): Option.Option<Plan> =>
      Option.contains(config.stripePricePro, priceId)
        ? Option.some("pro")
        : Option.contains(config.stripePriceBusiness, priceId)
          ? Option.some("business")
          : Option.none()

    const checkoutCompleted = Traced.fn("StripeWebhook.checkoutCompleted")(function* (event: unknown) {
      const decoded = yield* Effect.result(Schema.decodeUnknownEffect(CheckoutSessionCompleted)(event))
      if (decoded._tag === "Failure") return failed(decoded.failure.message)
      const session = decoded.success.data.object
      // Our checkout puts the tenant id in client_reference_id; sessions
      // without it (payment links, other products) are not ours to apply.
      if (session.client_reference_id == null) return ignored("The session has no client_reference_id")
      if (session.customer == null) return ignored("The session has no customer")
      const tenant = yield* repo.lockTenant({ id: session.client_reference_id })
      if (Option.isNone(tenant)) return ignored(`No tenant ${session.client_reference_id}`)
      // Whoever opens a payment link can set client_reference_id to any
      // tenant's id: it links a customer only to a tenant that has none yet
      // (or has this one), never moving a tenant's subscription elsewhere.
      if (tenant.value.stripeCustomerId !== null && tenant.value.stripeCustomerId !== session.customer) {
        return ignored(
          `Tenant ${tenant.value.id} is already linked to another customer (${tenant.value.stripeCustomerId})`,
          tenant.value.id
        )
      }
      const owner = yield* repo.lockTenant({ customer: session.customer })
      if (Option.isSome(owner) && owner.value.id !== tenant.value.id) {
        return ignored(`Customer ${session.customer} is linked to another tenant`, tenant.value.id)
      }
      yield* repo.linkCustomer(tenant.value.id, session.customer, session.subscription ?? null)
      return processed(tenant.value.id)
    })

    const subscriptionChanged = Traced.fn("StripeWebhook.subscriptionChanged")(function* (
      envelope: typeof Envelope.Type,
      event: unknown
    ) {
      const decoded = yield* Effect.result(Schema.decodeUnknownEffect(SubscriptionEvent)(event))
      if (decoded._tag === "Failure") return failed(decoded.failure.message)
      const subscription = decoded.success.data.object

      // The customer link comes from checkout. A subscription event can
      // arrive before that checkout event; the tenant id our checkout puts
      // in the subscription's metadata finds the tenant then.
      let tenant = yield* repo.lockTenant({ customer: subscription.customer })
      const metadataTenant = subscription.metadata?.tenant_id
      if (Option.isNone(tenant) && metadataTenant !== undefined) {
        tenant = yield* repo.lockTenant({ id: metadataTenant })
      }
      if (Option.isNone(tenant)) {
        return ignored(`No tenant is linked to customer ${subscription.customer}`)
      }
      const current = tenant.value

      // Stripe does not deliver in order: an event older than the last one
      // applied would roll the plan back.
      if (current.subscriptionEventAt !== null && current.subscriptionEventAt.getTime() > envelope.created * 1000) {
        return ignored(
          `Event created ${new Date(envelope.created * 1000).toISOString()} is older than the last applied ` +
            `subscription event (${current.subscriptionEventAt.toISOString()})`,
          current.id
        )
      }
      // `created` has whole seconds, and a new subscription's created
      // (incomplete) and updated (active) events usually share one: within a
      // second, the subscription's own lifecycle orders them.
      const eventRank = lifecycleRank(envelope.type, subscription.status)
      if (
        current.subscriptionEventAt !== null &&
        current.subscriptionEventAt.getTime() === envelope.created * 1000 &&
        current.stripeSubscriptionId === subscription.id &&
        current.subscriptionStatus !== null &&
        eventRank < lifecycleRank("customer.subscription.updated", current.subscriptionStatus)
      ) {
        return ignored(
          `Event created in the same second as the last applied subscription event; "${subscription.status}" ` +
            `comes before the applied "${current.subscriptionStatus}" in a subscription's life`,
          current.id
        )
      }

      const priceId = subscription.items.data[0]!.price.id
      const pricePlan = planOfPrice(priceId)
      if (Option.isNone(pricePlan)) {
        return ignored(
          `Price ${priceId} is not a plan (neither STRIPE_PRICE_PRO nor STRIPE_PRICE_BUSINESS)`,
          current.id
        )
      }

      const entitled = envelope.type !== "customer.subscription.deleted" && entitledStatuses.has(subscription.status)
      // The end of a subscription the tenant has already replaced must not
      // take away the plan of the new one.
      if (!entitled && current.stripeSubscriptionId !== null && current.stripeSubscriptionId !== subscription.id) {
        return ignored(
          `Subscription ${subscription.id} is not the tenant's current subscription ${current.stripeSubscriptionId}`,
          current.id
        )
      }

      yield* repo.applySubscription(current.id, {
        plan: entitled ? pricePlan.value : "free",
        customer: subscription.customer,
        subscription: subscription.id,
        status: subscription.status,
        eventCreated: envelope.created
      })
      return processed(current.id)
    })

    const apply = (envelope: typeof Envelope.Type, event: unknown): Effect.Effect<Applied> =>
      envelope.type === "checkout.session.completed"
        ? checkoutCompleted(event)
        : subscriptionEventTypes.has(envelope.type)
          ? subscriptionChanged(envelope, event)
          : Effect.succeed(ignored(`Event type ${envelope.type} is not handled`))

    /**
     * One delivery. Fails with a problem, changing nothing, when it is not a
     * signed Stripe event; database failures are defects (a 500, so Stripe
     * delivers again, and the rollback leaves no trace of this attempt).
     */
    const receive = Traced.fn("StripeWebhook.receive")(function* (request: {
      readonly signature: string | undefined
      readonly body: Uint8Array
    }) {
      if (Option.isNone(config.stripeWebhookSecret)) {
        yield* Effect.logWarning("Stripe webhook refused: STRIPE_WEBHOOK_SECRET is not set")
        return yield* new ServiceUnavailable({ detail: "The Stripe webhook is not configured" })
      }
      const nowSeconds = Math.floor((yield* Clock.currentTimeMillis) / 1000)
      const rejection = verifySignature({
        secret: config.stripeWebhookSecret.value,
        header: request.signature,
        body: request.body,
        nowSeconds
      })
      if (Option.isSome(rejection)) {
        yield* Effect.logWarning("Stripe webhook refused").pipe(Effect.annotateLogs({ reason: rejection.value }))
        return yield* new InvalidWebhook({ detail: rejection.value })
      }

      const json = decodeJson(request.body)
      const envelope = Option.isSome(json)
        ? yield* Effect.option(Schema.decodeUnknownEffect(Envelope)(json.value))
        : Option.none()
      if (Option.isNone(json) || Option.isNone(envelope)) {
        yield* Effect.logWarning("Stripe webhook refused").pipe(Effect.annotateLogs({ reason: "not an event" }))
        return yield* new InvalidWebhook({ detail: "The body is not a Stripe event (JSON with id, type and created)" })
      }
      const event = envelope.value

      const result = yield* Effect.gen(function* () {
        if (!(yield* repo.claimEvent(event))) return { outcome: "duplicate" as const, tenantId: null, reason: null }
        const applied = yield* apply(event, json.value)
        yield* repo.recordOutcome(event.id, { ...applied, reason: applied.reason && shortReason(applied.reason) })
        return applied
      }).pipe(sql.withTransaction, Effect.orDie)

      yield* Effect.logInfo("Stripe event").pipe(
        Effect.annotateLogs({
          stripeEventId: event.id,
          stripeEventType: event.type,
          outcome: result.outcome,
          ...(result.tenantId === null ? {} : { tenantId: result.tenantId }),
          ...(result.reason === null ? {} : { reason: result.reason })
        })
      )
      return { received: true as const, outcome: result.outcome }
    })

    return { receive } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make).pipe(Layer.provide(StripeWebhookRepo.layer))
}
