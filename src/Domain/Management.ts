import type * as Schema from "effect/Schema"
import * as HttpApiEndpoint from "effect/http-api/HttpApiEndpoint"
import * as HttpApiSchema from "effect/http-api/HttpApiSchema"
import { operation, type OperationDoc } from "./ApiDocs.ts"
import { PageOf, PageQuery } from "./Page.ts"
import { BadRequest, NotFound } from "./Problems.ts"

/** What an operation's documentation says, where the entity's differs from the usual sentence. */
export type Doc = Partial<Omit<OperationDoc, "credential">>

/**
 * The management routes every entity of a tenant has, from its model's JSON
 * shapes: `GET /` (a page), `POST /` (201), `GET /:id`, `PUT /:id` (the fields
 * sent) and `DELETE /:id` (204), an entity of another tenant being a 404.
 * Their documentation is the usual sentences about `name`, but where `docs`
 * says more.
 */
export const managementEndpoints = <
  Id extends Schema.Top,
  Json extends Schema.Top,
  Create extends Schema.Top,
  Update extends Schema.Top,
  const CreateError extends Schema.Top | ReadonlyArray<Schema.Top>,
  const UpdateError extends Schema.Top | ReadonlyArray<Schema.Top>
>(entity: {
  /** The entity in a sentence: "agent", "knowledge base". */
  readonly name: string
  /** Default: `name` + "s". */
  readonly plural?: string
  /** Its `Model.Class`: the id of its rows, its JSON and what clients send to create and update it. */
  readonly model: {
    readonly fields: { readonly id: Id }
    readonly json: Json
    readonly jsonCreate: Create
    readonly jsonUpdate: Update
  }
  /** Who may call them: one of the sentences of src/Auth/Api.ts. */
  readonly credential: string
  readonly errors: { readonly create: CreateError; readonly update: UpdateError }
  readonly docs?: {
    readonly list?: Doc
    readonly create?: Doc
    readonly get?: Doc
    readonly update?: Doc
    readonly remove?: Doc
  }
}) => {
  const { credential, name } = entity
  const plural = entity.plural ?? `${name}s`
  const a = /^[aeiou]/.test(name) ? "an" : "a"
  const notFound = `404 when the ${name} is not the tenant's.`
  const doc = (usual: Omit<OperationDoc, "credential">, given: Doc | undefined) =>
    operation({ ...usual, ...given, credential })
  const { json, jsonCreate, jsonUpdate } = entity.model
  const params = { id: entity.model.fields.id }
  const created = json.pipe(HttpApiSchema.status(201))
  return [
    HttpApiEndpoint.get("list", "/", { query: PageQuery, success: PageOf(json), error: BadRequest }).annotateMerge(
      doc(
        {
          summary: `List ${plural}`,
          description: `The tenant's ${plural}, a page at a time (\`limit\`, \`cursor\`).`,
          errors: "400 on a bad `limit` or `cursor`."
        },
        entity.docs?.list
      )
    ),
    // The error type arguments are given: TypeScript cannot check a generic error list against streams.
    HttpApiEndpoint.post<"create", "/", never, never, Create, never, typeof created, CreateError>("create", "/", {
      payload: jsonCreate,
      success: created,
      error: entity.errors.create as never
    }).annotateMerge(
      doc(
        {
          summary: `Create ${a} ${name}`,
          description: `Creates ${a} ${name}.`,
          errors: "400 on invalid fields."
        },
        entity.docs?.create
      )
    ),
    HttpApiEndpoint.get("get", "/:id", { params, success: json, error: NotFound }).annotateMerge(
      doc({ summary: `Get ${a} ${name}`, description: `The ${name}.`, errors: notFound }, entity.docs?.get)
    ),
    HttpApiEndpoint.put<"update", "/:id", typeof params, never, Update, never, Json, UpdateError>("update", "/:id", {
      params,
      payload: jsonUpdate,
      success: json,
      error: entity.errors.update as never
    }).annotateMerge(
      doc(
        {
          summary: `Update ${a} ${name}`,
          description: "Changes the fields sent and leaves the others as they are.",
          errors: `400 on invalid fields, ${notFound}`
        },
        entity.docs?.update
      )
    ),
    HttpApiEndpoint.delete("remove", "/:id", {
      params,
      success: HttpApiSchema.NoContent,
      error: NotFound
    }).annotateMerge(
      doc(
        { summary: `Delete ${a} ${name}`, description: `Deletes the ${name}.`, errors: notFound },
        entity.docs?.remove
      )
    )
  ] as const
}
