import * as Schema from "effect/Schema"
import * as HttpApiSchema from "effect/http-api/HttpApiSchema"

/**
 * A server-sent event stream as an endpoint's typed success: events named
 * from `names`, each with an optional `id` (sent back as Last-Event-ID to
 * resume) and JSON `data`. The typed client decodes such a stream; the
 * handlers write the events themselves.
 */
export const eventStream = <const Names extends ReadonlyArray<string>, Data extends Schema.Top>(
  names: Names,
  data: Data
) =>
  HttpApiSchema.StreamSse({
    events: Schema.Struct({
      id: Schema.optional(Schema.String),
      event: Schema.Literals(names),
      data: Schema.fromJsonString(data)
    })
  })
