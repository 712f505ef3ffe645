import type * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import { CurrentPrincipal } from "../Auth/Api.ts"
import type { TenantId } from "../Domain/Ids.ts"
import type { PageRequest } from "../Domain/Page.ts"
import * as ServerSentEvents from "./ServerSentEvents.ts"

/** A route of the caller's tenant: the tenant is the authenticated principal's, never the request's. */
export const forTenant =
  <Request, A, E, R>(handle: (tenantId: TenantId, request: Request) => Effect.Effect<A, E, R>) =>
  (request: Request): Effect.Effect<A, E, R | CurrentPrincipal> =>
    CurrentPrincipal.use((principal) => handle(principal.tenantId, request))

type Handled<T> = T extends Effect.Effect<infer A, infer E, infer R> ? Effect.Effect<A, E, R | CurrentPrincipal> : never

const asTenant = <T>(call: (tenantId: TenantId) => T): Handled<T> =>
  CurrentPrincipal.use(
    (principal) => call(principal.tenantId) as Effect.Effect<unknown, unknown, unknown>
  ) as Handled<T>

/**
 * The handlers of the management routes of Domain/Management.ts, each a call
 * of the entity's service with the caller's tenant.
 */
export const managementHandlers = <
  Id,
  Create,
  Update,
  List extends Effect.Effect<unknown, unknown, unknown>,
  Made extends Effect.Effect<unknown, unknown, unknown>,
  Got extends Effect.Effect<unknown, unknown, unknown>,
  Updated extends Effect.Effect<unknown, unknown, unknown>,
  Removed extends Effect.Effect<unknown, unknown, unknown>
>(service: {
  readonly list: (tenantId: TenantId, page: PageRequest) => List
  readonly create: (tenantId: TenantId, payload: Create) => Made
  readonly get: (tenantId: TenantId, id: Id) => Got
  readonly update: (tenantId: TenantId, id: Id, payload: Update) => Updated
  readonly remove: (tenantId: TenantId, id: Id) => Removed
}) => ({
  list: ({ query }: { readonly query: PageRequest }) => asTenant((tenantId) => service.list(tenantId, query)),
  create: ({ payload }: { readonly payload: Create }) => asTenant((tenantId) => service.create(tenantId, payload)),
  get: ({ params }: { readonly params: { readonly id: Id } }) =>
    asTenant((tenantId) => service.get(tenantId, params.id)),
  update: ({ params, payload }: { readonly params: { readonly id: Id }; readonly payload: Update }) =>
    asTenant((tenantId) => service.update(tenantId, params.id, payload)),
  remove: ({ params }: { readonly params: { readonly id: Id } }) =>
    asTenant((tenantId) => service.remove(tenantId, params.id))
})

/**
 * A list page as its JSON response. A page a node has kept
 * (Database/TenantRepo.ts) is the same object on every read, so its JSON is
 * made once per page and route, as the route's success schema encodes it.
 */
export const jsonPages = <S extends Schema.Encoder<unknown>>(schema: S) => {
  const encode = Schema.encodeSync(schema)
  const made = new WeakMap<object, string>()
  return (page: S["Type"] & object) => {
    let json = made.get(page)
    if (json === undefined) {
      json = JSON.stringify(encode(page))
      made.set(page, json)
    }
    return HttpServerResponse.text(json, { contentType: "application/json" })
  }
}

interface LoggedEvent {
  readonly id: string
  readonly type: string
  readonly data: unknown
  readonly createdAt: Date
}

interface StreamEnd {
  readonly type: string
  readonly reason: string
}

/**
 * A run's event log as a text/event-stream response (executions, team runs):
 * each logged event with its id, which a client sends back as Last-Event-ID
 * to resume, and its data with what it is `about` (a step, a turn) and when
 * it was logged; a last event that ends the stream early has no id, so a
 * client resuming goes on from the last logged one.
 */
export const runEventStream = <A extends LoggedEvent | StreamEnd>(
  events: Stream.Stream<A>,
  about: (event: Exclude<A, StreamEnd>) => object
) =>
  ServerSentEvents.response(
    Stream.map(events, (event): ServerSentEvents.ServerSentEvent => {
      if ("reason" in event) return { event: event.type, data: event }
      const logged = event as Exclude<A, StreamEnd>
      return {
        id: logged.id,
        event: logged.type,
        data: { type: logged.type, ...about(logged), ...(logged.data as object), at: logged.createdAt }
      }
    })
  )
