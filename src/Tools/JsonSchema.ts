import { Ajv, type ErrorObject } from "ajv"
import * as Result from "effect/Result"
import * as V8 from "node:v8"

// JSON Schemas a tenant writes (a tool's `parameters`), checked when saved and
// compiled to check what a model sends. Draft-07, as Ajv's default class has
// it (`$defs` as well as `definitions`); formats are annotations only.
//
// A schema's `pattern` and `patternProperties` are regular expressions of the
// tenant's that the service runs over a model's output: a backtracking one
// (`(a+)+$`) would hold the event loop for minutes. They run on V8's linear
// engine (the `l` flag, which this flag only makes available), in time linear
// in their input; what it cannot run (backreferences, lookaround, the `u`
// flag's classes) is refused when the schema is saved.
V8.setFlagsFromString("--enable-experimental-regexp-engine")

// A variable, not a literal: a literal with the flag would not parse without it.
const linear = "l"

const linearEngine = (() => {
  try {
    new RegExp("a", linear)
    return true
  } catch {
    return false
  }
})()

class PatternRefused extends Error {
  readonly pattern: string
  constructor(pattern: string, why: string) {
    super(`The pattern ${JSON.stringify(pattern)} is refused: ${why}`)
    this.pattern = pattern
  }
}

const linearRegExp = Object.assign(
  (pattern: string) => {
    if (!linearEngine) throw new PatternRefused(pattern, "patterns are not supported on this runtime")
    try {
      return new RegExp(pattern, linear)
    } catch (error) {
      throw new PatternRefused(
        pattern,
        /linear time/.test(String(error))
          ? "it cannot run in linear time (no backreferences or lookaround)"
          : "it is not a regular expression"
      )
    }
  },
  { code: "linearRegExp" }
)

const ajv = new Ajv({
  allErrors: true,
  // Unknown keywords are refused (a misspelt `required` would otherwise be
  // ignored); types and tuples are left to the author.
  strict: true,
  strictTypes: false,
  strictTuples: false,
  strictRequired: false,
  validateFormats: false,
  // A schema's `$id` stays its own: nothing is kept between compilations.
  addUsedSchema: false,
  unicodeRegExp: false,
  code: { regExp: linearRegExp },
  logger: false
})

/** What is wrong and where: a path into the schema (when checking it) or into the value (when validating). */
export interface Problem {
  readonly path: ReadonlyArray<string | number>
  readonly message: string
}

/** A compiled schema: the problems of a value, none when it is valid. */
export type Validate = (value: unknown) => ReadonlyArray<Problem>

// Enough to act on; a schema wrong in a hundred places is reported by its first.
const maxProblems = 10

const isObject = (value: unknown): value is { readonly [key: string]: unknown } =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/** A JSON pointer of `root` as a path: array indices as numbers. */
const pathOf = (root: unknown, pointer: string): Array<string | number> => {
  const path: Array<string | number> = []
  let at: unknown = root
  for (const raw of pointer === "" ? [] : pointer.slice(1).split("/")) {
    const segment = raw.replace(/~1/g, "/").replace(/~0/g, "~")
    const index = Array.isArray(at) && /^\d+$/.test(segment) ? Number(segment) : undefined
    path.push(index ?? segment)
    at = index !== undefined ? (at as ReadonlyArray<unknown>)[index] : isObject(at) ? at[segment] : undefined
  }
  return path
}

const detail = (error: ErrorObject) =>
  error.keyword === "additionalProperties"
    ? `${error.message} (${JSON.stringify(error.params.additionalProperty)})`
    : (error.message ?? error.keyword)

/** One problem per path, the first Ajv gave for it, at most `maxProblems`. */
const problemsOf = (root: unknown, errors: ReadonlyArray<ErrorObject>): ReadonlyArray<Problem> => {
  const byPath = new Map<string, Problem>()
  for (const error of errors) {
    if (byPath.size >= maxProblems) break
    if (!byPath.has(error.instancePath)) {
      byPath.set(error.instancePath, { path: pathOf(root, error.instancePath), message: detail(error) })
    }
  }
  return [...byPath.values()]
}

// Keywords whose value maps names to subschemas, and those whose value is data, not schemas.
const nameMaps = new Set(["properties", "patternProperties", "$defs", "definitions", "dependencies"])
const dataKeywords = new Set(["enum", "const", "default", "examples", "required"])

