import { assert, describe, it } from "@effect/vitest"
import { Result } from "effect"
import { evaluate, holds, maxRuleChars, maxRuleDepth, parse, type Rule } from "../../src/Tools/ApprovalRule.ts"
import { needsApproval } from "../../src/Tools/Tool.ts"

// The rules of `policy.approval.when`: what they parse to, what they answer
// for arguments, and that nothing in a rule runs as code.

const rule = (source: string): Rule => {
  const parsed = parse(source)
  if (Result.isFailure(parsed)) throw new Error(parsed.failure)
  return parsed.success
}
const problem = (source: string): string => {
  const parsed = parse(source)
  if (Result.isSuccess(parsed)) throw new Error(`Expected ${source} to be refused`)
  return parsed.failure
}

describe("approval rules", () => {
  it("compares numbers, strings and booleans with each operator", () => {
    const args = { amount: 250, currency: "EUR", url: "https://api.example.com/v1/pay", urgent: true, tags: ["vip"] }
    const cases: ReadonlyArray<readonly [string, boolean]> = [
      ["amount > 100", true],
      ["amount > 250", false],
      ["amount >= 250", true],
      ["amount < 250", false],
      ["amount <= 250", true],
      ["amount = 250", true],
      ["amount != 250", false],
      ['currency = "EUR"', true],
      ['currency != "USD"', true],
      ['url starts_with "https://api.example.com/"', true],
      ['url starts_with "https://api.example.com.evil/"', false],
      ['url ends_with "/pay"', true],
      ['url contains "v1"', true],
      ['tags contains "vip"', true],
      ['tags contains "new"', false],
      ["urgent", true],
      ["urgent = true", true],
      ["not urgent", false],
      ["-5 < amount", true],
      ["1e2 < amount", true]
    ]
    for (const [source, expected] of cases) assert.strictEqual(evaluate(rule(source), args), expected, source)
  })

  it("combines with and, or, not and parentheses, `and` binding tighter", () => {
    const args = { a: 1, b: 2 }
    assert.isTrue(evaluate(rule("a = 1 or b = 3 and a = 2"), args))
    assert.isFalse(evaluate(rule("(a = 1 or b = 3) and a = 2"), args))
    assert.isTrue(evaluate(rule("not (a = 2) and not not b = 2"), args))
  })

  it("reads dotted paths into objects and arrays, and only the arguments' own keys", () => {
    const args = { order: { lines: [{ sku: "A-1", qty: 3 }] } }
    assert.isTrue(evaluate(rule('order.lines.0.sku = "A-1"'), args))
    assert.isTrue(evaluate(rule("order.lines.0.qty > 2"), args))
    assert.isFalse(evaluate(rule("order.lines.1.qty > 2"), args))
    // Inherited properties read as missing: no prototype is reachable.
    assert.isFalse(evaluate(rule("order.constructor = null"), args))
    assert.isFalse(evaluate(rule('order.toString contains "function"'), args))
    assert.isTrue(evaluate(rule("order.__proto__ != null"), args))
  })

  it("a missing argument or a value of another type makes a comparison false (and `!=` true)", () => {
    assert.isFalse(evaluate(rule("amount > 100"), {}))
    assert.isTrue(evaluate(rule("amount != 100"), {}))
    assert.isFalse(evaluate(rule('amount > "100"'), { amount: 500 }))
    assert.isFalse(evaluate(rule("amount = 500"), { amount: "500" }))
    assert.isFalse(evaluate(rule('name starts_with "a"'), { name: 12 }))
    assert.isFalse(evaluate(rule("flag"), { flag: "true" }))
    assert.isTrue(evaluate(rule("note = null"), { note: null }))
  })

  it("reads strings with JSON's escapes", () => {
    assert.isTrue(evaluate(rule('s = "a\\"b\\\\c\\u00e9"'), { s: 'a"b\\cé' }))
  })

  it("refuses what is not a rule, saying where", () => {
    assert.match(problem(""), /Expected a rule/)
    assert.match(problem("amount >"), /the end of the rule/)
    assert.match(problem("amount > 100 100"), /Unexpected 100 at character 14/)
    assert.match(problem("(amount > 1"), /Expected "\)"/)
    assert.match(problem('"open'), /Unclosed string/)
    assert.match(problem("amount ~ 1"), /Unexpected "~" at character 8/)
    assert.match(problem("and = 1"), /Expected an argument or a value but found and/)
    assert.match(problem("a.("), /Expected a name after "."/)
    assert.match(problem(`a = "${"x".repeat(maxRuleChars)}"`), /at most 1000 characters/)
    assert.match(problem(`${"(".repeat(maxRuleDepth + 1)}a${")".repeat(maxRuleDepth + 1)}`), /levels of nesting/)
    assert.match(problem(`${"not ".repeat(maxRuleDepth + 1)}a`), /levels of nesting/)
  })

  it("is data, not code: what would be code elsewhere is refused or compared as text", () => {
    assert.match(problem("process.exit(1)"), /Unexpected "\(" /)
    assert.match(problem("a = `x`"), /Unexpected "`"/)
    assert.match(problem("a; b"), /Unexpected ";"/)
    // biome-ignore lint/suspicious/noTemplateCurlyInString: the rule holds what a template would run; it is text here
    assert.isFalse(evaluate(rule('a = "${1+1}"'), { a: "2" }))
  })

  it("decides whether a call needs approval from the policy", () => {
    const bounds = { timeoutMs: 10_000, maxOutputBytes: 16_384, maxCallsPerRun: 10 }
    assert.isFalse(needsApproval(bounds, { amount: 1_000 }))
    assert.isFalse(needsApproval({ ...bounds, approval: "never" }, {}))
    assert.isTrue(needsApproval({ ...bounds, approval: "always" }, {}))
    assert.isTrue(needsApproval({ ...bounds, approval: { when: "amount > 100" } }, { amount: 101 }))
    assert.isFalse(needsApproval({ ...bounds, approval: { when: "amount > 100" } }, { amount: 100 }))
    // Arguments sent as a JSON string are read as the call reads them.
    assert.isTrue(needsApproval({ ...bounds, approval: { when: "amount > 100" } }, '{"amount": 500}'))
    // A rule that does not parse (saved under another grammar) asks a human.
    assert.isTrue(holds("amount >", { amount: 1 }))
  })
})
