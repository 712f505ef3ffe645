import * as Result from "effect/Result"

/**
 * The condition of a tool's `policy.approval.when` (docs/approvals.md#rules):
 * a small expression over the call's arguments, parsed when the tool is saved
 * and evaluated for each call. It is data, never code: a rule reads the
 * arguments and compares them with literals, nothing else.
 *
 *   rule       := or
 *   or         := and ("or" and)*
 *   and        := unary ("and" unary)*
 *   unary      := "not" unary | "(" or ")" | comparison
 *   comparison := operand (operator operand)?     -- alone, an operand holds when it is `true`
 *   operand    := path | string | number | true | false | null
 *   operator   := = | != | > | >= | < | <= | starts_with | ends_with | contains
 *   path       := name ("." (name | digits))*     -- into the arguments; `items.0.sku`
 *
 * Strings are double-quoted, with JSON's escapes. A comparison of values of
 * different types is false (`!=` true), as is one with a path the arguments
 * lack; `>`, `>=`, `<`, `<=` compare two numbers or two strings; `contains`
 * is a substring of a string or an item of an array.
 */

export type Operator = "=" | "!=" | ">" | ">=" | "<" | "<=" | "starts_with" | "ends_with" | "contains"

export type Operand =
  | { readonly _tag: "Path"; readonly path: ReadonlyArray<string> }
  | { readonly _tag: "Literal"; readonly value: string | number | boolean | null }

export type Rule =
  | { readonly _tag: "Or"; readonly left: Rule; readonly right: Rule }
  | { readonly _tag: "And"; readonly left: Rule; readonly right: Rule }
  | { readonly _tag: "Not"; readonly rule: Rule }
  | { readonly _tag: "Compare"; readonly left: Operand; readonly operator: Operator; readonly right: Operand }
  | { readonly _tag: "Is"; readonly operand: Operand }

/** The most characters a rule may have, and levels of nesting (parentheses and `not`). */
export const maxRuleChars = 1_000
export const maxRuleDepth = 16
const maxPathSegments = 16

type Token =
  | { readonly kind: "word"; readonly text: string; readonly at: number }
  | { readonly kind: "string"; readonly value: string; readonly at: number }
  | { readonly kind: "number"; readonly value: number; readonly at: number }
  | { readonly kind: "symbol"; readonly text: string; readonly at: number }
  | { readonly kind: "end"; readonly at: number }

class RuleError {
  readonly message: string
  constructor(message: string) {
    this.message = message
  }
}

const symbols = ["!=", ">=", "<=", "=", ">", "<", "(", ")", "."]
const wordOperators = new Set(["starts_with", "ends_with", "contains"])
const keywords = new Set(["and", "or", "not", "true", "false", "null", ...wordOperators])
const numberPattern = /-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?/y
const wordPattern = /[A-Za-z_][A-Za-z0-9_]*|\d+/y

const tokenize = (source: string): Array<Token> => {
  const tokens: Array<Token> = []
  let i = 0
  while (i < source.length) {
    const char = source[i]!
    if (char === " " || char === "\t" || char === "\n" || char === "\r") {
      i++
      continue
    }
    if (char === '"') {
      // JSON's string grammar: the text up to the closing quote, escapes included, parsed by JSON.
      let end = i + 1
      while (end < source.length && source[end] !== '"') end += source[end] === "\\" ? 2 : 1
      if (end >= source.length) throw new RuleError(`Unclosed string at character ${i + 1}`)
      let value: unknown
      try {
        value = JSON.parse(source.slice(i, end + 1))
      } catch {
        throw new RuleError(`Invalid string at character ${i + 1}`)
      }
      tokens.push({ kind: "string", value: value as string, at: i })
      i = end + 1
      continue
    }
    const previous = tokens[tokens.length - 1]
    // A digit right after a `.` is a path segment (`items.0`), not a number.
    const afterDot = previous?.kind === "symbol" && previous.text === "."
    if (!afterDot && (char === "-" || (char >= "0" && char <= "9"))) {
      numberPattern.lastIndex = i
      const match = numberPattern.exec(source)
      if (match === null) throw new RuleError(`Invalid number at character ${i + 1}`)
      tokens.push({ kind: "number", value: Number(match[0]), at: i })
      i += match[0].length
      continue
    }
    wordPattern.lastIndex = i
    const word = wordPattern.exec(source)
    if (word !== null) {
      tokens.push({ kind: "word", text: word[0], at: i })
      i += word[0].length
      continue
    }
    const symbol = symbols.find((candidate) => source.startsWith(candidate, i))
    if (symbol === undefined) throw new RuleError(`Unexpected ${JSON.stringify(char)} at character ${i + 1}`)
    tokens.push({ kind: "symbol", text: symbol, at: i })
    i += symbol.length
  }
  tokens.push({ kind: "end", at: source.length })
  return tokens
}

const describe = (token: Token) =>
  token.kind === "end"
    ? "the end of the rule"
    : `${token.kind === "string" || token.kind === "symbol" ? JSON.stringify(token.kind === "string" ? token.value : token.text) : token.kind === "number" ? token.value : token.text} at character ${token.at + 1}`

