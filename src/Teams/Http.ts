import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Stream from "effect/Stream"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as HttpApiBuilder from "effect/http-api/HttpApiBuilder"
import { Api } from "../Api.ts"
import { CurrentPrincipal } from "../Auth/Api.ts"
import { withBudgetHeaders } from "../Billing/Budget.ts"
import { asksNotToWait } from "../Domain/RunQueue.ts"
import type { RunEvent, StreamEnd } from "./TeamRuns.ts"
import { TeamRuns } from "./TeamRuns.ts"
import { Teams } from "./Teams.ts"
import * as Traced from "../Platform/Traced.ts"

const encoder = new TextEncoder()

/** A run's events as a text/event-stream response. */
const eventStream = (events: Stream.Stream<RunEvent | StreamEnd>) =>
  HttpServerResponse.stream(
    Stream.map(events, (event) =>
      encoder.encode(
        "reason" in event
          // No id: a client resuming with Last-Event-ID goes on from the last real event.
          ? `event: ${event.type}\ndata: ${JSON.stringify(event)}\n\n`
          : `id: ${event.id}\nevent: ${event.type}\ndata: ${
            JSON.stringify({ type: event.type, turn: event.turn, ...(event.data as object), at: event.createdAt })
          }\n\n`
      )),
    { contentType: "text/event-stream", headers: { "cache-control": "no-cache", "x-accel-buffering": "no" } }
  )

export const TeamsHttp = HttpApiBuilder.group(
  Api,
  "teams",
  Traced.fn(function*(handlers) {
    const teams = yield* Teams
    const runs = yield* TeamRuns
    return handlers.handleAll({
      list: Traced.fn(function*({ query }) {
        const { tenantId } = yield* CurrentPrincipal
        return yield* teams.list(tenantId, { activeOnly: false, ...query })
      }),
      create: Traced.fn(function*({ payload }) {
        const { tenantId } = yield* CurrentPrincipal
        return yield* teams.create(tenantId, payload)
      }),
      get: Traced.fn(function*({ params }) {
        const { tenantId } = yield* CurrentPrincipal
        return yield* teams.get(tenantId, params.id)
      }),
      update: Traced.fn(function*({ params, payload }) {
        const { tenantId } = yield* CurrentPrincipal
        return yield* teams.update(tenantId, params.id, payload)
      }),
      remove: Traced.fn(function*({ params }) {
        const { tenantId } = yield* CurrentPrincipal
        // A deleted team's runs would go on unseen (they are read through the team): they stop.
        yield* runs.cancelUnfinished(tenantId, params.id)
        yield* teams.remove(tenantId, params.id)
      }),
      rotateSecret: Traced.fn(function*({ params }) {
        const { tenantId } = yield* CurrentPrincipal
        return yield* teams.rotateSecret(tenantId, params.id)
      }),
      deliveries: Traced.fn(function*({ params, query }) {
        const { tenantId } = yield* CurrentPrincipal
        return yield* teams.deliveries(tenantId, params.id, query)
      }),
      redeliver: Traced.fn(function*({ params }) {
        const { tenantId } = yield* CurrentPrincipal
        return yield* teams.redeliver(tenantId, params.id, params.eventId)
      }),
      run: Traced.fn(function*({ params, payload, headers }) {
        const { tenantId } = yield* CurrentPrincipal
        return yield* withBudgetHeaders(
          runs.start(tenantId, params.id, payload, headers["idempotency-key"], !asksNotToWait(headers.prefer))
        )
      }),
      runs: Traced.fn(function*({ params, query }) {
        const { tenantId } = yield* CurrentPrincipal
        return yield* runs.list(tenantId, params.id, query)
      }),
      getRun: Traced.fn(function*({ params }) {
        const { tenantId } = yield* CurrentPrincipal
        return yield* runs.get(tenantId, params.id, params.runId)
      }),
      transcript: Traced.fn(function*({ params, query }) {
        const { tenantId } = yield* CurrentPrincipal
        return yield* runs.transcript(tenantId, params.id, params.runId, query)
      }),
      cancel: Traced.fn(function*({ params }) {
        const { tenantId } = yield* CurrentPrincipal
        return yield* runs.cancel(tenantId, params.id, params.runId)
      }),
      events: Traced.fn(function*({ params, request }) {
        const { tenantId } = yield* CurrentPrincipal
        return eventStream(yield* runs.events(tenantId, params.id, params.runId, request.headers["last-event-id"] ?? "0"))
      })
    })
  })
)

