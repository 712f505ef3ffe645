import { assert, describe, it } from "@effect/vitest"
import * as Fs from "node:fs"
import * as Path from "node:path"

// The service imports each effect module by its own path: a group's index
// ("effect", "effect/http-api", "effect/ai"...) loads every module of the
// group at start-up, which cost about 12 MB of memory and 0.4 s of start.

const root = Path.resolve(import.meta.dirname, "..", "..")
const effectDist = Path.join(root, "node_modules", "effect", "dist")

/** "effect" and every "effect/<group>" that resolves to an index of modules. */
const isGroupIndex = (specifier: string) => {
  if (specifier === "effect") return true
  const rest = specifier.slice("effect/".length)
  return !rest.includes("/") && Fs.existsSync(Path.join(effectDist, rest, "index.js"))
}

describe("module imports", () => {
  it("src/ never imports an effect group's index", () => {
    const files = Fs.readdirSync(Path.join(root, "src"), { recursive: true, encoding: "utf8" }).filter((file) =>
      file.endsWith(".ts")
    )
    assert.isAbove(files.length, 50)
    const offenders: Array<string> = []
    for (const file of files) {
      const text = Fs.readFileSync(Path.join(root, "src", file), "utf8")
      for (const match of text.matchAll(/(?:from|import)\s*\(?\s*"(effect(?:\/[^"]*)?)"/g)) {
        if (isGroupIndex(match[1]!)) offenders.push(`src/${file}: ${match[1]}`)
      }
    }
    assert.deepStrictEqual(offenders, [])
    // The check sees what it looks for.
    assert.isTrue(isGroupIndex("effect") && isGroupIndex("effect/http-api") && !isGroupIndex("effect/Effect"))
  })

  it("src/Models imports no feature: features depend on the models, never the other way", () => {
    const features = ["Agents", "Auth", "Billing", "Knowledge", "Orchestrations", "Teams", "Webhooks"]
    const dir = Path.join(root, "src", "Models")
    const offenders: Array<string> = []
    for (const file of Fs.readdirSync(dir).filter((name) => name.endsWith(".ts"))) {
      const text = Fs.readFileSync(Path.join(dir, file), "utf8")
      for (const match of text.matchAll(/from\s*"\.\.\/([A-Za-z]+)\//g)) {
        if (features.includes(match[1]!)) offenders.push(`src/Models/${file}: ${match[0]}`)
      }
    }
    assert.deepStrictEqual(offenders, [])
  })
})
