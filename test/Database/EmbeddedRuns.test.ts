import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as ChildProcess from "node:child_process"
import * as Fs from "node:fs/promises"
import * as Net from "node:net"
import * as Os from "node:os"
import * as Path from "node:path"
import * as Embedded from "../../src/Database/Embedded.ts"
import { eventually } from "../support/Eventually.ts"
import { freePort, projectRoot, unlessExited } from "../support/Process.ts"

// `npm start` as a new user runs it, with the embedded PostgreSQL: real service
// processes, real initdb and postgres, killed and signalled as a terminal would.

/**
 * Runs a command as a child subreaper: orphans below it are re-parented to it, not
 * to init, as under a systemd user session, tini or a process supervisor. It reaps
 * them as such an init does, and writes the pid of its child to `pidFile`.
 */
const subreaper = `
import ctypes, os, subprocess, sys, time
if sys.platform == "linux":
    PR_SET_CHILD_SUBREAPER = 36
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        sys.exit("prctl(PR_SET_CHILD_SUBREAPER) failed: errno %d" % ctypes.get_errno())
child = subprocess.Popen(sys.argv[2:])
with open(sys.argv[1], "w") as f:
    f.write(str(child.pid))
while True:
    try:
        os.waitpid(-1, 0)
    except ChildProcessError:
        time.sleep(0.05)
`

interface Run {
  readonly child: ChildProcess.ChildProcess
  readonly baseUrl: string
  readonly output: () => string
  readonly exited: Promise<number | null>
}

const tempRoot = Effect.acquireRelease(
  Effect.promise(async () => {
    const dir = await Fs.mkdtemp(Path.join(Os.tmpdir(), "agent-host-embedded-runs-"))
    // As root the server runs as another OS user, who must be able to enter it.
    await Fs.chmod(dir, 0o755)
    return dir
  }),
  (dir) => Effect.promise(() => Fs.rm(dir, { recursive: true, force: true }))
)

/**
 * `node src/main.ts` (what `npm start` runs) with the embedded server on `dataDir`:
 * no DATABASE_URL, and EMBEDDED_POSTGRES_PORT only when given. With `wrapper`, run
 * through that subreaper. Killed when the test ends.
 */
const run = (dataDir: string, options: { readonly port?: number; readonly wrapper?: string } = {}) =>
  Effect.acquireRelease(
    Effect.gen(function* () {
      const httpPort = yield* freePort
      const env: Record<string, string | undefined> = {
        ...process.env,
        PORT: String(httpPort),
        HOST: "127.0.0.1",
        EMBEDDED_POSTGRES_DATA_DIR: dataDir,
        EMBEDDED_POSTGRES_PORT: options.port === undefined ? undefined : String(options.port)
      }
      delete env.DATABASE_URL
      if (options.port === undefined) delete env.EMBEDDED_POSTGRES_PORT
      const node = [process.execPath, "src/main.ts"]
      const [command, ...args] =
        options.wrapper === undefined ? node : ["python3", "-c", subreaper, options.wrapper, ...node]
      const child = ChildProcess.spawn(command!, args, { cwd: projectRoot, env, stdio: ["ignore", "pipe", "pipe"] })
      let output = ""
      child.stdout.on("data", (chunk) => (output += chunk))
      child.stderr.on("data", (chunk) => (output += chunk))
      const exited = new Promise<number | null>((resolve) => {
        child.once("exit", (code) => resolve(code))
        child.once("error", (cause) => {
          output += String(cause)
          resolve(null)
        })
      })
      return { child, baseUrl: `http://127.0.0.1:${httpPort}`, output: () => output, exited } satisfies Run
    }),
    (run) =>
      Effect.promise(async () => {
        if (run.child.exitCode === null && run.child.signalCode === null) {
          run.child.kill("SIGKILL")
          await run.exited
        }
      })
  )

