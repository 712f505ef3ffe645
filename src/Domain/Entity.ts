import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import * as Model from "effect/schema/Model"
import { newId } from "./Ids.ts"

// The fields of an entity declared once with effect's `Model.Class`: each
// says how it is read (rows and JSON), stored (insert, update) and sent by
// clients (create, update). A column is always read as stored (`read`) and
// sent as request input (`input`, text with its checks, src/Domain/Input.ts);
// an update changes only the fields it carries.

/** The entity's id: made on insert (`newId`), read everywhere, never sent by a client. */
export const id = <S extends Schema.Top & Schema.WithoutConstructorDefault>(schema: S) =>
  Model.Field({
    select: schema,
    insert: schema.pipe(Schema.withConstructorDefault(Effect.sync(() => newId() as S["~type.make.in"]))),
    json: schema
  })

/** A field clients write: read as `read`, stored as `insert`, sent on create as `create` and on update as `input`. */
const writable = <
  Read extends Schema.Top,
  Insert extends Schema.Top,
  Create extends Schema.Top,
  Input extends Schema.Top
>(
  read: Read,
  insert: Insert,
  create: Create,
  input: Input
) =>
  Model.Field({
    select: read,
    insert,
    update: Schema.optionalKey(read),
    json: read,
    jsonCreate: create,
    jsonUpdate: Schema.optionalKey(input)
  })

/** A field a client must send on create and may change on update. */
export const required = <Read extends Schema.Top, Input extends Schema.Top = Read>(read: Read, input?: Input) =>
  writable(read, read, (input ?? read) as Input, (input ?? read) as Input)

/** A field a client may leave out on create, where it is `value`. */
export const withDefault = <
  Read extends Schema.Top & Schema.WithoutConstructorDefault,
  Input extends Schema.Top = Read
>(
  read: Read,
  value: Read["~type.make.in"],
  input?: Input
) =>
  writable(
    read,
    read.pipe(Schema.withConstructorDefault(Effect.succeed(value))),
    Schema.optionalKey((input ?? read) as Input),
    (input ?? read) as Input
  )

/** A field a client may leave out on create, where the service decides it (a setting, say) before the insert. */
export const optional = <Read extends Schema.Top, Input extends Schema.Top = Read>(read: Read, input?: Input) =>
  writable(read, read, Schema.optionalKey((input ?? read) as Input), (input ?? read) as Input)

/** A field a client may send on create only, where the service decides it when left out; never changed after. */
export const createOnly = <Read extends Schema.Top, Input extends Schema.Top = Read>(read: Read, input?: Input) =>
  Model.Field({
    select: read,
    insert: read,
    json: read,
    jsonCreate: Schema.optionalKey((input ?? read) as Input)
  })

/**
 * A field read as one value (from a SQL expression over other columns, see
 * Database/TenantRepo.ts) and sent by clients as `input`, which the service
 * turns into the columns it is stored in (`stored` fields).
 */
export const composite = <Read extends Schema.Top, Input extends Schema.Top>(read: Read, input: Input) =>
  Model.Field({
    select: read,
    json: read,
    jsonCreate: Schema.optionalKey(input),
    jsonUpdate: Schema.optionalKey(input)
  })

/** A column the service writes and clients never see as such (it is read through a `composite` field). */
export const stored = <S extends Schema.Top>(schema: S) =>
  Model.Field({
    insert: schema,
    update: Schema.optionalKey(schema)
  })

/**
 * A field of the JSON that is no column of the entity's table (its webhook's
 * state, say): the service adds it to what it answers, and acts on `input`
 * when a client sends it on create or update.
 */
export const attached = <Read extends Schema.Top, Input extends Schema.Top>(read: Read, input: Input) =>
  Model.Field({
    json: read,
    jsonCreate: Schema.optionalKey(input),
    jsonUpdate: Schema.optionalKey(input)
  })

/** A field of the JSON only, which the service adds to what it answers; never a column, never sent by clients. */
export const answered = <Read extends Schema.Top>(read: Read) => Model.Field({ json: read })

/** A column the database sets (`created_at`, `updated_at`): read, never written by a client or the insert. */
export const generated = Model.GeneratedByDb
