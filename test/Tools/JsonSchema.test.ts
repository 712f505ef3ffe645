import { assert, describe, it } from "@effect/vitest"
import { Result } from "effect"
import { compileParameters, type Validate } from "../../src/Tools/JsonSchema.ts"

// The module the tool loop checks a model's arguments with: what it answers
// for a value, and that a tenant's pattern cannot hold the event loop.

const compiled = (schema: Record<string, unknown>): Validate => {
  const result = compileParameters(schema)
  if (Result.isFailure(result)) throw new Error(JSON.stringify(result.failure))
  return result.success
}

describe("JSON Schemas of tool arguments", () => {
  it("names every problem of a value by its path, once per path", () => {
    const validate = compiled({
      type: "object",
      properties: {
        id: { type: "string", minLength: 2 },
        lines: { type: "array", items: { type: "object", properties: { qty: { type: "integer", minimum: 1 } } } }
      },
      required: ["id"],
      additionalProperties: false
    })
    assert.deepStrictEqual(validate({ id: "SO-1", lines: [{ qty: 2 }] }), [])
    assert.deepStrictEqual(
      validate({ id: "x", lines: [{ qty: 1 }, { qty: 0 }], extra: true }).map((problem) => problem.path),
      [[], ["id"], ["lines", 1, "qty"]]
    )
    assert.match(validate({})[0]!.message, /required property 'id'/)
    assert.match(validate({ id: "ab", extra: 1 })[0]!.message, /additional properties \("extra"\)/)
  })

  it("runs patterns in linear time: a pattern that would backtrack for ever answers at once", () => {
    const validate = compiled({ type: "object", properties: { word: { type: "string", pattern: "^(a+)+$" } } })
    assert.deepStrictEqual(validate({ word: "a".repeat(20_000) }), [])
    assert.deepStrictEqual(
      validate({ word: `${"a".repeat(20_000)}b` }).map((problem) => problem.path),
      [["word"]]
    )
  })

  it("compiles the same schema again and again, each compilation its own", () => {
    const schema = { $id: "https://schemas.example/order", type: "object", properties: { id: { type: "string" } } }
    for (let i = 0; i < 3; i++) assert.isTrue(Result.isSuccess(compileParameters(structuredClone(schema))))
    assert.isTrue(Result.isSuccess(compileParameters(schema)))
    assert.isTrue(Result.isSuccess(compileParameters(schema)))
  })
})
