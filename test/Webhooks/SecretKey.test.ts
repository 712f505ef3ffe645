import { assert, describe, it } from "@effect/vitest"
import { ConfigProvider, Effect, Result } from "effect"
import * as Crypto from "node:crypto"
import * as Fs from "node:fs/promises"
import * as Os from "node:os"
import * as NodePath from "node:path"
import { settingsConfig } from "../../src/Config.ts"
import { freePort, type ServiceProcess, spawnService, waitReady } from "../support/Process.ts"
import { TestDatabaseUrl } from "../support/TestServer.ts"

// A directory of its own per test: the key file lives beside EMBEDDED_POSTGRES_DATA_DIR.
const tempDir = Effect.acquireRelease(
  Effect.promise(() => Fs.mkdtemp(NodePath.join(Os.tmpdir(), "webhook-key-"))),
  (dir) => Effect.promise(() => Fs.rm(dir, { recursive: true, force: true }))
)

/** The exit code of a process expected to stop on its own, within a bound. */
const exitCode = (service: ServiceProcess, timeoutMs = 30_000) =>
  Effect.promise(() => service.exited).pipe(
    Effect.timeoutOrElse({
      duration: timeoutMs,
      orElse: () =>
        Effect.die(new Error(`still running after ${timeoutMs} ms:\n${service.stdout()}\n${service.stderr()}`))
    })
  )

const output = (service: ServiceProcess) => `${service.stdout()}\n${service.stderr()}`

describe("the key of webhook secrets at rest", () => {
  it.live(
    "a key file that does not decode to 32 bytes stops the start, naming the file; the file is left as it was",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          const databaseUrl = yield* TestDatabaseUrl
          const dir = yield* tempDir
          const file = NodePath.join(dir, "webhook-secret.key")
          const truncated = `${Crypto.randomBytes(32).toString("base64").slice(0, 20)}\n`
          yield* Effect.promise(() => Fs.writeFile(file, truncated, { mode: 0o600 }))

          const service = yield* spawnService({
            DATABASE_URL: databaseUrl,
            EMBEDDED_POSTGRES_DATA_DIR: NodePath.join(dir, "pg")
          })
          const code = yield* exitCode(service)

          assert.notStrictEqual(code, 0)
          assert.include(output(service), file)
          assert.include(output(service), "WEBHOOK_SECRET_KEY")
          assert.match(output(service), /does not hold the base64 of 32 bytes/)
          assert.strictEqual(yield* Effect.promise(() => Fs.readFile(file, "utf8")), truncated)
        })
      )
  )

  it.live("a key file that cannot be read stops the start too", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const databaseUrl = yield* TestDatabaseUrl
        const dir = yield* tempDir
        const file = NodePath.join(dir, "webhook-secret.key")
        // A directory in its place: reading it fails whatever the user (root reads a mode 000 file).
        yield* Effect.promise(() => Fs.mkdir(file))

        const service = yield* spawnService({
          DATABASE_URL: databaseUrl,
          EMBEDDED_POSTGRES_DATA_DIR: NodePath.join(dir, "pg")
        })
        const code = yield* exitCode(service)

        assert.notStrictEqual(code, 0)
        assert.include(output(service), file)
        assert.match(output(service), /cannot be read \(EISDIR\)/)
        assert.isTrue((yield* Effect.promise(() => Fs.stat(file))).isDirectory())
      })
    )
  )

  it.live("without a key file, one node makes one (mode 0600) and starts", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const databaseUrl = yield* TestDatabaseUrl
        const dir = yield* tempDir
        const file = NodePath.join(dir, "webhook-secret.key")

        const service = yield* spawnService({
          DATABASE_URL: databaseUrl,
          EMBEDDED_POSTGRES_DATA_DIR: NodePath.join(dir, "pg")
        })
        yield* waitReady(service)

        const stat = yield* Effect.promise(() => Fs.stat(file))
        assert.strictEqual(stat.mode & 0o777, 0o600)
        const text = yield* Effect.promise(() => Fs.readFile(file, "utf8"))
        assert.strictEqual(Buffer.from(text.trim(), "base64").length, 32)
      })
    )
  )

  it.live("a node of several (RUNNER_ADDRESS) without WEBHOOK_SECRET_KEY stops at once and says why", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const databaseUrl = yield* TestDatabaseUrl
        const dir = yield* tempDir
        const service = yield* spawnService({
          DATABASE_URL: databaseUrl,
          EMBEDDED_POSTGRES_DATA_DIR: NodePath.join(dir, "pg"),
          RUNNER_ADDRESS: `127.0.0.1:${yield* freePort}`,
          RUNNER_SECRET: Crypto.randomBytes(32).toString("base64")
        })
        const code = yield* exitCode(service)

        assert.notStrictEqual(code, 0)
        assert.match(output(service), /RUNNER_ADDRESS is set \(several nodes\) but WEBHOOK_SECRET_KEY is not/)
        // It stopped before making a key file of its own.
        const files = yield* Effect.promise(() => Fs.readdir(dir))
        assert.notInclude(files, "webhook-secret.key")
      })
    )
  )

  it("settings: several nodes need WEBHOOK_SECRET_KEY; one node does not", () => {
    const parse = (env: Record<string, string>) =>
      Effect.runSync(Effect.result(settingsConfig.parse(ConfigProvider.fromEnv({ env }))))
    const key = Crypto.randomBytes(32).toString("base64")
    const runnerSecret = Crypto.randomBytes(32).toString("base64")
    assert.isTrue(Result.isFailure(parse({ RUNNER_ADDRESS: "10.0.0.1:34431", RUNNER_SECRET: runnerSecret })))
    assert.isTrue(
      Result.isSuccess(
        parse({ RUNNER_ADDRESS: "10.0.0.1:34431", RUNNER_SECRET: runnerSecret, WEBHOOK_SECRET_KEY: key })
      )
    )
    assert.isTrue(Result.isSuccess(parse({})))
  })
})
