import { assert, describe, layer } from "@effect/vitest"
import { Effect, Option, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import * as Crypto from "node:crypto"
import Stripe from "stripe"
import * as TestServer from "../support/TestServer.ts"
import { type Account, TestClient } from "../support/TestServer.ts"

// Signatures come from Stripe's own library, never from the code under test.
const stripe = new Stripe("sk_test_x")
const secret = "whsec_test"
const path = "/api/webhooks/stripe"

const nowSeconds = () => Math.floor(Date.now() / 1000)
const unique = (prefix: string) => `${prefix}_${Crypto.randomBytes(8).toString("hex")}`

interface Delivery {
  readonly secret?: string
  readonly timestamp?: number
  /** Replaces the generated Stripe-Signature; null sends none. */
  readonly header?: string | null
  /** Sent instead of the signed payload (a tampered body). */
  readonly body?: string
}

// Stripe sends pretty-printed JSON; sending it as is checks that the exact bytes are verified.
const payloadOf = (event: unknown) => (typeof event === "string" ? event : JSON.stringify(event, null, 2))

const sign = (payload: string, options: { readonly secret?: string; readonly timestamp?: number } = {}) =>
  stripe.webhooks.generateTestHeaderString({
    payload,
    secret: options.secret ?? secret,
    ...(options.timestamp === undefined ? {} : { timestamp: options.timestamp })
  })

const deliver = (event: unknown, options: Delivery = {}) =>
  Effect.gen(function* () {
    const client = yield* TestClient
    const payload = payloadOf(event)
    const header = options.header === undefined ? sign(payload, options) : options.header
    return yield* client.request("POST", path, {
      rawBody: options.body ?? payload,
      headers: {
        "content-type": "application/json; charset=utf-8",
        ...(header === null ? {} : { "stripe-signature": header })
      }
    })
  })

const planOf = (account: Account) =>
  Effect.gen(function* () {
    const client = yield* TestClient
    const me = yield* client.request("GET", "/api/auth/me", { headers: TestServer.bearer(account.token) })
    assert.strictEqual(me.status, 200)
    return me.body.tenant.plan as string
  })

const eventRows = (id: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    return yield* sql<{ id: string; type: string; outcome: string; tenantId: string | null; error: string | null }>`
      SELECT id, type, outcome, tenant_id, error FROM stripe_events WHERE id = ${id}`.pipe(Effect.orDie)
  })

const tenantRow = (tenantId: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const [row] = yield* sql<{
      plan: string
      stripeCustomerId: string | null
      stripeSubscriptionId: string | null
      subscriptionStatus: string | null
    }>`SELECT plan, stripe_customer_id, stripe_subscription_id, subscription_status FROM tenants WHERE id = ${tenantId}`.pipe(
      Effect.orDie
    )
    return row!
  })

const checkoutCompleted = (options: {
  readonly tenantId: string
  readonly customer: string
  readonly subscription?: string
  readonly id?: string
}) => ({
  id: options.id ?? unique("evt"),
  object: "event",
  type: "checkout.session.completed",
  created: nowSeconds(),
  livemode: false,
  data: {
    object: {
      id: unique("cs_test"),
      object: "checkout.session",
      mode: "subscription",
      client_reference_id: options.tenantId,
      customer: options.customer,
      subscription: options.subscription ?? null
    }
  }
})

const subscriptionEvent = (options: {
  readonly type?: "created" | "updated" | "deleted"
  readonly customer: string
  readonly status: string
  readonly price: string
  readonly created?: number
  readonly id?: string
  readonly subscription?: string
  readonly metadata?: Record<string, string>
}) => ({
  id: options.id ?? unique("evt"),
  object: "event",
  type: `customer.subscription.${options.type ?? "updated"}`,
  created: options.created ?? nowSeconds(),
  livemode: false,
  data: {
    object: {
      id: options.subscription ?? "sub_1",
      object: "subscription",
      customer: options.customer,
      status: options.status,
      metadata: options.metadata ?? {},
      items: {
        object: "list",
        data: [{ id: unique("si"), object: "subscription_item", price: { id: options.price, object: "price" } }]
      }
    }
  }
})

