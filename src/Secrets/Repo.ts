import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as SqlClient from "effect/sql/SqlClient"
import * as TenantRepo from "../Database/TenantRepo.ts"
import type { SecretId, TenantId } from "../Domain/Ids.ts"
import * as Traced from "../Observability/Traced.ts"
import { Secret } from "./Secret.ts"

/** A value as stored: sealed under the key of `keyVersion`. */
export interface StoredValue {
  readonly sealedValue: string
  readonly keyVersion: number
}

/** A sealed value with what it is bound to, as the re-seal pass and `resolve` read it. */
export interface SealedRow extends StoredValue {
  readonly id: string
  readonly tenantId: string
  readonly name: string
}

const decodeSecret = Schema.decodeUnknownEffect(Secret)
const decodeFirst = (rows: ReadonlyArray<unknown>) =>
  rows.length === 0 ? Effect.succeedNone : Effect.asSome(decodeSecret(rows[0]))

/** All SQL of the secrets vault; every statement of a request is scoped by tenant. */
export class SecretsRepo extends Context.Service<SecretsRepo>()("agent-host/SecretsRepo", {
  make: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    // No caches: values are read at call time only, and the list is the management routes'.
    const secrets = yield* TenantRepo.make(Secret, { table: "tenant_secrets", spanPrefix: "SecretsRepo" })
    const columns = sql.literal(secrets.columns)

    /** The new secret, or none when the tenant has one of that name. */
    const insert = (
      tenantId: TenantId,
      secret: StoredValue & { readonly id: SecretId; readonly name: string; readonly lastFour: string }
    ) =>
      sql`INSERT INTO tenant_secrets (id, tenant_id, name, sealed_value, key_version, last_four)
          VALUES (${secret.id}, ${tenantId}, ${secret.name}, ${secret.sealedValue}, ${secret.keyVersion}, ${secret.lastFour})
          ON CONFLICT (tenant_id, name) DO NOTHING
          RETURNING ${columns}`.pipe(Effect.flatMap(decodeFirst), Effect.orDie, Traced.withSpan("SecretsRepo.insert"))

    /** Replaces the value; none when the tenant has no such secret. */
    const rotate = (tenantId: TenantId, id: string, value: StoredValue & { readonly lastFour: string }) =>
      sql`UPDATE tenant_secrets
          SET sealed_value = ${value.sealedValue}, key_version = ${value.keyVersion}, last_four = ${value.lastFour},
              rotated_at = now()
          WHERE tenant_id = ${tenantId} AND id = ${id}
          RETURNING ${columns}`.pipe(Effect.flatMap(decodeFirst), Effect.orDie, Traced.withSpan("SecretsRepo.rotate"))

    /** The sealed values of the tenant's secrets of these names (those it has). */
    const sealedByName = (tenantId: TenantId, names: ReadonlyArray<string>) =>
      sql<SealedRow>`SELECT id, tenant_id, name, sealed_value, key_version FROM tenant_secrets
                     WHERE tenant_id = ${tenantId} AND name = ANY(${names}::text[])`.pipe(
        Effect.orDie,
        Traced.withSpan("SecretsRepo.sealedByName")
      )

    /** Up to `limit` values after `after` (by id) sealed under another key version than `current`, of every tenant. */
    const sealedUnderOtherKeys = (current: number, after: string, limit: number) =>
      sql<SealedRow>`SELECT id, tenant_id, name, sealed_value, key_version FROM tenant_secrets
                     WHERE (key_version < ${current} OR key_version > ${current}) AND id > ${after}
                     ORDER BY id LIMIT ${limit}`.pipe(Traced.withSpan("SecretsRepo.sealedUnderOtherKeys"))

    /** Writes the re-sealed value if the row still holds what was read (a rotation meanwhile wins); whether it did. */
    const reseal = (read: SealedRow, value: StoredValue) =>
      sql<{
        id: string
      }>`UPDATE tenant_secrets SET sealed_value = ${value.sealedValue}, key_version = ${value.keyVersion}
                          WHERE id = ${read.id} AND sealed_value = ${read.sealedValue}
                          RETURNING id`.pipe(
        Effect.map((rows) => rows.length > 0),
        Traced.withSpan("SecretsRepo.reseal")
      )

    return {
      list: secrets.list,
      findById: secrets.findById,
      remove: secrets.remove,
      insert,
      rotate,
      sealedByName,
      sealedUnderOtherKeys,
      reseal
    } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make)
}
