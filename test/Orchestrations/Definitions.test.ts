import { assert, describe, it } from "@effect/vitest"
import { Result } from "effect"
import type { AgentId } from "../../src/Domain/Ids.ts"
import type { Step } from "../../src/Orchestrations/Api.ts"
import {
  parseTemplate,
  plan,
  render,
  renderWithin,
  stepIssues,
  variablesUsed
} from "../../src/Orchestrations/Orchestrations.ts"

const step = (id: string, prompt: string, dependsOn?: ReadonlyArray<string>): Step => ({
  id,
  agentId: "agent" as AgentId,
  prompt,
  ...(dependsOn === undefined ? {} : { dependsOn })
})

const planned = (steps: ReadonlyArray<Step>) => {
  const result = plan(steps)
  if (Result.isFailure(result)) throw new Error(`Expected a plan, got ${JSON.stringify(result.failure)}`)
  return result.success
}

const ancestorsOf = (steps: ReadonlyArray<Step>) =>
  Object.fromEntries([...planned(steps).ancestors].map(([id, set]) => [id, [...set].sort()]))

describe("parseTemplate", () => {
  it("reads the three placeholders, with or without spaces inside the braces", () => {
    assert.deepStrictEqual(parseTemplate("Q: {{input}} / {{ variables.tone }} / {{  steps.s-1.output  }}!"), [
      { _tag: "Text", text: "Q: " },
      { _tag: "Input" },
      { _tag: "Text", text: " / " },
      { _tag: "Variable", name: "tone" },
      { _tag: "Text", text: " / " },
      { _tag: "StepOutput", step: "s-1" },
      { _tag: "Text", text: "!" }
    ])
  })

  it("marks anything else in double braces as unknown, and leaves lone braces as text", () => {
    for (const placeholder of [
      "{{foo}}",
      "{{steps.a.input}}",
      "{{steps.a}}",
      "{{variables.}}",
      "{{ Input }}",
      "{{}}"
    ]) {
      assert.deepStrictEqual(parseTemplate(placeholder), [{ _tag: "Unknown", placeholder }], placeholder)
    }
    assert.deepStrictEqual(parseTemplate("a {{ b } c }}"), [{ _tag: "Text", text: "a {{ b } c }}" }])
    assert.deepStrictEqual(parseTemplate(""), [])
  })
})

describe("variablesUsed", () => {
  it("collects each variable name once, across steps", () => {
    const used = variablesUsed([
      step("a", "{{variables.topic}} {{ variables.tone }} {{input}}"),
      step("b", "{{variables.topic}} {{steps.a.output}} {{variables.length}}", ["a"])
    ])
    assert.deepStrictEqual([...used].sort(), ["length", "tone", "topic"])
    assert.strictEqual(variablesUsed([step("a", "{{input}}")]).size, 0)
  })
})

describe("render", () => {
  const context = {
    input: "the input",
    variables: { tone: "dry", empty: "" },
    outputs: { a: "A's answer", "b-2": "B's answer" }
  }

  it("replaces every placeholder", () => {
    assert.strictEqual(
      render("{{input}}|{{ variables.tone }}|{{steps.a.output}}|{{steps.b-2.output}}|{{variables.empty}}", context),
      "the input|dry|A's answer|B's answer|"
    )
    assert.strictEqual(render("no placeholders {{ here", context), "no placeholders {{ here")
  })

  it("does not expand placeholders that arrive inside values", () => {
    const rendered = render("{{input}} and {{steps.a.output}}", {
      input: "{{variables.secret}}",
      variables: { secret: "leaked" },
      outputs: { a: "{{input}}" }
    })
    assert.strictEqual(rendered, "{{variables.secret}} and {{input}}")
  })

  it("renders absent values as empty, never as inherited object properties", () => {
    assert.strictEqual(
      render("[{{variables.missing}}][{{variables.constructor}}][{{steps.toString.output}}]", context),
      "[][][]"
    )
  })

  it("renderWithin stops as soon as the bound is passed, and renders in full within it", () => {
    const input = "x".repeat(32_000)
    const bomb = renderWithin("{{input}}".repeat(3555), { input, variables: {}, outputs: {} }, 128_000)
    // Stopped at the fifth copy: the 113,760,000 characters were never put together.
    assert.deepStrictEqual(bomb, Result.fail({ atLeast: 160_000 }))
    assert.deepStrictEqual(
      renderWithin("{{input}}-{{input}}", { input: "ab", variables: {}, outputs: {} }, 5),
      Result.succeed("ab-ab")
    )
    assert.isTrue(Result.isFailure(renderWithin("{{input}}-{{input}}", { input: "ab", variables: {}, outputs: {} }, 4)))
  })
})