const ok = <A>(data: A) => ({ success: true as const, data })

/** The handlers of the key-authenticated groups: /api/v1/teams and /api/public/teams answer alike. */
const keyHandlers = Effect.gen(function*() {
  const teams = yield* Teams
  const runs = yield* TeamRuns
  return {
    list: Traced.fn(function*({ query }: { readonly query: { readonly limit?: number | undefined; readonly cursor?: string | undefined } }) {
      const { tenantId } = yield* CurrentPrincipal
      const page = yield* teams.list(tenantId, { activeOnly: true, ...query })
      return { success: true as const, ...page }
    }),
    run: Traced.fn(function*({ params, payload, headers }: {
      readonly params: { readonly id: string }
      readonly payload: { readonly mission: string }
      readonly headers: { readonly "idempotency-key"?: string | undefined; readonly prefer?: string | undefined }
    }) {
      const { tenantId } = yield* CurrentPrincipal
      return ok(yield* withBudgetHeaders(
        runs.start(tenantId, params.id, payload, headers["idempotency-key"], !asksNotToWait(headers.prefer))
      ))
    }),
    runs: Traced.fn(function*({ params, query }: {
      readonly params: { readonly id: string }
      readonly query: { readonly limit?: number | undefined; readonly cursor?: string | undefined }
    }) {
      const { tenantId } = yield* CurrentPrincipal
      return ok(yield* runs.list(tenantId, params.id, query))
    }),
    getRun: Traced.fn(function*({ params }: { readonly params: { readonly id: string; readonly runId: string } }) {
      const { tenantId } = yield* CurrentPrincipal
      return ok(yield* runs.get(tenantId, params.id, params.runId))
    }),
    transcript: Traced.fn(function*({ params, query }: {
      readonly params: { readonly id: string; readonly runId: string }
      readonly query: { readonly limit?: number | undefined; readonly cursor?: string | undefined }
    }) {
      const { tenantId } = yield* CurrentPrincipal
      return ok(yield* runs.transcript(tenantId, params.id, params.runId, query))
    }),
    cancel: Traced.fn(function*({ params }: { readonly params: { readonly id: string; readonly runId: string } }) {
      const { tenantId } = yield* CurrentPrincipal
      return ok(yield* runs.cancel(tenantId, params.id, params.runId))
    }),
    events: Traced.fn(function*({ params, request }: {
      readonly params: { readonly id: string; readonly runId: string }
      readonly request: { readonly headers: Readonly<Record<string, string | undefined>> }
    }) {
      const { tenantId } = yield* CurrentPrincipal
      return eventStream(yield* runs.events(tenantId, params.id, params.runId, request.headers["last-event-id"] ?? "0"))
    })
  }
})

export const TeamsV1Http = HttpApiBuilder.group(
  Api,
  "v1Teams",
  Traced.fn(function*(handlers) {
    return handlers.handleAll(yield* keyHandlers)
  })
)

export const TeamsPublicHttp = HttpApiBuilder.group(
  Api,
  "publicTeams",
  Traced.fn(function*(handlers) {
    return handlers.handleAll(yield* keyHandlers)
  })
)

export const layer = Layer.mergeAll(TeamsHttp, TeamsV1Http, TeamsPublicHttp).pipe(
  Layer.provide(TeamRuns.layer),
  Layer.provideMerge(Teams.layer)
)
