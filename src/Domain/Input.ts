import * as Schema from "effect/Schema"
import * as SchemaAST from "effect/SchemaAST"
import * as SchemaTransformation from "effect/SchemaTransformation"

// The building blocks of every request schema (payload, query, path params,
// headers) of every Api.ts. test/Http/HostileInput.test.ts walks the
// whole API to hold each rule below.

// ---------------------------------------------------------------------------
// Text
// ---------------------------------------------------------------------------

// Postgres refuses NUL in text and `\u0000` or an unpaired surrogate in jsonb,
// and silently turns a lone surrogate in text into U+FFFD (so two different
// conversation ids would name one stored conversation). Neither is text a
// client means to send, so every string a request carries is refused with a
// 400 naming it when the request is decoded, before any work is done: request
// strings are built from `text` (maps from `textRecord`), never from a bare
// Schema.String.

const safeTextMessage = "Expected text without NUL characters or unpaired UTF-16 surrogates"

/** Whether a string is text Postgres stores as sent: well-formed UTF-16 without NUL. */
export const isSafeTextValue = (value: string): boolean => value.isWellFormed() && !value.includes("\u0000")

export const isSafeText = Schema.makeFilter<string>((value) => isSafeTextValue(value) || safeTextMessage, {
  expected: "text without NUL characters or unpaired surrogates"
})

/**
 * A string of request input: safe text, then `checks` in order. Every check
 * aborts, so a field reports its first failure only (one entry per field when
 * a request reports all of its bad fields) and no pattern ever runs over a
 * string a length check has already refused.
 */
export const text = (
  ...checks: ReadonlyArray<SchemaAST.Filter<string> | SchemaAST.Filter<{ readonly length: number }>>
) => Schema.String.check(isSafeText.abort(), ...checks.map((check) => check.abort() as SchemaAST.Filter<string>))

/** Any safe text. */
export const Text = text()

// ---------------------------------------------------------------------------
// Arrays and maps
// ---------------------------------------------------------------------------

// A request reports every bad field, so without a bound checked first, a
// megabyte of bad items costs seconds of decoding and a 400 thirty times the
// size of the request. A container of request input is therefore taken as any
// value, refused whole when it is not one or is too large (a constant-time
// check), and only then are its items decoded. The check carries the items'
// schema, so the OpenAPI document still shows them. (`Schema.Any`, not
// `Unknown`: the JSON codec keeps the checks of `Any` only.)

// The items as sent, so that the document shows the bounds of nested containers too.
const wire = (schema: Schema.Top) => SchemaAST.toEncoded(schema.ast)

/** An array of `min` (default 0) to `max` items, refused whole before any item is decoded. */
export const boundedArray = <Item extends Schema.Top>(
  item: Item,
  bound: {
    readonly max: number
    readonly min?: number
    readonly tooMany?: string
    readonly tooFew?: string
    readonly description?: string
  }
) => {
  const min = bound.min ?? 0
  return Schema.Any.check(
    Schema.makeFilter(
      (input: unknown) =>
        !Array.isArray(input)
          ? "Expected an array"
          : input.length > bound.max
            ? (bound.tooMany ?? `Expected at most ${bound.max} items`)
            : input.length < min
              ? (bound.tooFew ?? `Expected at least ${min} items`)
              : true,
      {
        expected: "array",
        representation: { id: "agent-host/boundedArray", payload: [min, bound.max], schemas: [wire(item)] },
        toJsonSchema: ({ schemas }) => ({
          type: "array",
          ...(min > 0 ? { minItems: min } : {}),
          maxItems: bound.max,
          items: schemas[0]!,
          ...(bound.description === undefined ? {} : { description: bound.description })
        })
      }
    )
  ).pipe(
    Schema.decodeTo(
      Schema.Array(item),
      SchemaTransformation.passthrough<ReadonlyArray<Item["Encoded"]>, any>({ strict: false })
    )
  )
}

// A Record's key schema only selects the keys it is given: a key it refuses is
// dropped without a word. Decoding every key (as any string) to safe text
// instead names each bad key in the path, alongside any bad value.
const TextKey = Schema.String.pipe(Schema.decodeTo(Text))

const isPlainObject = (input: unknown): input is { readonly [key: string]: unknown } =>
  typeof input === "object" && input !== null && !Array.isArray(input)

/** A map keyed by safe text, of at most `max` entries, refused whole before any entry is decoded. */
export const textRecord = <Value extends Schema.Top>(value: Value, bound: { readonly max: number }) =>
  Schema.Any.check(
    Schema.makeFilter(
      (input: unknown) =>
        !isPlainObject(input)
          ? "Expected an object"
          : Object.keys(input).length <= bound.max || `Expected at most ${bound.max} entries`,
      {
        expected: "object",
        representation: { id: "agent-host/textRecord", payload: bound.max, schemas: [wire(value)] },
        toJsonSchema: ({ schemas }) => ({ type: "object", maxProperties: bound.max, additionalProperties: schemas[0]! })
      }
    )
  ).pipe(
    Schema.decodeTo(
      Schema.Record(TextKey, value),
      SchemaTransformation.passthrough<Schema.Record.Encoded<typeof TextKey, Value>, any>({ strict: false })
    )
  )
