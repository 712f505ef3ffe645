// The built-in local model's structured replies (docs/tools.md, "The local
// model's structured output"): a value of a JSON Schema built from the
// schema alone and the message it answers, the same every time, so that a
// response format runs offline and in tests. It does not solve schemas: what
// it cannot build (a `not`, a pattern neither the message nor "" matches,
// unique items) may come out invalid, which the tool loop then reports.

// For its side effect: V8's linear regular-expression engine (the `l` flag) for the schema's patterns.
import "../Tools/JsonSchema.ts"

type Node = { readonly [key: string]: unknown }

const isNode = (value: unknown): value is Node => typeof value === "object" && value !== null && !Array.isArray(value)

// Recursive references are followed this deep, then the value is null.
const maxDepth = 32

// `NAME: value` lines of the message: the values its fields take by name.
const fieldLine = /^[ \t]*([A-Za-z0-9_-]{1,64})[ \t]*:[ \t]*(.*?)[ \t]*$/gm

/** The message's `NAME: value` lines by lower-cased name; the first of a name counts. */
const fieldsOf = (message: string): ReadonlyMap<string, string> => {
  const fields = new Map<string, string>()
  for (const match of message.matchAll(fieldLine)) {
    const name = match[1]!.toLowerCase()
    if (!fields.has(name)) fields.set(name, match[2]!)
  }
  return fields
}

/** The node `ref` points to within `root` (`#`, `#/definitions/x`, `#/$defs/x`...); an empty schema otherwise. */
const resolve = (root: unknown, ref: unknown): unknown => {
  if (typeof ref !== "string" || !ref.startsWith("#")) return {}
  let at: unknown = root
  for (const raw of ref.slice(1).split("/").slice(1)) {
    const key = decodeURIComponent(raw).replace(/~1/g, "/").replace(/~0/g, "~")
    if (Array.isArray(at) && /^\d+$/.test(key)) at = at[Number(key)]
    else if (isNode(at) && Object.hasOwn(at, key)) at = at[key]
    else return {}
  }
  return at
}

/** `base` with `extra`'s keywords, their properties together and their required names joined. */
const merge = (base: Node, extra: unknown): Node => {
  if (!isNode(extra)) return base
  const properties = {
    ...(isNode(base.properties) ? base.properties : {}),
    ...(isNode(extra.properties) ? extra.properties : {})
  }
  const required = [
    ...new Set([
      ...(Array.isArray(base.required) ? base.required : []),
      ...(Array.isArray(extra.required) ? extra.required : [])
    ])
  ]
  return { ...base, ...extra, properties, required }
}

const without = (node: Node, key: string): Node => {
  const { [key]: _, ...rest } = node
  return rest
}

/** The type a schema without `type` describes, from its keywords; a string when nothing says. */
const inferredType = (node: Node): string => {
  if (["properties", "required", "additionalProperties", "minProperties", "patternProperties"].some((k) => k in node))
    return "object"
  if (["items", "minItems", "maxItems", "contains"].some((k) => k in node)) return "array"
  if (["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"].some((k) => k in node))
    return "number"
  return "string"
}

const numberOr = (value: unknown): number | undefined =>
  typeof value === "number" && Number.isFinite(value) ? value : undefined

/** 0 moved within the schema's bounds: up to its minimum, down to its maximum, onto a multiple. */
const numberWithin = (node: Node, integer: boolean, preferred: number | undefined): number => {
  const minimum = numberOr(node.minimum)
  const maximum = numberOr(node.maximum)
  const exclusiveMinimum = numberOr(node.exclusiveMinimum)
  const exclusiveMaximum = numberOr(node.exclusiveMaximum)
  const multipleOf = numberOr(node.multipleOf)
  const fits = (value: number) =>
    (minimum === undefined || value >= minimum) &&
    (maximum === undefined || value <= maximum) &&
    (exclusiveMinimum === undefined || value > exclusiveMinimum) &&
    (exclusiveMaximum === undefined || value < exclusiveMaximum) &&
    (!integer || Number.isInteger(value)) &&
    (multipleOf === undefined || multipleOf <= 0 || Number.isInteger(value / multipleOf))
  if (preferred !== undefined && fits(preferred)) return preferred
  let value = 0
  if (minimum !== undefined && value < minimum) value = minimum
  if (exclusiveMinimum !== undefined && value <= exclusiveMinimum) value = exclusiveMinimum + 1
  if (maximum !== undefined && value > maximum) value = maximum
  if (exclusiveMaximum !== undefined && value >= exclusiveMaximum) {
    const floor = Math.max(minimum ?? Number.NEGATIVE_INFINITY, exclusiveMinimum ?? Number.NEGATIVE_INFINITY)
    value = Number.isFinite(floor) ? (floor + exclusiveMaximum) / 2 : exclusiveMaximum - 1
  }
  if (integer) value = Math.ceil(value)
  if (multipleOf !== undefined && multipleOf > 0) value = Math.ceil(value / multipleOf) * multipleOf
  return value
}