/** The path of the first subschema of `schema` for which `at` gives a path, or the root. */
const locate = (
  schema: unknown,
  at: (node: { readonly [key: string]: unknown }) => ReadonlyArray<string> | undefined
): ReadonlyArray<string | number> => {
  const visit = (node: unknown, path: ReadonlyArray<string | number>): ReadonlyArray<string | number> | undefined => {
    if (!isObject(node)) return undefined
    const found = at(node)
    if (found !== undefined) return [...path, ...found]
    for (const [key, value] of Object.entries(node)) {
      if (dataKeywords.has(key)) continue
      const children: ReadonlyArray<readonly [unknown, ReadonlyArray<string | number>]> =
        nameMaps.has(key) && isObject(value)
          ? Object.entries(value).map(([name, sub]) => [sub, [...path, key, name]] as const)
          : Array.isArray(value)
            ? value.map((item, i) => [item, [...path, key, i]] as const)
            : [[value, [...path, key]]]
      for (const [child, childPath] of children) {
        const inner = visit(child, childPath)
        if (inner !== undefined) return inner
      }
    }
    return undefined
  }
  return visit(schema, []) ?? []
}

/** Where a compilation failed, and why, from what Ajv threw. */
const compileProblem = (schema: unknown, error: unknown): Problem => {
  if (error instanceof PatternRefused) {
    const path = locate(schema, (node) =>
      node.pattern === error.pattern
        ? ["pattern"]
        : isObject(node.patternProperties) && Object.hasOwn(node.patternProperties, error.pattern)
          ? ["patternProperties", error.pattern]
          : undefined
    )
    return { path, message: error.message }
  }
  const message = error instanceof Error ? error.message : String(error)
  const unknown = /^strict mode: unknown keyword: "(.*)"$/.exec(message)
  if (unknown !== null) {
    const keyword = unknown[1]!
    return {
      path: locate(schema, (node) => (Object.hasOwn(node, keyword) ? [keyword] : undefined)),
      message: `Unknown keyword ${JSON.stringify(keyword)}`
    }
  }
  const unresolved = /^can't resolve reference (.*) from id /.exec(message)
  if (unresolved !== null) {
    const ref = unresolved[1]!
    return {
      path: locate(schema, (node) => (node.$ref === ref ? ["$ref"] : undefined)),
      message: `The reference ${JSON.stringify(ref)} does not resolve within the schema (nothing is fetched)`
    }
  }
  return { path: [], message: message.replace(/^strict mode: /, "") }
}

const draft07 = new Set(["http://json-schema.org/draft-07/schema#", "http://json-schema.org/draft-07/schema"])

/**
 * The schema compiled, or what is wrong with it: a `$schema` other than
 * draft-07, what draft-07's meta-schema refuses, an unknown keyword, a
 * reference that does not resolve (nothing is fetched), a pattern the linear
 * engine cannot run.
 */
export const compile = (schema: {
  readonly [key: string]: unknown
}): Result.Result<Validate, ReadonlyArray<Problem>> => {
  if (schema.$schema !== undefined && !(typeof schema.$schema === "string" && draft07.has(schema.$schema))) {
    return Result.fail([
      { path: ["$schema"], message: 'Expected "http://json-schema.org/draft-07/schema#" or no `$schema`' }
    ])
  }
  if (!ajv.validateSchema(schema)) return Result.fail(problemsOf(schema, ajv.errors ?? []))
  try {
    const validate = ajv.compile(schema)
    return Result.succeed((value) => (validate(value) ? [] : problemsOf(value, validate.errors ?? [])))
  } catch (error) {
    return Result.fail([compileProblem(schema, error)])
  } finally {
    // Ajv keeps what it compiled by the schema object: without this, every schema ever saved.
    ajv.removeSchema(schema)
  }
}

/** `compile`, for the arguments of a tool: the schema of an object (`"type": "object"`). */
export const compileParameters = (schema: {
  readonly [key: string]: unknown
}): Result.Result<Validate, ReadonlyArray<Problem>> =>
  Result.flatMap(compile(schema), (validate) =>
    schema.type === "object"
      ? Result.succeed(validate)
      : Result.fail([{ path: ["type"], message: 'Expected "type": "object": the arguments of a call are an object' }])
  )
