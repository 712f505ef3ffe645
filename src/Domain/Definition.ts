import type * as Context from "effect/Context"
import * as Schema from "effect/Schema"
import * as HttpApiEndpoint from "effect/http-api/HttpApiEndpoint"
import type { OperationDoc } from "./ApiDocs.ts"
import { boundedArray, text } from "./Input.ts"
import { PageQuery } from "./Page.ts"
import { BadRequest } from "./Problems.ts"

// What the definitions a tenant names and manages (agents, orchestrations,
// teams) declare alike.

/** Whether a definition may be used: an inactive one is kept, and refused where it would run. */
export const DefinitionStatus = Schema.Literals(["active", "inactive"])
export type DefinitionStatus = typeof DefinitionStatus.Type

export const Name = text(Schema.isMinLength(1, { message: "Expected a non-empty name" }), Schema.isMaxLength(200))
export const Description = text(Schema.isMaxLength(2000))

/** One to `max` parts of a definition (its steps, its members), refused with messages that name them. */
export const parts = <Item extends Schema.Top>(
  item: Item,
  part: { readonly name: string; readonly max: number; readonly description: string }
) =>
  boundedArray(item, {
    min: 1,
    max: part.max,
    tooFew: `Expected at least one ${part.name}`,
    tooMany: `Expected at most ${part.max} ${part.name}s`,
    description: part.description
  })

/**
 * `GET /` of a kind of definition's key-authenticated routes: a page of the
 * tenant's active ones, as `success` shows them, documented by `doc` (which
 * adds the key's credential) from `text`.
 */
export const activeList = <S extends Schema.Top, I>(
  success: S,
  doc: (text: Omit<OperationDoc, "credential">) => Context.Context<I>,
  text: { readonly summary: string; readonly description: string }
) =>
  HttpApiEndpoint.get("list", "/", { query: PageQuery, success, error: BadRequest }).annotateMerge(
    doc({ ...text, errors: "400 on a bad `limit` or `cursor`." })
  )
