import type * as Effect from "effect/Effect"
import type { TenantId } from "../Domain/Ids.ts"
import type { PageRequest } from "../Domain/Page.ts"
import * as Traced from "../Observability/Traced.ts"
import type { Owner, WebhooksShape } from "./Webhooks.ts"

/**
 * The webhook operations of a resource that owns one (an orchestration, a
 * team's room), for its service: each first finds the resource among the
 * tenant's (its 404 otherwise), then asks the Webhooks service for its
 * owner. Their spans are named after the service (`Teams.deliveries`).
 */
export const ownedWebhook = <Id extends string, E>(resource: {
  /** The service's name in spans: "Orchestrations", "Teams". */
  readonly service: string
  readonly webhooks: WebhooksShape
  readonly owner: (id: Id) => Owner
  readonly find: (tenantId: TenantId, id: Id) => Effect.Effect<unknown, E>
}) => {
  const { find, owner, service, webhooks } = resource
  return {
    deliveries: Traced.fn(`${service}.deliveries`)(function* (tenantId: TenantId, id: Id, query: PageRequest) {
      yield* find(tenantId, id)
      return yield* webhooks.deliveries(tenantId, owner(id), query)
    }),
    redeliver: Traced.fn(`${service}.redeliver`)(function* (tenantId: TenantId, id: Id, eventId: string) {
      yield* find(tenantId, id)
      return yield* webhooks.redeliver(tenantId, owner(id), eventId)
    }),
    rotateSecret: Traced.fn(`${service}.rotateSecret`)(function* (tenantId: TenantId, id: Id) {
      yield* find(tenantId, id)
      return yield* webhooks.rotateSecret(tenantId, owner(id))
    })
  } as const
}
