import { describe, expect, it } from "@effect/vitest"
import { PgClient } from "@effect/sql-pg"
import { Effect, Exit, Logger, Redacted, Scope } from "effect"
import { SqlClient } from "effect/sql"
import * as ChildProcess from "node:child_process"
import * as Fs from "node:fs/promises"
import * as Net from "node:net"
import * as Os from "node:os"
import * as Path from "node:path"
import * as Embedded from "../../src/Database/Embedded.ts"

// Real initdb and postgres processes: live clock, real ports, temp directories.

/** A data directory of its own, deleted after the test (after the server stopped). */
const tempDataDir = Effect.acquireRelease(
  Effect.promise(async () => {
    const root = await Fs.mkdtemp(Path.join(Os.tmpdir(), "embedded-pg-test-"))
    // As root the server runs as the postgres OS user, who must be able to enter it.
    await Fs.chmod(root, 0o755)
    return root
  }),
  (root) => Effect.promise(() => Fs.rm(root, { recursive: true, force: true }))
).pipe(Effect.map((root) => Path.join(root, "postgres")))

const freePort = Effect.promise(
  () =>
    new Promise<number>((resolve, reject) => {
      const server = Net.createServer()
      server.once("error", reject)
      server.listen({ host: "127.0.0.1", port: 0 }, () => {
        const address = server.address()
        server.close(() => resolve(typeof address === "object" && address !== null ? address.port : 0))
      })
    })
)

const isPortFree = (port: number) =>
  Effect.promise(
    () =>
      new Promise<boolean>((resolve) => {
        const server = Net.createServer()
        server.once("error", () => resolve(false))
        server.listen({ host: "127.0.0.1", port, exclusive: true }, () => server.close(() => resolve(true)))
      })
  )

const setting = (url: Redacted.Redacted<string>, name: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const rows = yield* sql<{ readonly setting: string }>`SELECT current_setting(${name}) AS setting`
    return rows[0]?.setting
  }).pipe(Effect.provide(PgClient.layer({ url })), Effect.orDie)

const selectOne = (url: Redacted.Redacted<string>) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const rows = yield* sql<{ readonly one: number }>`SELECT 1 AS one`
    return rows[0]?.one
  }).pipe(Effect.provide(PgClient.layer({ url })), Effect.orDie)

/** Runs `start` in a scope the test closes explicitly, to observe what happens then. */
const startIn = (options: Embedded.EmbeddedOptions) =>
  Effect.gen(function* () {
    const scope = yield* Scope.make()
    // Closed at the end of the test too, in case an assertion fails first.
    yield* Effect.addFinalizer(() => Scope.close(scope, Exit.void))
    const server = yield* Embedded.start(options).pipe(Scope.provide(scope))
    return { server, close: Scope.close(scope, Exit.void) }
  })

/** The pid of a process that has just exited. */
const deadPid = Effect.promise(
  () =>
    new Promise<number>((resolve, reject) => {
      const child = ChildProcess.spawn("true")
      child.once("error", reject)
      child.once("exit", () => resolve(child.pid!))
    })
)

const writePidFile = (dataDir: string, pid: number, port: number) =>
  Effect.promise(() =>
    Fs.writeFile(
      Path.join(dataDir, "postmaster.pid"),
      `${pid}\n${dataDir}\n${Math.floor(Date.now() / 1000)}\n${port}\n\n127.0.0.1\n  1234567         8\nready   \n`
    )
  )

const osUser = "postgres"

const readPostmasterPid = (dataDir: string) =>
  Effect.promise(async () => Number((await Fs.readFile(Path.join(dataDir, "postmaster.pid"), "utf8")).split("\n")[0]))

const readOwner = (dataDir: string) =>
  Effect.promise(
    async (): Promise<Embedded.OwnerRecord> =>
      JSON.parse(await Fs.readFile(Path.join(dataDir, Embedded.ownerFileName), "utf8"))
  )

