import * as Schema from "effect/Schema"
import * as SchemaTransformation from "effect/SchemaTransformation"
import { Text, text } from "../Domain/Input.ts"
import { maxParametersChars, maxParametersDepth, ParametersInput } from "./Tool.ts"

// A structured reply (docs/tools.md#structured-output): an agent or an
// orchestration step may ask its model for JSON matching a JSON Schema. The
// schema is bounded and checked as a tool's parameters are (same size, depth
// and text rules), then compiled by the service saving it, so a schema the
// loop could not validate against is refused when saved, with a 400 naming
// where it is wrong.

/** What the format is called: the name of OpenAI's json_schema, of Anthropic's forced tool. */
export const responseFormatNamePattern = /^[a-zA-Z0-9_-]{1,64}$/

/** A response format as stored and shown. */
export const ResponseFormat = Schema.Struct({
  type: Schema.Literal("json_schema"),
  name: Schema.String,
  schema: Schema.Record(Schema.String, Schema.Unknown)
}).annotate({
  description:
    "The reply must be JSON matching `schema` (a draft-07 JSON Schema): OpenAI's json_schema response format, " +
    "Anthropic's forced tool, the local model's instance of the schema (docs/tools.md#structured-output)."
})
export type ResponseFormat = typeof ResponseFormat.Type

// Read as any string first: a literal here would make a union with the
// format (`null` or a format, on agents) refuse a wrong `type` as a whole
// instead of naming the field.
const FormatType = Text.pipe(
  Schema.decodeTo(Schema.Literal("json_schema"), SchemaTransformation.passthrough({ strict: false }))
).annotate({ description: '`"json_schema"`, the only type.' })

/**
 * A response format as a client sends it: a valid name and a bounded schema.
 * That the schema compiles is checked by the services (`formatIssues`, in
 * ResponseFormatCheck.ts): the compiler is the server's, and this module is
 * also read by the dashboard's typed client.
 */
export const ResponseFormatInput = Schema.Struct({
  type: FormatType,
  name: text(
    Schema.isPattern(responseFormatNamePattern, { message: "Expected 1 to 64 letters, digits, `_` or `-`" })
  ).annotate({ description: "The format's name: what the provider is told the schema is called." }),
  schema: ParametersInput.annotate({
    description:
      `A draft-07 JSON Schema of the reply, at most ${maxParametersChars} characters of JSON and ` +
      `${maxParametersDepth} levels of nesting. Any type at its root; OpenAI's strict mode is asked for only ` +
      "when the schema meets its rules."
  })
}).annotate({
  description:
    "Ask the model for JSON matching `schema`; a reply that does not match is asked for again once with what " +
    "was wrong, then fails (docs/tools.md#structured-output). Null: a plain text reply."
})
