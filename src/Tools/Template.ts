// The templates of an HTTP tool (docs/tools.md#templates): its url, header
// values and body name the call's arguments as `{{args.NAME}}` and the
// tenant's secrets as `{{secrets.NAME}}`. Which may appear where is checked
// when the tool is saved; they are resolved only when it is called. Schemas
// only: the dashboard's client checks with the same code.

/** What a placeholder names: an argument, a secret, or nothing this service knows. */
export type Placeholder =
  | { readonly _tag: "Arg"; readonly name: string }
  | { readonly _tag: "Secret"; readonly name: string }
  | { readonly _tag: "Unknown"; readonly why: string }

export interface Found {
  readonly placeholder: Placeholder
  /** As written, braces included. */
  readonly text: string
  /** Where it starts in the template. */
  readonly index: number
}

/** The names of the arguments (the properties of `parameters`) a template may name. */
export const argNamePattern = /^[A-Za-z0-9_-]{1,64}$/

/** Secret names, as the vault has them. */
export const secretNamePattern = /^[A-Za-z_][A-Za-z0-9_]{0,63}$/

// As in orchestration prompts: `{{ ... }}` with no braces inside; a lone `{{` or `}}` is text.
const placeholderPattern = /\{\{([^{}]*)\}\}/g

const classify = (inner: string): Placeholder => {
  const dot = inner.indexOf(".")
  const scope = dot === -1 ? inner : inner.slice(0, dot)
  const name = dot === -1 ? "" : inner.slice(dot + 1)
  if (scope === "args") {
    return argNamePattern.test(name)
      ? { _tag: "Arg", name }
      : { _tag: "Unknown", why: "an argument's name is 1 to 64 letters, digits, `_` or `-`" }
  }
  if (scope === "secrets") {
    return secretNamePattern.test(name)
      ? { _tag: "Secret", name }
      : { _tag: "Unknown", why: "a secret's name is a letter or `_`, then up to 63 letters, digits or `_`" }
  }
  return { _tag: "Unknown", why: "placeholders are `{{args.NAME}}` and `{{secrets.NAME}}`" }
}

/** Every placeholder of `template`, in order. */
export const placeholders = (template: string): ReadonlyArray<Found> =>
  Array.from(template.matchAll(placeholderPattern), (match) => ({
    placeholder: classify(match[1]!.trim()),
    text: match[0],
    index: match.index
  }))

/** Where a template is used, and which placeholders it may hold there. */
export interface Place {
  /** As a message names it: "the url", "a header value", "the body". */
  readonly name: string
  readonly args: boolean
  readonly secrets: boolean
}

export const urlPlace: Place = { name: "the url", args: true, secrets: false }
export const headerPlace: Place = { name: "a header value", args: false, secrets: true }
export const bodyPlace: Place = { name: "the body", args: true, secrets: true }

const allowedIn = (place: Place) =>
  [place.args ? "`{{args.NAME}}`" : undefined, place.secrets ? "`{{secrets.NAME}}`" : undefined]
    .filter((allowed) => allowed !== undefined)
    .join(" and ")

/** Why `template` may not be used in `place` (its first placeholder that may not), or undefined when it may. */
export const refusal = (template: string, place: Place): string | undefined => {
  for (const found of placeholders(template)) {
    const { placeholder } = found
    const allowed = placeholder._tag === "Arg" ? place.args : placeholder._tag === "Secret" ? place.secrets : false
    if (!allowed) {
      const why = placeholder._tag === "Unknown" ? `${placeholder.why}; ` : ""
      return `${found.text} may not be used here: ${why}only ${allowedIn(place)} may appear in ${place.name}`
    }
  }
  return undefined
}

/** The arguments a template names, once each. */
export const argsOf = (template: string): ReadonlyArray<string> => [
  ...new Set(
    placeholders(template).flatMap(({ placeholder }) => (placeholder._tag === "Arg" ? [placeholder.name] : []))
  )
]
