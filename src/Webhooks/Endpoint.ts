import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import * as Model from "effect/schema/Model"
import * as Entity from "../Domain/Entity.ts"
import { newId } from "../Domain/Ids.ts"

/** What sends events: a team (its room) or an orchestration (its executions). */
export const OwnerKind = Schema.Literals(["team", "orchestration"])

/** A column a URL or switch change clears (Webhooks.configure): its only write through the model. */
const cleared = Model.Field({ update: Schema.optionalKey(Schema.Null) })

const DisabledReason = Schema.NullOr(Schema.String).annotate({
  description:
    "Why the service disabled the webhook (a 410 answer, or failing for WEBHOOK_DISABLE_AFTER); null otherwise."
})

/**
 * An owner's webhook endpoint (one per owner), declared once: its row as
 * read, which is what clients see of it, under the names of its owner's
 * resource (SQL over its columns, Repo.ts); its JSON, `WebhookState` (no
 * id: clients never see one); what a new one stores; and what a change of
 * URL or switch writes. The signing secret, sealed (Signing.ts), is written
 * on insert only: no read and no JSON variant holds it, and a client sees it
 * once, in the answer that made it. Rotation, delivery and the delivery log
 * have statements of their own (Repo.ts).
 */
export class WebhookEndpoint extends Model.Class<WebhookEndpoint>("WebhookEndpoint")({
  id: Model.Field({
    select: Schema.String,
    insert: Schema.String.pipe(Schema.withConstructorDefault(Effect.sync(newId)))
  }),
  ownerKind: Model.Field({ insert: OwnerKind }),
  ownerId: Model.Field({ select: Schema.String, insert: Schema.String }),
  url: Entity.stored(Schema.String),
  enabled: Entity.stored(Schema.Boolean),
  secret: Model.Field({ insert: Schema.String }),
  disabledReason: cleared,
  disabledAt: cleared,
  failingSince: cleared,
  // An owner without a webhook shows null, hence the JSON's null.
  outputWebhookUrl: Model.Field({ select: Schema.String, json: Schema.NullOr(Schema.String) }),
  webhookEnabled: Model.Field({ select: Schema.Boolean, json: Schema.Boolean }),
  webhookDisabledReason: Model.Field({ select: DisabledReason, json: DisabledReason }),
  // Read so that a change stamps it (Database/TenantRepo.ts).
  updatedAt: Model.Field({ select: Schema.Date })
}) {}
