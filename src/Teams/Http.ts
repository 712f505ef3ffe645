import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as HttpApiBuilder from "effect/http-api/HttpApiBuilder"
import { Api } from "../Api.ts"
import { withBudgetHeaders } from "../Billing/Budget.ts"
import type { PageRequest } from "../Domain/Page.ts"
import { forTenant, managementHandlers, runEventStream } from "../Http/Management.ts"
import type { RunStatus } from "./Api.ts"
import { TeamRuns } from "./TeamRuns.ts"
import { Teams } from "./Teams.ts"
import * as Traced from "../Observability/Traced.ts"

type RunParams = { readonly params: { readonly id: string; readonly runId: string } }

/** The run routes' handlers, with a session or a key alike. */
const runHandlers = (runs: TeamRuns["Service"]) => ({
  run: forTenant(
    (
      tenantId,
      {
        headers,
        params,
        payload
      }: {
        readonly params: { readonly id: string }
        readonly payload: { readonly mission: string }
        readonly headers: { readonly "idempotency-key"?: string | undefined; readonly prefer?: string | undefined }
      }
    ) => withBudgetHeaders(runs.start(tenantId, params.id, { payload, headers }))
  ),
  runs: forTenant(
    (
      tenantId,
      {
        params,
        query
      }: {
        readonly params: { readonly id: string }
        readonly query: PageRequest & { readonly status?: RunStatus | undefined }
      }
    ) => runs.list(tenantId, params.id, query)
  ),
  getRun: forTenant((tenantId, { params }: RunParams) => runs.get(tenantId, params.id, params.runId)),
  transcript: forTenant((tenantId, { params, query }: RunParams & { readonly query: PageRequest }) =>
    runs.transcript(tenantId, params.id, params.runId, query)
  ),
  cancel: forTenant((tenantId, { params }: RunParams) => runs.cancel(tenantId, params.id, params.runId)),
  toolCall: forTenant(
    (
      tenantId,
      {
        params
      }: {
        readonly params: { readonly id: string; readonly runId: string; readonly turn: string; readonly callId: string }
      }
    ) => runs.toolCall(tenantId, params.id, params.runId, params.turn, params.callId)
  ),
  events: forTenant(
    (
      tenantId,
      {
        params,
        request
      }: RunParams & {
        readonly request: { readonly headers: Readonly<Record<string, string | undefined>> }
      }
    ) =>
      Effect.map(runs.events(tenantId, params.id, params.runId, request.headers["last-event-id"] ?? "0"), (events) =>
        runEventStream(events, (event) => ({ turn: event.turn }))
      )
  )
})

export const TeamsHttp = HttpApiBuilder.group(
  Api,
  "teams",
  Traced.fn(function* (handlers) {
    const teams = yield* Teams
    const runs = yield* TeamRuns
    return handlers.handleAll({
      ...managementHandlers({
        ...teams,
        // A deleted team's runs would go on unseen (they are read through the team): they stop.
        remove: (tenantId, id) => Effect.andThen(runs.cancelUnfinished(tenantId, id), teams.remove(tenantId, id))
      }),
      rotateSecret: forTenant((tenantId, { params }) => teams.rotateSecret(tenantId, params.id)),
      deliveries: forTenant((tenantId, { params, query }) => teams.deliveries(tenantId, params.id, query)),
      redeliver: forTenant((tenantId, { params }) => teams.redeliver(tenantId, params.id, params.eventId)),
      ...runHandlers(runs)
    })
  })
)

/** `{ success: true, data }`: a body of the key-authenticated groups. */
const enveloped =
  <Request, A, E, R>(handle: (request: Request) => Effect.Effect<A, E, R>) =>
  (request: Request) =>
    Effect.map(handle(request), (data) => ({ success: true as const, data }))

/** The handlers of the key-authenticated groups: /api/v1/teams and /api/public/teams answer alike. */
const keyHandlers = Effect.gen(function* () {
  const teams = yield* Teams
  const { events, ...handlers } = runHandlers(yield* TeamRuns)
  return {
    list: forTenant((tenantId, { query }: { readonly query: PageRequest }) =>
      Effect.map(teams.list(tenantId, query, { activeOnly: true }), (page) => ({ success: true as const, ...page }))
    ),
    run: enveloped(handlers.run),
    runs: enveloped(handlers.runs),
    getRun: enveloped(handlers.getRun),
    transcript: enveloped(handlers.transcript),
    toolCall: enveloped(handlers.toolCall),
    cancel: enveloped(handlers.cancel),
    events
  }
})

export const TeamsV1Http = HttpApiBuilder.group(
  Api,
  "v1Teams",
  Traced.fn(function* (handlers) {
    return handlers.handleAll(yield* keyHandlers)
  })
)

export const TeamsPublicHttp = HttpApiBuilder.group(
  Api,
  "publicTeams",
  Traced.fn(function* (handlers) {
    return handlers.handleAll(yield* keyHandlers)
  })
)

export const layer = Layer.mergeAll(TeamsHttp, TeamsV1Http, TeamsPublicHttp).pipe(
  Layer.provide(TeamRuns.layer),
  Layer.provideMerge(Teams.layer)
)