const parseTokens = (tokens: ReadonlyArray<Token>): Rule => {
  let position = 0
  const peek = () => tokens[position]!
  const isWord = (token: Token, text: string) => token.kind === "word" && token.text === text
  const isSymbol = (token: Token, text: string) => token.kind === "symbol" && token.text === text

  const or = (depth: number): Rule => {
    let left = and(depth)
    while (isWord(peek(), "or")) {
      position++
      left = { _tag: "Or", left, right: and(depth) }
    }
    return left
  }
  const and = (depth: number): Rule => {
    let left = unary(depth)
    while (isWord(peek(), "and")) {
      position++
      left = { _tag: "And", left, right: unary(depth) }
    }
    return left
  }
  const unary = (depth: number): Rule => {
    if (depth >= maxRuleDepth) throw new RuleError(`Expected at most ${maxRuleDepth} levels of nesting`)
    const token = peek()
    if (isWord(token, "not")) {
      position++
      return { _tag: "Not", rule: unary(depth + 1) }
    }
    if (isSymbol(token, "(")) {
      position++
      const inner = or(depth + 1)
      if (!isSymbol(peek(), ")")) throw new RuleError(`Expected ")" but found ${describe(peek())}`)
      position++
      return inner
    }
    const left = operand()
    const next = peek()
    const operator: Operator | undefined =
      next.kind === "symbol" && ["=", "!=", ">", ">=", "<", "<="].includes(next.text)
        ? (next.text as Operator)
        : next.kind === "word" && wordOperators.has(next.text)
          ? (next.text as Operator)
          : undefined
    if (operator === undefined) return { _tag: "Is", operand: left }
    position++
    return { _tag: "Compare", left, operator, right: operand() }
  }
  const operand = (): Operand => {
    const token = peek()
    position++
    switch (token.kind) {
      case "string":
      case "number":
        return { _tag: "Literal", value: token.value }
      case "word": {
        if (token.text === "true" || token.text === "false") return { _tag: "Literal", value: token.text === "true" }
        if (token.text === "null") return { _tag: "Literal", value: null }
        if (keywords.has(token.text) || /^\d/.test(token.text)) {
          throw new RuleError(`Expected an argument or a value but found ${describe(token)}`)
        }
        const path = [token.text]
        while (isSymbol(peek(), ".")) {
          position++
          const segment = peek()
          if (segment.kind !== "word") throw new RuleError(`Expected a name after "." but found ${describe(segment)}`)
          position++
          path.push(segment.text)
          if (path.length > maxPathSegments) throw new RuleError(`Expected a path of at most ${maxPathSegments} names`)
        }
        return { _tag: "Path", path }
      }
      default:
        throw new RuleError(`Expected an argument or a value but found ${describe(token)}`)
    }
  }

  const rule = or(0)
  if (peek().kind !== "end") throw new RuleError(`Unexpected ${describe(peek())}`)
  return rule
}

/** The rule `source` says, or why it is not one (a message naming where). */
export const parse = (source: string): Result.Result<Rule, string> => {
  if (source.length > maxRuleChars) return Result.fail(`Expected a rule of at most ${maxRuleChars} characters`)
  if (source.trim() === "") return Result.fail("Expected a rule, such as `amount > 100`")
  try {
    return Result.succeed(parseTokens(tokenize(source)))
  } catch (error) {
    if (error instanceof RuleError) return Result.fail(error.message)
    throw error
  }
}

/** Why `source` is not a rule, or undefined when it is one. */
export const problemOf = (source: string): string | undefined => {
  const parsed = parse(source)
  return Result.isFailure(parsed) ? parsed.failure : undefined
}

const missing = Symbol("missing")

// Only the arguments' own keys: `constructor` or `__proto__` in a rule read nothing inherited.
const resolve = (args: unknown, path: ReadonlyArray<string>): unknown => {
  let value: unknown = args
  for (const segment of path) {
    if (typeof value !== "object" || value === null || !Object.hasOwn(value, segment)) return missing
    value = (value as Record<string, unknown>)[segment]
  }
  return value
}

const valueOf = (operand: Operand, args: unknown): unknown =>
  operand._tag === "Literal" ? operand.value : resolve(args, operand.path)

const compare = (left: unknown, operator: Operator, right: unknown): boolean => {
  if (left === missing || right === missing) return operator === "!="
  switch (operator) {
    case "=":
      return left === right
    case "!=":
      return left !== right
    case ">":
    case ">=":
    case "<":
    case "<=": {
      const comparable =
        (typeof left === "number" && typeof right === "number") ||
        (typeof left === "string" && typeof right === "string")
      if (!comparable) return false
      const l = left as number | string
      const r = right as number | string
      return operator === ">" ? l > r : operator === ">=" ? l >= r : operator === "<" ? l < r : l <= r
    }
    case "starts_with":
      return typeof left === "string" && typeof right === "string" && left.startsWith(right)
    case "ends_with":
      return typeof left === "string" && typeof right === "string" && left.endsWith(right)
    case "contains":
      if (typeof left === "string") return typeof right === "string" && left.includes(right)
      return Array.isArray(left) && left.some((item) => item === right)
  }
}

/** Whether `rule` holds for a call's arguments. Never throws, never runs anything but the comparisons. */
export const evaluate = (rule: Rule, args: unknown): boolean => {
  switch (rule._tag) {
    case "Or":
      return evaluate(rule.left, args) || evaluate(rule.right, args)
    case "And":
      return evaluate(rule.left, args) && evaluate(rule.right, args)
    case "Not":
      return !evaluate(rule.rule, args)
    case "Is":
      return valueOf(rule.operand, args) === true
    case "Compare":
      return compare(valueOf(rule.left, args), rule.operator, valueOf(rule.right, args))
  }
}

// Rules by their text: a tool's rule is the same on every call.
const parsed = new Map<string, Result.Result<Rule, string>>()

/**
 * Whether the rule `source` holds for `args`. A rule that no longer parses
 * (saved under an older grammar) holds: asking a human is the safe side.
 */
export const holds = (source: string, args: unknown): boolean => {
  let rule = parsed.get(source)
  if (rule === undefined) {
    if (parsed.size >= 1_000) parsed.clear()
    parsed.set(source, (rule = parse(source)))
  }
  return Result.isFailure(rule) || evaluate(rule.success, args)
}
