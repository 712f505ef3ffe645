import { assert, describe, it } from "@effect/vitest"
import * as ChildProcess from "node:child_process"
import * as Fs from "node:fs"
import * as Path from "node:path"

// `npm start` and the image start the node with the same V8 flags (the
// docs/performance.md, "Memory and V8's flags", says what each does), and node accepts them:
// it refuses to start on a flag it does not know.

const root = Path.resolve(import.meta.dirname, "..", "..")

const npmStartFlags = (): Array<string> => {
  const start: string = JSON.parse(Fs.readFileSync(Path.join(root, "package.json"), "utf8")).scripts.start
  const words = start.split(" ")
  assert.strictEqual(words[0], "node")
  assert.strictEqual(words.at(-1), "src/main.ts")
  return words.slice(1, -1)
}

const imageFlags = (): Array<string> => {
  const dockerfile = Fs.readFileSync(Path.join(root, "infra", "Dockerfile"), "utf8")
  const cmd = dockerfile.split("\n").find((line) => line.startsWith("CMD "))
  assert.isDefined(cmd)
  const words: Array<string> = JSON.parse(cmd!.slice("CMD ".length))
  assert.strictEqual(words[0], "node")
  assert.strictEqual(words.at(-1), "src/main.ts")
  return words.slice(1, -1)
}

describe("start flags", () => {
  it("the image starts the node with npm start's flags", () => {
    const flags = npmStartFlags()
    assert.isAbove(flags.length, 0)
    assert.deepStrictEqual(imageFlags(), flags)
  })

  it("node accepts every flag", () => {
    const result = ChildProcess.spawnSync(process.execPath, [...npmStartFlags(), "-e", "process.exit(0)"], {
      encoding: "utf8"
    })
    assert.strictEqual(result.stderr, "")
    assert.strictEqual(result.status, 0)
  })
})