/** Whether `value` matches the schema's pattern, run on the linear engine (Tools/JsonSchema.ts); true without one. */
const matchesPattern = (pattern: unknown, value: string): boolean => {
  if (typeof pattern !== "string") return true
  try {
    return new RegExp(pattern, "l").test(value)
  } catch {
    return true
  }
}

/** The text within the schema's lengths (in code points, as JSON Schema counts): cut, or padded with `-`. */
const stringWithin = (node: Node, text: string): string => {
  const points = Array.from(text)
  const maxLength = numberOr(node.maxLength)
  const minLength = numberOr(node.minLength)
  if (maxLength !== undefined && points.length > maxLength) points.length = Math.max(0, Math.floor(maxLength))
  while (minLength !== undefined && points.length < minLength) points.push("-")
  return points.join("")
}

/**
 * A value of `schema` for a reply to `message` (see docs/tools.md): a
 * `const`, the first of an `enum`, a `default`, else by type: an object of
 * its required properties (more, in order, up to `minProperties`), an array
 * of `minItems` items (one of `contains` first), a string from the message
 * (a property's `NAME: value` line, else the whole message on one line)
 * within its lengths, or "" when that does not match its pattern, a number
 * from a `NAME: value` line when it fits, else 0 moved within its bounds,
 * false (or the line's `true`), null. `allOf` is merged, the first of
 * `anyOf` and `oneOf` taken, `$ref` followed within the schema.
 */
export const instanceOf = (schema: unknown, message: string): unknown => {
  const fields = fieldsOf(message)
  const whole = message.replace(/\s+/g, " ").trim()

  const build = (node: unknown, name: string | undefined, depth: number): unknown => {
    if (depth > maxDepth || node === false) return null
    if (!isNode(node)) return stringFor({}, name)
    if (node.$ref !== undefined) return build(resolve(schema, node.$ref), name, depth + 1)
    if ("const" in node) return node.const
    if (Array.isArray(node.enum) && node.enum.length > 0) return node.enum[0]
    if ("default" in node) return node.default
    if (Array.isArray(node.allOf)) {
      const merged = node.allOf.reduce<Node>(
        (into, part) => merge(into, isNode(part) && part.$ref !== undefined ? resolve(schema, part.$ref) : part),
        without(node, "allOf")
      )
      return build(merged, name, depth + 1)
    }
    for (const union of ["anyOf", "oneOf"]) {
      const options = node[union]
      if (Array.isArray(options) && options.length > 0) {
        const first =
          isNode(options[0]) && options[0].$ref !== undefined ? resolve(schema, options[0].$ref) : options[0]
        return build(merge(without(node, union), first), name, depth + 1)
      }
    }
    const type = Array.isArray(node.type) ? node.type[0] : (node.type ?? inferredType(node))
    const line = name === undefined ? undefined : fields.get(name.toLowerCase())
    switch (type) {
      case "null":
        return null
      case "boolean":
        return line?.toLowerCase() === "true"
      case "integer":
      case "number": {
        const given = line === undefined || line.trim() === "" ? undefined : Number(line)
        return numberWithin(node, type === "integer", given !== undefined && Number.isFinite(given) ? given : undefined)
      }
      case "array":
        return arrayFor(node, name, depth)
      case "object":
        return objectFor(node, depth)
      default:
        return stringFor(node, name)
    }
  }

  const stringFor = (node: Node, name: string | undefined): string => {
    const line = name === undefined ? undefined : fields.get(name.toLowerCase())
    const value = stringWithin(node, line ?? whole)
    if (matchesPattern(node.pattern, value)) return value
    return stringWithin(node, "")
  }

  const arrayFor = (node: Node, name: string | undefined, depth: number): Array<unknown> => {
    const count = Math.max(Math.floor(numberOr(node.minItems) ?? 0), node.contains === undefined ? 0 : 1)
    const items: Array<unknown> = []
    for (let index = 0; index < count; index++) {
      const itemSchema =
        index === 0 && node.contains !== undefined
          ? node.contains
          : Array.isArray(node.items)
            ? index < node.items.length
              ? node.items[index]
              : node.additionalItems
            : node.items
      items.push(build(itemSchema ?? {}, name, depth + 1))
    }
    return items
  }

  const objectFor = (node: Node, depth: number): { [key: string]: unknown } => {
    const properties = isNode(node.properties) ? node.properties : {}
    const names = (Array.isArray(node.required) ? node.required : []).filter(
      (name): name is string => typeof name === "string"
    )
    const wanted = Math.floor(numberOr(node.minProperties) ?? 0)
    for (const name of Object.keys(properties)) {
      if (names.length >= wanted) break
      if (!names.includes(name)) names.push(name)
    }
    const additional = isNode(node.additionalProperties) ? node.additionalProperties : {}
    // fromEntries defines each key as data, so a property called `__proto__` is one like any other.
    return Object.fromEntries(
      [...new Set(names)].map((name) => [
        name,
        build(Object.hasOwn(properties, name) ? properties[name] : additional, name, depth + 1)
      ])
    )
  }

  return build(schema, undefined, 0)
}
