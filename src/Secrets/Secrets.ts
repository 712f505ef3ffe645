import * as Context from "effect/Context"
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import { Limits } from "../Billing/Limits.ts"
import { newId, type SecretId, type TenantId } from "../Domain/Ids.ts"
import type { PageRequest } from "../Domain/Page.ts"
import { Conflict, NotFound } from "../Domain/Problems.ts"
import * as Traced from "../Observability/Traced.ts"
import { SecretsRepo } from "./Repo.ts"
import { lastFourOf, type Secret } from "./Secret.ts"
import { SecretVault } from "./Vault.ts"

const notFound = (id: string) => new NotFound({ detail: `No secret ${id}` })

/**
 * Secrets a call needed that the tenant does not have (`missing`), or that
 * no configured key opens (`unreadable`: see SECRETS_PREVIOUS_KEYS). Names
 * only: never a value.
 */
export class SecretsUnavailable extends Data.TaggedError("SecretsUnavailable")<{
  readonly missing: ReadonlyArray<string>
  readonly unreadable: ReadonlyArray<string>
}> {
  override get message() {
    return [
      this.missing.length === 0 ? "" : `No secret ${this.missing.join(", ")}`,
      this.unreadable.length === 0
        ? ""
        : `Secret ${this.unreadable.join(", ")} cannot be decrypted with the configured keys`
    ]
      .filter((part) => part !== "")
      .join("; ")
  }
}

/** The tenants' secrets: the management routes' operations, and `resolve` for the calls that use them. */
export class Secrets extends Context.Service<Secrets>()("agent-host/Secrets", {
  make: Effect.gen(function* () {
    const repo = yield* SecretsRepo
    const vault = yield* SecretVault
    const limits = yield* Limits

    const list = (tenantId: TenantId, page: PageRequest) => repo.list(tenantId, page)

    const create = Traced.fn("Secrets.create")(function* (tenantId: TenantId, input: typeof Secret.jsonCreate.Type) {
      const id = newId() as SecretId
      const made = yield* limits.admit(
        tenantId,
        "secrets",
        repo.insert(tenantId, {
          id,
          name: input.name,
          ...vault.seal(input.value, { tenantId, id }),
          lastFour: lastFourOf(Redacted.value(input.value))
        })
      )
      if (Option.isNone(made))
        return yield* new Conflict({ detail: `The tenant has a secret named ${input.name} already` })
      return made.value
    })

    const get = Traced.fn("Secrets.get")(function* (tenantId: TenantId, id: SecretId) {
      const secret = yield* repo.findById(tenantId, id)
      if (Option.isNone(secret)) return yield* notFound(id)
      return secret.value
    })

    /** A new value for the secret (PUT): sealed under the current key, and its rotation time. */
    const update = Traced.fn("Secrets.rotate")(function* (
      tenantId: TenantId,
      id: SecretId,
      input: typeof Secret.jsonUpdate.Type
    ) {
      const rotated = yield* repo.rotate(tenantId, id, {
        ...vault.seal(input.value, { tenantId, id }),
        lastFour: lastFourOf(Redacted.value(input.value))
      })
      if (Option.isNone(rotated)) return yield* notFound(id)
      return rotated.value
    })

    const remove = Traced.fn("Secrets.remove")(function* (tenantId: TenantId, id: SecretId) {
      const removed = yield* repo.remove(tenantId, id)
      if (!removed) return yield* notFound(id)
    })

    /**
     * The values of the tenant's secrets of these names, for a call about to
     * be made: read and opened at call time, never kept. Fails naming every
     * name the tenant has no secret of, or whose value cannot be opened.
     */
    const resolve = Traced.fn("Secrets.resolve")(function* (tenantId: TenantId, names: Iterable<string>) {
      const wanted = [...new Set(names)]
      const rows = wanted.length === 0 ? [] : yield* repo.sealedByName(tenantId, wanted)
      const values = new Map<string, Redacted.Redacted<string>>()
      const unreadable: Array<string> = []
      for (const row of rows) {
        const value = vault.open(row, { tenantId, id: row.id })
        if (value === undefined) unreadable.push(row.name)
        else values.set(row.name, value)
      }
      const missing = wanted.filter((name) => !values.has(name) && !unreadable.includes(name))
      if (missing.length > 0 || unreadable.length > 0) return yield* new SecretsUnavailable({ missing, unreadable })
      return values as ReadonlyMap<string, Redacted.Redacted<string>>
    })

    return { list, create, get, update, remove, resolve } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make).pipe(
    Layer.provide([SecretsRepo.layer, SecretVault.layer, Limits.layer])
  )
}