/** A signed-up tenant whose Stripe customer is linked, as after a completed checkout. */
const customerWithCheckout = (subscription = "sub_1") =>
  Effect.gen(function* () {
    const account = yield* TestServer.signUp()
    const customer = unique("cus")
    const linked = yield* deliver(checkoutCompleted({ tenantId: account.tenantId, customer, subscription }))
    assert.strictEqual(linked.status, 200, linked.text)
    assert.deepStrictEqual(linked.body, { received: true, outcome: "processed" })
    return { account, customer }
  })

const assertRefused = (response: TestServer.TestResponse, detail: RegExp) => {
  assert.strictEqual(response.status, 400, response.text)
  assert.strictEqual(response.headers.get("content-type"), "application/problem+json")
  assert.strictEqual(response.body.type, "urn:agent-host:problem:invalid-webhook")
  assert.match(response.body.detail, detail)
}

layer(
  TestServer.layer({
    stripeWebhookSecret: Option.some(Redacted.make(secret)),
    stripePricePro: Option.some("price_pro"),
    stripePriceBusiness: Option.some("price_biz")
  }),
  { excludeTestServices: true }
)("Stripe webhook", (it) => {
  describe("applying events", () => {
    it.effect("checkout links the customer; its subscription events then set the plan, seen on the next request", () =>
      Effect.gen(function* () {
        const { account, customer } = yield* customerWithCheckout("sub_A")
        const linked = yield* tenantRow(account.tenantId)
        assert.strictEqual(linked.stripeCustomerId, customer)
        assert.strictEqual(linked.stripeSubscriptionId, "sub_A")
        assert.strictEqual(yield* planOf(account), "free")

        const event = subscriptionEvent({ customer, status: "active", price: "price_pro", subscription: "sub_A" })
        const response = yield* deliver(event)
        assert.strictEqual(response.status, 200, response.text)
        assert.deepStrictEqual(response.body, { received: true, outcome: "processed" })
        assert.strictEqual(yield* planOf(account), "pro")
        assert.strictEqual((yield* tenantRow(account.tenantId)).subscriptionStatus, "active")
        const [row] = yield* eventRows(event.id)
        assert.deepInclude(row, {
          type: "customer.subscription.updated",
          outcome: "processed",
          tenantId: account.tenantId
        })

        const business = yield* deliver(
          subscriptionEvent({ customer, status: "trialing", price: "price_biz", subscription: "sub_A" })
        )
        assert.strictEqual(business.body.outcome, "processed")
        assert.strictEqual(yield* planOf(account), "business")
      })
    )

    it.effect("the body is verified byte for byte, non-ASCII included", () =>
      Effect.gen(function* () {
        const { account, customer } = yield* customerWithCheckout()
        const event = subscriptionEvent({ customer, status: "active", price: "price_pro" })
        // Unusual but valid JSON: spacing and escapes a re-serialiser would change.
        const payload = payloadOf({ ...event, note: "Zürich ✓ \u00e9" }).replace(
          '"object": "event"',
          '"object" :\t"event"'
        )
        const response = yield* deliver(payload)
        assert.strictEqual(response.status, 200, response.text)
        assert.strictEqual(yield* planOf(account), "pro")
      })
    )

    it.effect("deleted, canceled and past_due subscriptions fall back to free", () =>
      Effect.gen(function* () {
        const { account, customer } = yield* customerWithCheckout()
        const base = nowSeconds() - 100
        const cases = [
          { type: "updated", status: "active", plan: "pro" },
          { type: "updated", status: "past_due", plan: "free" },
          { type: "updated", status: "active", plan: "pro" },
          { type: "updated", status: "canceled", plan: "free" },
          { type: "created", status: "active", plan: "pro" },
          { type: "deleted", status: "canceled", plan: "free" }
        ] as const
        for (const [i, step] of cases.entries()) {
          const response = yield* deliver(
            subscriptionEvent({ type: step.type, customer, status: step.status, price: "price_pro", created: base + i })
          )
          assert.strictEqual(response.body.outcome, "processed", `${step.type} ${step.status}`)
          assert.strictEqual(yield* planOf(account), step.plan, `${step.type} ${step.status}`)
        }
      })
    )

    it.effect(
      "a subscription event before checkout is ignored; once checkout links the customer, the next one applies",
      () =>
        Effect.gen(function* () {
          const account = yield* TestServer.signUp()
          const customer = unique("cus")
          const early = subscriptionEvent({
            customer,
            status: "active",
            price: "price_pro",
            created: nowSeconds() - 10
          })
          const ignored = yield* deliver(early)
          assert.strictEqual(ignored.status, 200)
          assert.strictEqual(ignored.body.outcome, "ignored")
          assert.strictEqual(yield* planOf(account), "free")
          const [row] = yield* eventRows(early.id)
          assert.strictEqual(row!.outcome, "ignored")
          assert.match(row!.error!, new RegExp(`No tenant is linked to customer ${customer}`))

          yield* deliver(checkoutCompleted({ tenantId: account.tenantId, customer }))
          const later = yield* deliver(subscriptionEvent({ customer, status: "active", price: "price_pro" }))
          assert.strictEqual(later.body.outcome, "processed")
          assert.strictEqual(yield* planOf(account), "pro")
        })
    )

    it.effect(
      "a checkout naming a tenant that has another customer does not relink it; its own customer again does",
      () =>
        Effect.gen(function* () {
          const { account, customer } = yield* customerWithCheckout("sub_victim")
          yield* deliver(
            subscriptionEvent({ customer, status: "active", price: "price_pro", subscription: "sub_victim" })
          )
          assert.strictEqual(yield* planOf(account), "pro")

          // A payment link opened with the victim's tenant id as client_reference_id.
          const intruder = unique("cus")
          const hijack = checkoutCompleted({
            tenantId: account.tenantId,
            customer: intruder,
            subscription: "sub_intruder"
          })
          const response = yield* deliver(hijack)
          assert.strictEqual(response.status, 200, response.text)
          assert.deepStrictEqual(response.body, { received: true, outcome: "ignored" })
          const [row] = yield* eventRows(hijack.id)
          assert.strictEqual(row!.outcome, "ignored")
          assert.strictEqual(row!.tenantId, account.tenantId)
          assert.match(row!.error!, /already linked to another customer/)
          assert.deepInclude(yield* tenantRow(account.tenantId), {
            stripeCustomerId: customer,
            stripeSubscriptionId: "sub_victim",
            plan: "pro"
          })
          // The intruder's subscription events find no tenant, so they change no plan.
          const intruderEvent = yield* deliver(
            subscriptionEvent({
              customer: intruder,
              status: "canceled",
              price: "price_pro",
              subscription: "sub_intruder"
            })
          )
          assert.strictEqual(intruderEvent.body.outcome, "ignored")
          assert.strictEqual(yield* planOf(account), "pro")

          // The tenant's own customer checking out again still links (a new subscription).
          const again = yield* deliver(
            checkoutCompleted({ tenantId: account.tenantId, customer, subscription: "sub_next" })
          )
          assert.strictEqual(again.body.outcome, "processed")
          assert.strictEqual((yield* tenantRow(account.tenantId)).stripeSubscriptionId, "sub_next")
        })
    )

    it.effect("metadata.tenant_id finds and links a tenant whose checkout has not arrived yet", () =>
      Effect.gen(function* () {
        const account = yield* TestServer.signUp()
        const customer = unique("cus")
        const response = yield* deliver(
          subscriptionEvent({
            type: "created",
            customer,
            status: "active",
            price: "price_biz",
            metadata: { tenant_id: account.tenantId }
          })
        )
        assert.strictEqual(response.body.outcome, "processed")
        assert.strictEqual(yield* planOf(account), "business")
        assert.strictEqual((yield* tenantRow(account.tenantId)).stripeCustomerId, customer)
      })
    )

    it.effect("an unknown price changes nothing and is recorded as ignored with the reason", () =>
      Effect.gen(function* () {
        const { account, customer } = yield* customerWithCheckout()
        const event = subscriptionEvent({ customer, status: "active", price: "price_other" })
        const response = yield* deliver(event)
        assert.deepStrictEqual(response.body, { received: true, outcome: "ignored" })
        assert.strictEqual(yield* planOf(account), "free")
        const [row] = yield* eventRows(event.id)
        assert.strictEqual(row!.tenantId, account.tenantId)
        assert.match(row!.error!, /price_other is not a plan/)
      })
    )

    it.effect("the end of a subscription the tenant has replaced does not take the new plan away", () =>
      Effect.gen(function* () {
        const { account, customer } = yield* customerWithCheckout("sub_old")
        const base = nowSeconds() - 100
        yield* deliver(
          subscriptionEvent({ customer, status: "active", price: "price_pro", subscription: "sub_old", created: base })
        )
        const replaced = yield* deliver(
          subscriptionEvent({
            customer,
            status: "active",
            price: "price_biz",
            subscription: "sub_new",
            created: base + 1
          })
        )
        assert.strictEqual(replaced.body.outcome, "processed")
        const oldEnds = yield* deliver(
          subscriptionEvent({
            type: "deleted",
            customer,
            status: "canceled",
            price: "price_pro",
            subscription: "sub_old",
            created: base + 2
          })
        )
        assert.strictEqual(oldEnds.body.outcome, "ignored")
        assert.strictEqual(yield* planOf(account), "business")
      })
    )

    it.effect("another event type is answered 200 and recorded as ignored", () =>
      Effect.gen(function* () {
        const id = unique("evt")
        const response = yield* deliver({
          id,
          object: "event",
          type: "invoice.paid",
          created: nowSeconds(),
          data: { object: { id: "in_1", object: "invoice" } }
        })
        assert.strictEqual(response.status, 200)
        assert.deepStrictEqual(response.body, { received: true, outcome: "ignored" })
        const rows = yield* eventRows(id)
        assert.strictEqual(rows.length, 1)
        assert.deepInclude(rows[0], { type: "invoice.paid", outcome: "ignored", tenantId: null })
      })
    )

    it.effect("a signed event missing the fields we need is recorded as failed and answered 200", () =>
      Effect.gen(function* () {
        const { account, customer } = yield* customerWithCheckout()
        const event = subscriptionEvent({ customer, status: "active", price: "price_pro" })
        const { items: _, ...withoutItems } = event.data.object
        const broken = { ...event, data: { object: withoutItems } }
        const response = yield* deliver(broken)
        assert.strictEqual(response.status, 200, response.text)
        assert.deepStrictEqual(response.body, { received: true, outcome: "failed" })
        assert.strictEqual(yield* planOf(account), "free")
        const [row] = yield* eventRows(event.id)
        assert.strictEqual(row!.outcome, "failed")
        assert.match(row!.error!, /items/)
      })
    )
  })

  describe("idempotency and order", () => {
    it.effect("an event id is applied once: a second delivery is a duplicate and changes nothing", () =>
      Effect.gen(function* () {
        const { account, customer } = yield* customerWithCheckout()
        const id = unique("evt")
        const first = yield* deliver(subscriptionEvent({ id, customer, status: "active", price: "price_pro" }))
        assert.strictEqual(first.body.outcome, "processed")
        const again = yield* deliver(subscriptionEvent({ id, customer, status: "active", price: "price_pro" }))
        assert.deepStrictEqual(again.body, { received: true, outcome: "duplicate" })
        // Same id, different content: still the event already handled.
        const reused = yield* deliver(
          subscriptionEvent({
            id,
            type: "deleted",
            customer,
            status: "canceled",
            price: "price_pro",
            created: nowSeconds() + 1
          })
        )
        assert.strictEqual(reused.status, 200)
        assert.strictEqual(reused.body.outcome, "duplicate")
        assert.strictEqual(yield* planOf(account), "pro")
        const rows = yield* eventRows(id)
        assert.strictEqual(rows.length, 1)
        assert.strictEqual(rows[0]!.outcome, "processed")
      })
    )

    it.effect("concurrent deliveries of one event: exactly one is processed", () =>
      Effect.gen(function* () {
        const { account, customer } = yield* customerWithCheckout()
        const event = subscriptionEvent({ customer, status: "active", price: "price_pro" })
        const responses = yield* Effect.forEach(Array.from({ length: 8 }), () => deliver(event), {
          concurrency: "unbounded"
        })
        const outcomes = responses.map((r) => r.body.outcome).sort()
        assert.deepStrictEqual(outcomes, [
          "duplicate",
          "duplicate",
          "duplicate",
          "duplicate",
          "duplicate",
          "duplicate",
          "duplicate",
          "processed"
        ])
        assert.strictEqual(yield* planOf(account), "pro")
      })
    )

    it.effect("a database failure mid-event is a 500 that leaves no trace, so Stripe's retry applies it", () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const { account, customer } = yield* customerWithCheckout()
        // The tenant update fails after the event row was inserted in the same transaction.
        yield* sql
          .unsafe(`
          CREATE FUNCTION refuse_plan_change() RETURNS trigger LANGUAGE plpgsql AS $$
          BEGIN RAISE EXCEPTION 'injected failure'; END $$`)
          .pipe(Effect.orDie)
        yield* sql
          .unsafe(`
          CREATE TRIGGER refuse_plan_change BEFORE UPDATE OF plan ON tenants
          FOR EACH ROW WHEN (NEW.stripe_customer_id = '${customer}') EXECUTE FUNCTION refuse_plan_change()`)
          .pipe(Effect.orDie)
        const event = subscriptionEvent({ customer, status: "active", price: "price_pro" })
        const failed = yield* deliver(event).pipe(
          Effect.ensuring(Effect.orDie(sql.unsafe(`DROP TRIGGER IF EXISTS refuse_plan_change ON tenants`)))
        )
        assert.strictEqual(failed.status, 500)
        assert.notInclude(failed.text, "injected failure")
        assert.strictEqual((yield* eventRows(event.id)).length, 0)
        assert.strictEqual(yield* planOf(account), "free")

        const retried = yield* deliver(event)
        assert.deepStrictEqual(retried.body, { received: true, outcome: "processed" })
        assert.strictEqual(yield* planOf(account), "pro")
        yield* sql.unsafe(`DROP FUNCTION refuse_plan_change()`).pipe(Effect.orDie)
      })
    )

    it.effect("an older event arriving late does not roll the plan back", () =>
      Effect.gen(function* () {
        const { account, customer } = yield* customerWithCheckout()
        const t2 = nowSeconds() - 60
        const t1 = t2 - 30
        const newer = yield* deliver(subscriptionEvent({ customer, status: "active", price: "price_pro", created: t2 }))
        assert.strictEqual(newer.body.outcome, "processed")
        const older = subscriptionEvent({ customer, status: "canceled", price: "price_pro", created: t1 })
        const late = yield* deliver(older)
        assert.deepStrictEqual(late.body, { received: true, outcome: "ignored" })
        assert.strictEqual(yield* planOf(account), "pro")
        const [row] = yield* eventRows(older.id)
        assert.strictEqual(row!.outcome, "ignored")
        assert.match(row!.error!, /older than the last applied/)

        // Not stuck: a newer cancellation still applies.
        const cancel = yield* deliver(
          subscriptionEvent({ customer, status: "canceled", price: "price_pro", created: t2 + 1 })
        )
        assert.strictEqual(cancel.body.outcome, "processed")
        assert.strictEqual(yield* planOf(account), "free")
      })
    )
  })

  describe("events from the same second", () => {
    it.effect(
      "a reordered created (incomplete) does not downgrade an active subscription; a cancellation still applies",
      () =>
        Effect.gen(function* () {
          const { account, customer } = yield* customerWithCheckout("sub_S")
          const second = nowSeconds() - 30
          const event = (type: "created" | "updated" | "deleted", status: string) =>
            subscriptionEvent({ type, customer, status, price: "price_pro", subscription: "sub_S", created: second })

          // Stripe sent created (incomplete), then updated (active), in one second; they arrive swapped.
          const active = yield* deliver(event("updated", "active"))
          assert.strictEqual(active.body.outcome, "processed")
          assert.strictEqual(yield* planOf(account), "pro")
          const created = event("created", "incomplete")
          const late = yield* deliver(created)
          assert.deepStrictEqual(late.body, { received: true, outcome: "ignored" })
          assert.strictEqual(yield* planOf(account), "pro")
          assert.strictEqual((yield* tenantRow(account.tenantId)).subscriptionStatus, "active")
          const [row] = yield* eventRows(created.id)
          assert.match(row!.error!, /same second/)

          // Nor does a same-second past_due behind it.
          assert.strictEqual((yield* deliver(event("updated", "past_due"))).body.outcome, "ignored")
          assert.strictEqual(yield* planOf(account), "pro")

          // A plan change between paying states in that second applies.
          const business = yield* deliver(
            subscriptionEvent({
              customer,
              status: "active",
              price: "price_biz",
              subscription: "sub_S",
              created: second
            })
          )
          assert.strictEqual(business.body.outcome, "processed")
          assert.strictEqual(yield* planOf(account), "business")

          // A real cancellation in the same second ends the plan, and nothing from that second brings it back.
          assert.strictEqual((yield* deliver(event("deleted", "canceled"))).body.outcome, "processed")
          assert.strictEqual(yield* planOf(account), "free")
          assert.strictEqual((yield* deliver(event("updated", "active"))).body.outcome, "ignored")
          assert.strictEqual(yield* planOf(account), "free")
        })
    )

    it.effect("in order, created (incomplete) then updated (active) of one second give the paid plan", () =>
      Effect.gen(function* () {
        const { account, customer } = yield* customerWithCheckout("sub_T")
        const second = nowSeconds() - 30
        for (const [type, status] of [
          ["created", "incomplete"],
          ["updated", "active"]
        ] as const) {
          const response = yield* deliver(
            subscriptionEvent({ type, customer, status, price: "price_pro", subscription: "sub_T", created: second })
          )
          assert.strictEqual(response.body.outcome, "processed", `${type} ${status}`)
        }
        assert.strictEqual(yield* planOf(account), "pro")
      })
    )
  })

  describe("refusals change nothing", () => {
    it.effect("a tampered body: 400, no plan change, nothing recorded", () =>
      Effect.gen(function* () {
        const { account, customer } = yield* customerWithCheckout()
        const event = subscriptionEvent({ customer, status: "canceled", price: "price_pro" })
        const signed = payloadOf(event)
        const tampered = signed.replace('"canceled"', '"active"')
        assert.notStrictEqual(tampered, signed)
        const response = yield* deliver(event, { body: tampered })
        assertRefused(response, /No signatures found matching the expected signature for payload/)
        assert.strictEqual(yield* planOf(account), "free")
        assert.strictEqual((yield* eventRows(event.id)).length, 0)
        // The same bytes, untampered, are accepted: the refusal was the tampering.
        const genuine = yield* deliver(event)
        assert.strictEqual(genuine.status, 200)
      })
    )

    it.effect("signed with another secret: 400, nothing recorded", () =>
      Effect.gen(function* () {
        const { account, customer } = yield* customerWithCheckout()
        const event = subscriptionEvent({ customer, status: "active", price: "price_pro" })
        const response = yield* deliver(event, { secret: "whsec_other" })
        assertRefused(response, /No signatures found matching/)
        assert.strictEqual(yield* planOf(account), "free")
        assert.strictEqual((yield* eventRows(event.id)).length, 0)
      })
    )

    it.effect("any matching v1 signature is accepted (a secret being rolled); v0 alone is not", () =>
      Effect.gen(function* () {
        const { account, customer } = yield* customerWithCheckout()
        const event = subscriptionEvent({ customer, status: "active", price: "price_pro" })
        const payload = payloadOf(event)
        const timestamp = nowSeconds()
        const v1Of = (header: string) => header.split(",").find((part) => part.startsWith("v1="))!
        const other = v1Of(sign(payload, { secret: "whsec_old", timestamp }))
        const ours = v1Of(sign(payload, { timestamp }))
        const v0Only = yield* deliver(event, { header: `t=${timestamp},${ours.replace("v1=", "v0=")}` })
        assertRefused(v0Only, /Unable to extract timestamp and signatures/)
        const response = yield* deliver(event, { header: `t=${timestamp},${other},${ours}` })
        assert.strictEqual(response.status, 200, response.text)
        assert.strictEqual(yield* planOf(account), "pro")
      })
    )

    it.effect("a timestamp more than 300 s away from now, either way: 400, nothing recorded", () =>
      Effect.gen(function* () {
        const { account, customer } = yield* customerWithCheckout()
        const event = subscriptionEvent({ customer, status: "active", price: "price_pro" })
        const stale = yield* deliver(event, { timestamp: nowSeconds() - 301 })
        assertRefused(stale, /Timestamp outside the tolerance zone/)
        const future = yield* deliver(event, { timestamp: nowSeconds() + 301 })
        assertRefused(future, /Timestamp outside the tolerance zone/)
        assert.strictEqual(yield* planOf(account), "free")
        assert.strictEqual((yield* eventRows(event.id)).length, 0)
        // Within the tolerance the same delivery is accepted.
        const recent = yield* deliver(event, { timestamp: nowSeconds() - 250 })
        assert.strictEqual(recent.status, 200, recent.text)
        assert.strictEqual(yield* planOf(account), "pro")
      })
    )

    it.effect("a missing or malformed Stripe-Signature: 400", () =>
      Effect.gen(function* () {
        const event = { id: unique("evt"), type: "invoice.paid", created: nowSeconds(), data: { object: {} } }
        const signature = sign(payloadOf(event))
        const missing = yield* deliver(event, { header: null })
        assertRefused(missing, /No stripe-signature header value was provided/)
        for (const header of [
          "garbage",
          signature.replace(/^t=\d+,/, ""),
          signature.replace(/^t=\d+/, "t=soon"),
          `${signature},t=1`,
          signature.replace(/,v1=.*$/, "")
        ]) {
          const response = yield* deliver(event, { header })
          assertRefused(response, /Unable to extract timestamp and signatures from header/)
        }
        assert.strictEqual((yield* eventRows(event.id)).length, 0)
      })
    )

    it.effect("a signed body that is not a Stripe event: 400, nothing recorded", () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const [before] = yield* sql<{ count: string }>`SELECT count(*) FROM stripe_events`.pipe(Effect.orDie)
        for (const body of ["not json", "{}", JSON.stringify({ id: "evt_x", type: "invoice.paid" }), "[]"]) {
          const response = yield* deliver(body)
          assertRefused(response, /not a Stripe event/)
        }
        const [after] = yield* sql<{ count: string }>`SELECT count(*) FROM stripe_events`.pipe(Effect.orDie)
        assert.strictEqual(after!.count, before!.count)
      })
    )

    it.effect("the endpoint is in the OpenAPI document, without auth", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const openapi = yield* client.request("GET", "/openapi.json")
        const operation = openapi.body.paths[path]?.post
        assert.isDefined(operation)
        assert.deepStrictEqual(operation.security, [])
        assert.property(operation.responses, "400")
        assert.property(operation.responses, "503")
      })
    )
  })
})

layer(TestServer.layer({ stripeWebhookSecret: Option.none() }), { excludeTestServices: true })(
  "Stripe webhook without a secret",
  (it) => {
    it.effect("refuses every delivery with 503, even a correctly signed one, and records nothing", () =>
      Effect.gen(function* () {
        const event = { id: unique("evt"), type: "invoice.paid", created: nowSeconds(), data: { object: {} } }
        for (const header of [undefined, null]) {
          const response = yield* deliver(event, header === undefined ? {} : { header })
          assert.strictEqual(response.status, 503, response.text)
          assert.strictEqual(response.headers.get("content-type"), "application/problem+json")
          assert.match(response.body.detail, /not configured/)
        }
        assert.strictEqual((yield* eventRows(event.id)).length, 0)
      })
    )
  }
)