/** Waits for `condition`, failing past `seconds` with `what` and what `detail` says then. */
const waitFor = (what: string, seconds: number, condition: () => Promise<boolean> | boolean, detail = () => "") =>
  Effect.promise(() =>
    eventually(
      async () => {
        if (!(await condition())) throw new Error(`Timed out after ${seconds} s waiting for ${what}\n${detail()}`)
      },
      { timeoutMs: seconds * 1000, intervalMs: 100 }
    )
  )

const ready = (run: Run) =>
  Effect.promise(() =>
    // A service that exits is not waited for.
    unlessExited(
      run.exited,
      eventually(
        async () => {
          const response = await fetch(`${run.baseUrl}/health/ready`).catch(() => undefined)
          if (response?.status !== 200)
            throw new Error(`Timed out after 90 s waiting for the service to be ready\n${run.output()}`)
        },
        { timeoutMs: 90_000, intervalMs: 100 }
      ),
      () => new Error(`The service exited (${run.child.exitCode}):\n${run.output()}`)
    )
  )

const stopWith = (run: Run, signal: NodeJS.Signals) =>
  Effect.promise(() => {
    run.child.kill(signal)
    return run.exited
  })

const readFile = (file: string) => Effect.promise(() => Fs.readFile(file, "utf8"))

const postmaster = (dataDir: string) =>
  Effect.map(readFile(Path.join(dataDir, "postmaster.pid")), (text) => {
    const lines = text.split("\n")
    return { pid: Number(lines[0]), port: Number(lines[3]) }
  })

const exists = (pid: number) => {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

/** Running, and not a zombie awaiting its parent's reaping. */
const isRunning = async (pid: number) => {
  const stat = await Fs.readFile(`/proc/${pid}/stat`, "utf8").catch(() => undefined)
  if (process.platform === "linux") return stat !== undefined && stat.slice(stat.lastIndexOf(")") + 2)[0] !== "Z"
  return exists(pid)
}

/** Stops a server a failed test left running, before its data directory is deleted. */
const stopLeftover = (pid: number) =>
  Effect.promise(async () => {
    if (!(await isRunning(pid))) return
    process.kill(pid, "SIGINT")
    // Given 20 s to stop cleanly; killed after that.
    await eventually(
      async () => {
        if (await isRunning(pid)) throw new Error(`the server (pid ${pid}) is still running`)
      },
      { timeoutMs: 20_000, intervalMs: 100 }
    ).catch(() => process.kill(pid, "SIGKILL"))
  })

const parentOf = async (pid: number) => {
  const stat = await Fs.readFile(`/proc/${pid}/stat`, "utf8")
  return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1])
}

/** Listens on `port` until the returned effect (or the test's end) releases it; false if something already does. */
const holdPort = (port: number) =>
  Effect.gen(function* () {
    const blocker = Net.createServer()
    const held = yield* Effect.acquireRelease(
      Effect.promise(
        () =>
          new Promise<boolean>((resolve) => {
            blocker.once("error", () => resolve(false))
            blocker.listen({ host: "127.0.0.1", port, exclusive: true }, () => resolve(true))
          })
      ),
      () =>
        Effect.promise(
          () => new Promise<void>((resolve) => (blocker.listening ? blocker.close(() => resolve()) : resolve()))
        )
    )
    return {
      held,
      release: Effect.promise(
        () => new Promise<void>((resolve) => (blocker.listening ? blocker.close(() => resolve()) : resolve()))
      )
    }
  })