describe("plan", () => {
  it("puts independent steps in one layer and a join after them", () => {
    const steps = [step("a", "x"), step("b", "y"), step("c", "z", ["a", "b"])]
    assert.deepStrictEqual(planned(steps).layers, [["a", "b"], ["c"]])
    assert.deepStrictEqual(ancestorsOf(steps), { a: [], b: [], c: ["a", "b"] })
  })

  it("layers by the deepest dependency and collects ancestors transitively, whatever the list order", () => {
    const steps = [
      step("report", "", ["left", "right", "root"]),
      step("left", "", ["root"]),
      step("root", ""),
      step("right", "", ["mid"]),
      step("mid", "", ["root"])
    ]
    assert.deepStrictEqual(planned(steps).layers, [["root"], ["left", "mid"], ["right"], ["report"]])
    assert.deepStrictEqual(ancestorsOf(steps), {
      root: [],
      left: ["root"],
      mid: ["root"],
      right: ["mid", "root"],
      report: ["left", "mid", "right", "root"]
    })
  })

  it("names the steps of a cycle, in dependency order", () => {
    const result = plan([step("x", ""), step("a", "", ["c"]), step("b", "", ["a"]), step("c", "", ["b", "x"])])
    assert.deepStrictEqual(Result.isFailure(result) && result.failure, { _tag: "Cycle", steps: ["a", "c", "b"] })
    const self = plan([step("a", "", ["a"])])
    assert.deepStrictEqual(Result.isFailure(self) && self.failure, { _tag: "Cycle", steps: ["a"] })
  })

  it("refuses duplicate ids and unknown dependencies", () => {
    const duplicate = plan([step("a", ""), step("a", "")])
    assert.deepStrictEqual(Result.isFailure(duplicate) && duplicate.failure, { _tag: "DuplicateStep", step: "a" })
    const unknown = plan([step("a", "", ["zz"])])
    assert.deepStrictEqual(Result.isFailure(unknown) && unknown.failure, {
      _tag: "UnknownDependency",
      step: "a",
      dependency: "zz"
    })
  })
})

describe("stepIssues", () => {
  const paths = (steps: ReadonlyArray<Step>) => stepIssues(steps).map((issue) => issue.path)

  it("accepts a valid diamond that reads outputs of direct and indirect ancestors", () => {
    assert.deepStrictEqual(
      stepIssues([
        step("root", "{{input}} {{variables.topic}}"),
        step("a", "{{steps.root.output}}", ["root"]),
        step("b", "{{ steps.root.output }}", ["root"]),
        step("c", "{{steps.a.output}} {{steps.b.output}} {{steps.root.output}}", ["a", "b"])
      ]),
      []
    )
  })

  it("points at the step and field of each structural problem", () => {
    assert.deepStrictEqual(paths([step("a", "x"), step("a", "y")]), [["payload", "steps", 1, "id"]])
    assert.deepStrictEqual(paths([step("a", "x"), step("b", "y", ["a", "nope"])]), [
      ["payload", "steps", 1, "dependsOn", 1]
    ])
    assert.deepStrictEqual(paths([step("a", "x", ["a"])]), [["payload", "steps", 0, "dependsOn", 0]])
    const cycle = stepIssues([step("a", "x", ["c"]), step("b", "y", ["a"]), step("c", "z", ["b"])])
    assert.deepStrictEqual(
      cycle.map((issue) => issue.path),
      [["payload", "steps", 0, "dependsOn"]]
    )
    assert.include(cycle[0]!.message, "`a` depends on `c` depends on `b` depends on `a`")
  })

  it("refuses outputs of steps that are not ancestors, and unknown placeholders", () => {
    const cases: Array<[ReadonlyArray<Step>, number, string]> = [
      [[step("a", "x"), step("b", "{{steps.a.output}}")], 1, "must depend on `a`"],
      [[step("a", "{{steps.b.output}}"), step("b", "y", ["a"])], 0, "must depend on `b`"],
      [[step("a", "x"), step("b", "y", ["a"]), step("c", "{{steps.b.output}}", ["a"])], 2, "must depend on `b`"],
      [[step("a", "{{steps.a.output}}")], 0, "its own output"],
      [[step("a", "{{steps.ghost.output}}")], 0, "No step `ghost`"],
      [[step("a", "{{foo}}")], 0, "Unknown placeholder `{{foo}}`"],
      [[step("a", "x"), step("b", "{{steps.a.input}}", ["a"])], 1, "Unknown placeholder `{{steps.a.input}}`"]
    ]
    for (const [steps, index, message] of cases) {
      const issues = stepIssues(steps)
      assert.strictEqual(issues.length, 1, JSON.stringify(steps))
      assert.deepStrictEqual(issues[0]!.path, ["payload", "steps", index, "prompt"], JSON.stringify(steps))
      assert.include(issues[0]!.message, message)
    }
  })

  it("reports every problem, once each", () => {
    const issues = stepIssues([step("a", "{{foo}} {{foo}} {{bar}}"), step("a", "x", ["zz"])])
    assert.deepStrictEqual(
      issues.map((issue) => issue.path),
      [
        ["payload", "steps", 1, "id"],
        ["payload", "steps", 1, "dependsOn", 0],
        ["payload", "steps", 0, "prompt"],
        ["payload", "steps", 0, "prompt"]
      ]
    )
  })
})
