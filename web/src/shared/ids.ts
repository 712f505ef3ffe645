import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import type { Route } from "../router.tsx"

// Ids reach the dashboard as text: in the view's URL and in form controls.
// They become the API's branded ids (src/Domain/Ids.ts and the features'
// Api.ts) by decoding with the same schemas the service decodes them with.

/** The id the view's query names under `key`, decoded with `schema`; null when absent or not such an id. */
export const queryId = <T>(route: Route, key: string, schema: Schema.Codec<T, string>): T | null => {
  const raw = route.query.get(key)
  return raw === null || raw === "" ? null : Option.getOrNull(Schema.decodeUnknownOption(schema)(raw))
}

/** An id chosen in a form control (an option's value, itself an id the API gave), decoded with `schema`. */
export const idOf = <T>(schema: Schema.Codec<T, string>, raw: string): T => Schema.decodeUnknownSync(schema)(raw)