describe("the embedded PostgreSQL across runs of the service", { timeout: 240_000 }, () => {
  it.live("a run killed under a subreaper leaves a server that the next run adopts and stops on SIGTERM", () =>
    Effect.gen(function* () {
      const root = yield* tempRoot
      const dataDir = Path.join(root, "postgres")
      const pidFile = Path.join(root, "service.pid")
      const port = yield* freePort

      const first = yield* run(dataDir, { port, wrapper: pidFile })
      yield* ready(first)
      const service = Number(yield* readFile(pidFile))
      const server = yield* postmaster(dataDir)
      // Whatever the outcome, the server does not outlive the test.
      yield* Effect.addFinalizer(() => stopLeftover(server.pid))
      const owner: Embedded.OwnerRecord = JSON.parse(yield* readFile(Path.join(dataDir, Embedded.ownerFileName)))
      assert.strictEqual(owner.pid, service)
      assert.strictEqual(owner.postmaster, server.pid)

      process.kill(service, "SIGKILL")
      // Reaped, not merely a zombie: its threads may still be exiting, and its children wait for them.
      yield* waitFor("the killed service to be reaped", 10, () => !exists(service))
      assert.isTrue(yield* Effect.promise(() => isRunning(server.pid)), "the server outlives a killed run")
      if (process.platform === "linux") {
        // The case this test is about: the orphan's parent is the subreaper, not init.
        assert.strictEqual(yield* Effect.promise(() => parentOf(server.pid)), first.child.pid)
      }

      const second = yield* run(dataDir, { port })
      yield* ready(second)
      const adopted: Embedded.OwnerRecord = JSON.parse(yield* readFile(Path.join(dataDir, Embedded.ownerFileName)))
      assert.strictEqual(yield* stopWith(second, "SIGTERM"), 0)
      yield* waitFor(
        `the adopted server (pid ${server.pid}) to stop with the run that adopted it`,
        30,
        async () => !(await isRunning(server.pid)),
        second.output
      )
      assert.include(second.output(), "left behind by a killed run")
      assert.strictEqual(adopted.pid, second.child.pid)
      assert.strictEqual(adopted.postmaster, server.pid)
    })
  )

  it.live(
    "with EMBEDDED_POSTGRES_PORT unset and 54329 taken, starts on another port and keeps it for its data directory",
    () =>
      Effect.gen(function* () {
        const root = yield* tempRoot
        const dataDir = Path.join(root, "postgres")
        // Held here, unless another program (another checkout's server) already holds it.
        const blocker = yield* holdPort(Embedded.defaultPort)

        const first = yield* run(dataDir)
        yield* ready(first)
        const chosen = (yield* postmaster(dataDir)).port
        assert.notStrictEqual(chosen, Embedded.defaultPort)
        assert.strictEqual(yield* readFile(Path.join(dataDir, Embedded.portFileName)), `${chosen}\n`)
        assert.include(first.output(), `Port ${Embedded.defaultPort} on 127.0.0.1 is in use by another program`)
        assert.strictEqual(yield* stopWith(first, "SIGTERM"), 0)

        // Whether or not 54329 is free now, the next start uses the remembered port.
        yield* blocker.release
        const second = yield* run(dataDir)
        yield* ready(second)
        assert.strictEqual((yield* postmaster(dataDir)).port, chosen)
        assert.strictEqual(yield* stopWith(second, "SIGTERM"), 0)
      })
  )

  it.live("with EMBEDDED_POSTGRES_PORT set to a taken port, stops with a message naming the port and the setting", () =>
    Effect.gen(function* () {
      const root = yield* tempRoot
      const port = yield* freePort
      const blocker = yield* holdPort(port)
      assert.isTrue(blocker.held)

      const service = yield* run(Path.join(root, "postgres"), { port })
      const code = yield* Effect.promise(() =>
        Promise.race([
          service.exited,
          new Promise<"running">((resolve) => setTimeout(() => resolve("running"), 60_000))
        ])
      )
      assert.strictEqual(code, 1, service.output())
      assert.include(service.output(), `Port ${port} on 127.0.0.1 (EMBEDDED_POSTGRES_PORT) is already in use`)
      // Nothing was initialised for a start that could not happen.
      const left = yield* Effect.promise(() => Fs.readdir(root))
      assert.notInclude(left, "postgres")
    })
  )
})