const writeOwner = (dataDir: string, record: Embedded.OwnerRecord) =>
  Effect.promise(() => Fs.writeFile(Path.join(dataDir, Embedded.ownerFileName), JSON.stringify(record)))

const readPortFile = (dataDir: string) =>
  Effect.promise(() => Fs.readFile(Path.join(dataDir, Embedded.portFileName), "utf8"))

/** Listens on `port` until the returned effect (or the test's end) releases it. */
const holdPort = (port: number) =>
  Effect.gen(function* () {
    const blocker = Net.createServer()
    const close = Effect.promise(
      () => new Promise<void>((resolve) => (blocker.listening ? blocker.close(() => resolve()) : resolve()))
    )
    yield* Effect.acquireRelease(
      Effect.promise(() => new Promise<void>((resolve) => blocker.listen({ host: "127.0.0.1", port }, resolve))),
      () => close
    )
    return close
  })

// initdb and server starts are slow when the whole suite runs in parallel on a small machine.
describe("Embedded PostgreSQL", { timeout: 120_000 }, () => {
  it.live("initialises a fresh cluster that answers queries, and stops it when the scope closes", () =>
    Effect.gen(function* () {
      const dataDir = yield* tempDataDir
      const port = yield* freePort
      const lines: Array<string> = []
      const { close, server } = yield* startIn({ dataDir, port, osUser, log: (line) => lines.push(line) })

      expect(server.reused).toBe(false)
      expect(server.port).toBe(port)
      expect(Redacted.value(server.url)).toMatch(
        new RegExp(`^postgres://postgres:[^@]+@127\\.0\\.0\\.1:${port}/postgres$`)
      )
      expect(yield* selectOne(server.url)).toBe(1)
      expect(lines.join("\n")).toContain("ready to accept connections")
      // Young, fast-growing tables get their statistics within seconds.
      expect(yield* setting(server.url, "autovacuum_naptime")).toBe("5s")
      expect(yield* setting(server.url, "autovacuum")).toBe("on")

      yield* close
      expect(yield* isPortFree(port)).toBe(true)
      const pidFile = yield* Effect.promise(() => Fs.stat(Path.join(dataDir, "postmaster.pid")).catch(() => undefined))
      expect(pidFile).toBeUndefined()
    })
  )

  it.live("removes a stale postmaster.pid and starts again with the stored password", () =>
    Effect.gen(function* () {
      const dataDir = yield* tempDataDir
      const port = yield* freePort
      const first = yield* startIn({ dataDir, port, osUser })
      yield* first.close

      // A run that was killed outright leaves its pid file behind, naming a dead process.
      yield* writePidFile(dataDir, yield* deadPid, port)
      const second = yield* startIn({ dataDir, port, osUser })
      expect(second.server.reused).toBe(false)
      expect(Redacted.value(second.server.url)).toBe(Redacted.value(first.server.url))
      expect(yield* selectOne(second.server.url)).toBe(1)
      yield* second.close

      // After a reboot the pid may belong to some unrelated live process.
      const unrelated = ChildProcess.spawn("sleep", ["30"])
      yield* Effect.addFinalizer(() => Effect.sync(() => unrelated.kill("SIGKILL")))
      yield* writePidFile(dataDir, unrelated.pid!, port)
      const third = yield* startIn({ dataDir, port, osUser })
      expect(third.server.reused).toBe(false)
      expect(yield* selectOne(third.server.url)).toBe(1)
    })
  )

  it.live("adopts a server still running on the same data directory and leaves it running", () =>
    Effect.gen(function* () {
      const dataDir = yield* tempDataDir
      const port = yield* freePort
      const otherPort = yield* freePort
      const orphan = yield* startIn({ dataDir, port, osUser })

      // As after a killed parent: the server is still up when the next start comes.
      const adopter = yield* startIn({ dataDir, port: otherPort, osUser })
      expect(adopter.server.reused).toBe(true)
      expect(adopter.server.port).toBe(port)
      expect(yield* selectOne(adopter.server.url)).toBe(1)

      yield* adopter.close
      expect(yield* isPortFree(port)).toBe(false)
      expect(yield* selectOne(orphan.server.url)).toBe(1)

      yield* orphan.close
      expect(yield* isPortFree(port)).toBe(true)
    })
  )

  it.live("decides from the owner record whether an adopted server is left behind, not from its parent", () =>
    Effect.gen(function* () {
      const dataDir = yield* tempDataDir
      const port = yield* freePort
      // Started in this scope, which stays open: the server lives on as if its starter had gone.
      yield* startIn({ dataDir, port, osUser })
      const record = yield* readOwner(dataDir)
      expect(record.pid).toBe(process.pid)
      expect(record.postmaster).toBe(yield* readPostmasterPid(dataDir))

      // The owner is another live process, with its own start time: not left behind.
      const other = ChildProcess.spawn("sleep", ["60"])
      yield* Effect.addFinalizer(() => Effect.sync(() => other.kill("SIGKILL")))
      const started = yield* Embedded.processStart(other.pid!)
      expect(started).toBeDefined()
      yield* writeOwner(dataDir, { ...record, pid: other.pid!, started })
      const guest = yield* startIn({ dataDir, port: yield* freePort, osUser })
      expect(guest.server.reused).toBe(true)
      yield* guest.close
      expect(yield* selectOne(guest.server.url)).toBe(1)
      expect(yield* readOwner(dataDir)).toEqual({ ...record, pid: other.pid!, started })

      // The same pid with another start time is a reused pid: the owner is gone.
      yield* writeOwner(dataDir, { ...record, pid: other.pid!, started: `${started}0` })
      const heir = yield* startIn({ dataDir, port: yield* freePort, osUser })
      expect(heir.server.reused).toBe(true)
      expect((yield* readOwner(dataDir)).pid).toBe(process.pid)
      yield* heir.close
      expect(yield* isPortFree(port)).toBe(true)

      // A dead owner: the next start adopts the server and stops it when it stops.
      const again = yield* startIn({ dataDir, port, osUser })
      expect(again.server.reused).toBe(false)
      yield* writeOwner(dataDir, { ...(yield* readOwner(dataDir)), pid: yield* deadPid })
      const adopter = yield* startIn({ dataDir, port: yield* freePort, osUser })
      expect(adopter.server.reused).toBe(true)
      yield* adopter.close
      expect(yield* isPortFree(port)).toBe(true)
    })
  )

  it.live(
    "with no port configured, moves off a taken preferred port and keeps the chosen one for its data directory",
    () =>
      Effect.gen(function* () {
        const dataDir = yield* tempDataDir
        const preferred = yield* freePort
        const release = yield* holdPort(preferred)

        const first = yield* startIn({ dataDir, preferredPort: preferred, osUser })
        expect(first.server.port).not.toBe(preferred)
        expect(yield* selectOne(first.server.url)).toBe(1)
        expect(yield* readPortFile(dataDir)).toBe(`${first.server.port}\n`)
        yield* first.close

        // The preferred port is free again, but this data directory keeps its port.
        yield* release
        const second = yield* startIn({ dataDir, preferredPort: preferred, osUser })
        expect(second.server.reused).toBe(false)
        expect(second.server.port).toBe(first.server.port)
        yield* second.close

        // Once the remembered port is taken, another is chosen and remembered.
        yield* holdPort(first.server.port)
        const third = yield* startIn({ dataDir, preferredPort: preferred, osUser })
        expect(third.server.port).not.toBe(first.server.port)
        expect(yield* readPortFile(dataDir)).toBe(`${third.server.port}\n`)
        expect(yield* selectOne(third.server.url)).toBe(1)
      })
  )

  it.live("fails with an EmbeddedPostgresError naming the port when it is taken", () =>
    Effect.gen(function* () {
      const dataDir = yield* tempDataDir
      const port = yield* freePort
      const blocker = Net.createServer()
      yield* Effect.acquireRelease(
        Effect.promise(() => new Promise<void>((resolve) => blocker.listen({ host: "127.0.0.1", port }, resolve))),
        () => Effect.promise(() => new Promise<void>((resolve) => blocker.close(() => resolve())))
      )

      const error = yield* Effect.flip(Embedded.start({ dataDir, port, osUser }))
      expect(error).toBeInstanceOf(Embedded.EmbeddedPostgresError)
      expect(error._tag).toBe("EmbeddedPostgresError")
      expect(error.message).toContain(`Port ${port}`)
      expect(error.message).toContain("EMBEDDED_POSTGRES_PORT")
    })
  )

  it.live.runIf(process.getuid?.() === 0)(
    "as root in a project the postgres user cannot enter, keeps the data in a stable directory under /var/lib",
    () =>
      Effect.gen(function* () {
        // A clone under /root: a project directory of mode 700 that only root can enter.
        const projectDir = yield* Effect.acquireRelease(
          Effect.promise(async () => {
            const dir = await Fs.mkdtemp(Path.join(Os.tmpdir(), "embedded-pg-project-"))
            await Fs.chmod(dir, 0o700)
            return dir
          }),
          (dir) => Effect.promise(() => Fs.rm(dir, { recursive: true, force: true }))
        )
        const expected = yield* Embedded.fallbackDataDir(projectDir)
        yield* Effect.addFinalizer(() =>
          Effect.promise(() => Fs.rm(Path.dirname(expected), { recursive: true, force: true }))
        )
        expect(expected.startsWith(`${Embedded.fallbackRoot}/`)).toBe(true)
        const port = yield* freePort
        const logs: Array<string> = []
        const logger = Logger.make((options) => void logs.push(String(options.message)))

        const first = yield* startIn({ port, osUser, projectDir }).pipe(Effect.provide(Logger.layer([logger])))
        expect(first.server.dataDir).toBe(expected)
        expect(logs.join("\n")).toContain(expected)
        yield* Effect.gen(function* () {
          const sql = yield* SqlClient.SqlClient
          yield* sql`CREATE TABLE kept (note text)`
          yield* sql`INSERT INTO kept VALUES ('still here')`
        }).pipe(Effect.provide(PgClient.layer({ url: first.server.url })), Effect.orDie)
        yield* first.close
        const inProject = yield* Effect.promise(() => Fs.readdir(projectDir))
        expect(inProject).toEqual([])

        // The same project again: the same directory, the same data.
        const second = yield* startIn({ port, osUser, projectDir })
        expect(second.server.reused).toBe(false)
        expect(second.server.dataDir).toBe(expected)
        const notes = yield* Effect.gen(function* () {
          const sql = yield* SqlClient.SqlClient
          return yield* sql<{ readonly note: string }>`SELECT note FROM kept`
        }).pipe(Effect.provide(PgClient.layer({ url: second.server.url })), Effect.orDie)
        expect(notes.map((row) => row.note)).toEqual(["still here"])
        yield* second.close
      })
  )

  it.live.runIf(process.getuid?.() === 0)(
    "as root, names the directory the postgres user cannot enter when EMBEDDED_POSTGRES_DATA_DIR points there",
    () =>
      Effect.gen(function* () {
        const dataDir = yield* tempDataDir
        const closed = Path.dirname(dataDir)
        yield* Effect.promise(() => Fs.chmod(closed, 0o700))
        const error = yield* Effect.flip(Embedded.start({ dataDir, port: yield* freePort, osUser }))
        expect(error._tag).toBe("EmbeddedPostgresError")
        expect(error.message).toContain(closed)
        expect(error.message).toContain("EMBEDDED_POSTGRES_DATA_DIR")
      })
  )
})
