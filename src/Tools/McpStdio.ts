import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Data from "effect/Data"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import * as SchemaIssue from "effect/SchemaIssue"
import * as ChildProcess from "node:child_process"
import * as Fs from "node:fs/promises"
import * as NodePath from "node:path"
import { AppConfig } from "../Config.ts"
import { clientInfo, type McpFailure, protocolVersion } from "./McpClient.ts"
import { stdioServerNamePattern } from "./Tool.ts"

// MCP servers the operator runs as local processes (docs/mcp.md#stdio-servers),
// speaking newline-delimited JSON-RPC on stdin and stdout. They come only from
// the operator's file (MCP_STDIO_SERVERS_FILE): a tenant names one, and can
// never make the node start a process of its choosing. Each server is one
// process per node, started on first use, shared by the tenants allowed to use
// it, started again on the next request after it exits.

// ---------------------------------------------------------------------------
// The operator's file
// ---------------------------------------------------------------------------

const noNul = Schema.makeFilter<string>((value) => !value.includes("\u0000") || "Expected no NUL character", {
  expected: "text without NUL characters"
})
const NonEmpty = Schema.String.check(Schema.isMinLength(1, { message: "Expected a non-empty string" }), noNul)

const EnvName = Schema.String.check(
  Schema.isPattern(/^[A-Za-z_][A-Za-z0-9_]*$/, { message: "Expected an environment variable name" })
)

export const StdioServerEntry = Schema.Struct({
  command: NonEmpty,
  args: Schema.optionalKey(Schema.Array(Schema.String.check(noNul))),
  env: Schema.optionalKey(Schema.Record(EnvName, Schema.String.check(noNul))),
  cwd: Schema.optionalKey(NonEmpty),
  tenants: Schema.optionalKey(
    Schema.Array(NonEmpty).check(Schema.isMinLength(1, { message: "Expected at least one tenant id" }))
  )
})

// Names are checked after decoding: a key the record's key schema refused would be reported as an excess property.
export const StdioServersFile = Schema.Struct({ servers: Schema.Record(Schema.String, StdioServerEntry) })

/** A configured server, as it is started. */
export interface StdioServer {
  readonly name: string
  readonly command: string
  readonly args: ReadonlyArray<string>
  /** The whole environment the process gets: the minimal one below, the operator's `env` over it. */
  readonly env: Readonly<Record<string, string>>
  readonly cwd: string | undefined
  /** The tenants allowed to use it; undefined: every tenant. */
  readonly tenants: ReadonlySet<string> | undefined
}

/** What a process gets of the node's own environment: enough to find programs and a home, nothing else. */
export const inheritedEnv = ["PATH", "HOME", "LANG", "TMPDIR"] as const

export class McpStdioConfigError extends Data.TaggedError("McpStdioConfigError")<{ readonly message: string }> {}

const formatIssues = SchemaIssue.makeFormatterStandardSchemaV1()

/**
 * The servers of the operator's file, or why the file is refused: it cannot
 * be read, is not JSON, or a field is wrong (its path named). A relative
 * `cwd` is taken from the file's directory.
 */
export const loadStdioServers = (file: string): Effect.Effect<ReadonlyMap<string, StdioServer>, McpStdioConfigError> =>
  Effect.gen(function* () {
    const refuse = (why: string) =>
      Effect.fail(new McpStdioConfigError({ message: `MCP_STDIO_SERVERS_FILE ${file}: ${why}` }))
    const text = yield* Effect.tryPromise({
      try: () => Fs.readFile(file, "utf8"),
      catch: (error) => (error instanceof Error ? error.message : String(error))
    }).pipe(Effect.catch((why) => refuse(`cannot be read: ${why}`)))
    let json: unknown
    try {
      json = JSON.parse(text)
    } catch (error) {
      return yield* refuse(`is not JSON: ${error instanceof Error ? error.message : String(error)}`)
    }
    const decoded = Schema.decodeUnknownResult(StdioServersFile)(json, { onExcessProperty: "error" })
    if (Result.isFailure(decoded)) {
      const first = formatIssues(decoded.failure.issue).issues[0]
      const path = (first?.path ?? []).map(String).join(".")
      const message =
        first?.message === "Expected no excess property"
          ? `Unknown field (a server has ${Object.keys(StdioServerEntry.fields).join(", ")})`
          : (first?.message ?? "invalid")
      return yield* refuse(`${path === "" ? "" : `${path}: `}${message}`)
    }
    const badName = Object.keys(decoded.success.servers).find((name) => !stdioServerNamePattern.test(name))
    if (badName !== undefined) {
      return yield* refuse(`servers.${badName}: Expected a name of 1 to 64 letters, digits, \`_\` or \`-\``)
    }
    const base: Record<string, string> = {}
    for (const name of inheritedEnv) {
      const value = process.env[name]
      if (value !== undefined) base[name] = value
    }
    const servers = new Map<string, StdioServer>()
    for (const [name, entry] of Object.entries(decoded.success.servers)) {
      servers.set(name, {
        name,
        command: entry.command,
        args: entry.args ?? [],
        env: { ...base, ...entry.env },
        cwd: entry.cwd === undefined ? undefined : NodePath.resolve(NodePath.dirname(file), entry.cwd),
        tenants: entry.tenants === undefined ? undefined : new Set(entry.tenants)
      })
    }
    return servers
  })

// ---------------------------------------------------------------------------
// The processes
// ---------------------------------------------------------------------------

/** The longest line read from a server's stdout; a longer one stops the process (its framing is lost). */
export const maxLineBytes = 1_048_576
/** How long a started process may take to answer `initialize`. */
const handshakeMs = 30_000
/** stderr: the longest line logged, and at most `stderrLines` lines per `stderrWindowMs` per server. */
const stderrLineChars = 1_000
const stderrLines = 20
const stderrWindowMs = 10_000
/** How long a stopped process has between SIGTERM and SIGKILL. */
const killGraceMs = 2_000

/** The wait before starting a server that exited `exits` times in a row without answering a request in between. */
const backoffMs = (exits: number) => (exits < 2 ? 0 : Math.min(200 * 2 ** (exits - 2), 10_000))

/** Which server a request goes to, and for whom. */
export interface McpStdioTarget {
  readonly server: string
  readonly tenantId: string
}

export interface McpStdioRequestOptions {
  /** When the request must have been answered (epoch ms). */
  readonly deadline: number
  readonly timeoutMessage: string
}

type Reply = Result.Result<unknown, McpFailure>

interface Running {
  readonly server: StdioServer
  readonly child: ChildProcess.ChildProcess
  /** Requests sent and not yet answered, by JSON-RPC id. */
  readonly pending: Map<number, (reply: Reply) => void>
  /** The handshake's outcome. */
  ready: Promise<Result.Result<void, McpFailure>>
  /** Why the process is gone, once it is. */
  stopped: McpFailure | undefined
  readonly exited: Promise<void>
}

const failure = (reason: McpFailure["reason"], message: string): McpFailure => ({ reason, message })

export class McpStdio extends Context.Service<McpStdio>()("agent-host/McpStdio", {
  make: Effect.gen(function* () {
    const config = yield* AppConfig
    const servers = Option.isSome(config.mcpStdioServersFile)
      ? yield* loadStdioServers(config.mcpStdioServersFile.value)
      : new Map<string, StdioServer>()
    const services = yield* Effect.context<never>()
    const log = (level: "info" | "warning", message: string, server: string) =>
      Effect.runForkWith(services)(
        (level === "info" ? Effect.logInfo(message) : Effect.logWarning(message)).pipe(
          Effect.annotateLogs({ mcpServer: server })
        )
      )

    const running = new Map<string, Running>()
    /** Exits in a row of each server, and when the last was. */
    const exits = new Map<string, { readonly count: number; readonly at: number }>()
    let closed = false
    let nextId = 1

    const write = (proc: Running, message: Record<string, unknown>) => {
      if (proc.stopped !== undefined || proc.child.stdin === null || proc.child.stdin.destroyed) return
      proc.child.stdin.write(`${JSON.stringify(message)}\n`)
    }

    const signal = (proc: Running, name: NodeJS.Signals) => {
      const pid = proc.child.pid
      if (pid === undefined || proc.child.exitCode !== null || proc.child.signalCode !== null) return
      try {
        // Its own process group (detached): a wrapper's children (npx, sh) go too.
        process.kill(-pid, name)
      } catch {
        proc.child.kill(name)
      }
    }

    /** Marks the process gone (once): every request waiting on it fails, and the next one starts it again. */
    const stop = (proc: Running, why: McpFailure, expected = false) => {
      if (proc.stopped !== undefined) return
      proc.stopped = why
      if (running.get(proc.server.name) === proc) running.delete(proc.server.name)
      if (!expected) {
        const last = exits.get(proc.server.name)
        // The wall clock: this runs in the process's callbacks, outside any fiber.
        exits.set(proc.server.name, { count: (last?.count ?? 0) + 1, at: Date.now() })
        log("warning", why.message, proc.server.name)
      }
      const waiting = [...proc.pending.values()]
      proc.pending.clear()
      for (const resume of waiting) resume(Result.fail(why))
      signal(proc, "SIGTERM")
    }

    /** What the process wrote on stdout: responses to our requests; its own requests are answered. */
    const onMessage = (proc: Running, message: unknown) => {
      if (typeof message !== "object" || message === null || Array.isArray(message)) return
      const m = message as { id?: unknown; method?: unknown; result?: unknown; error?: unknown }
      if (typeof m.method === "string") {
        // A request of the server's (sampling, roots...): only ping is served. A notification needs no answer.
        if (m.id === undefined) return
        write(
          proc,
          m.method === "ping"
            ? { jsonrpc: "2.0", id: m.id, result: {} }
            : { jsonrpc: "2.0", id: m.id, error: { code: -32601, message: `${m.method} is not supported` } }
        )
        return
      }
      if (typeof m.id !== "number") return
      const resume = proc.pending.get(m.id)
      if (resume === undefined) return
      proc.pending.delete(m.id)
      if (typeof m.error === "object" && m.error !== null) {
        const error = m.error as { readonly code?: unknown; readonly message?: unknown }
        resume(
          Result.fail(
            failure("error", `The MCP server answered an error (${String(error.code)}): ${String(error.message)}`)
          )
        )
      } else resume(Result.succeed(m.result))
    }

    /** Reads stdout a line at a time, each at most `maxLineBytes`. */
    const readLines = (proc: Running) => {
      let parts: Array<Buffer> = []
      let size = 0
      proc.child.stdout?.on("data", (data: Buffer) => {
        let at = 0
        while (proc.stopped === undefined) {
          const end = data.indexOf(10, at)
          const piece = data.subarray(at, end === -1 ? data.length : end)
          if (size + piece.length > maxLineBytes) {
            stop(proc, failure("error", `The MCP server ${proc.server.name} wrote a line over ${maxLineBytes} bytes`))
            return
          }
          if (end === -1) {
            if (piece.length > 0) parts.push(piece)
            size += piece.length
            return
          }
          const line = Buffer.concat([...parts, piece])
            .toString("utf8")
            .trim()
          parts = []
          size = 0
          at = end + 1
          if (line === "") continue
          let message: unknown
          try {
            message = JSON.parse(line)
          } catch {
            stderrOf(proc.server.name, `(stdout, not JSON) ${line}`)
            continue
          }
          onMessage(proc, message)
        }
      })
    }

    // stderr goes to the log, a line at a time, bounded and rate limited per server.
    const stderrState = new Map<string, { windowStart: number; logged: number; dropped: number }>()
    const stderrOf = (server: string, line: string) => {
      const now = Date.now()
      let state = stderrState.get(server)
      if (state === undefined || now - state.windowStart >= stderrWindowMs) {
        if (state !== undefined && state.dropped > 0) {
          log("info", `(${state.dropped} lines of the MCP server's stderr not logged)`, server)
        }
        state = { windowStart: now, logged: 0, dropped: 0 }
        stderrState.set(server, state)
      }
      if (state.logged >= stderrLines) {
        state.dropped++
        return
      }
      state.logged++
      log("info", line.length > stderrLineChars ? `${line.slice(0, stderrLineChars)}…` : line, server)
    }
    const drainStderr = (proc: Running) => {
      let partial = ""
      proc.child.stderr?.setEncoding("utf8")
      proc.child.stderr?.on("data", (data: string) => {
        const lines = (partial + data).split(/\r?\n/)
        partial = lines.pop() ?? ""
        // A line that never ends is cut, so that the buffer stays bounded.
        if (partial.length > stderrLineChars) {
          lines.push(partial)
          partial = ""
        }
        for (const line of lines) if (line.trim() !== "") stderrOf(proc.server.name, line)
      })
    }

    /**
     * Starts the server's process and its handshake: `initialize`, then
     * `notifications/initialized`. Throws what spawn throws for arguments
     * Node refuses before any process runs.
     */
    const start = (server: StdioServer): Running => {
      const child = ChildProcess.spawn(server.command, [...server.args], {
        cwd: server.cwd,
        // The operator's env over the minimal one (inheritedEnv), never the node's whole environment.
        env: server.env,
        stdio: ["pipe", "pipe", "pipe"],
        shell: false,
        // Its own process group, so that stopping it stops what it started (npx, a shell script's children).
        detached: true,
        windowsHide: true
      })
      const proc = makeRunning(server, child)
      running.set(server.name, proc)
      log("info", `Started the MCP server ${server.name} (pid ${child.pid ?? "none"})`, server.name)
      child.on("error", (error) =>
        stop(proc, failure("error", `The MCP server ${server.name} could not be started: ${error.message}`))
      )
      // After `close` the last of stdout has been read; a child the process left holding its pipes delays
      // `close`, so an `exit` not followed by it within a second stops the process too.
      const exited = (code: number | null, sig: NodeJS.Signals | null) =>
        stop(
          proc,
          failure(
            "error",
            `The MCP server ${server.name}'s process exited (${sig === null ? `code ${code}` : sig})` +
              (proc.pending.size > 0 ? " before answering" : "")
          )
        )
      child.on("close", exited)
      child.on("exit", (code, sig) => setTimeout(() => exited(code, sig), 1_000).unref())
      child.stdin?.on("error", () => {
        // A closed pipe: the exit says why.
      })
      readLines(proc)
      drainStderr(proc)
      proc.ready = new Promise((resolve) => {
        const id = nextId++
        const timer = setTimeout(() => {
          proc.pending.delete(id)
          const why = failure(
            "timeout",
            `The MCP server ${server.name} did not answer initialize within ${handshakeMs} ms`
          )
          resolve(Result.fail(why))
          stop(proc, why)
        }, handshakeMs)
        proc.pending.set(id, (reply) => {
          clearTimeout(timer)
          if (Result.isFailure(reply)) return resolve(Result.fail(reply.failure))
          write(proc, { jsonrpc: "2.0", method: "notifications/initialized" })
          resolve(Result.succeed(undefined))
        })
        write(proc, {
          jsonrpc: "2.0",
          id,
          method: "initialize",
          params: { protocolVersion, capabilities: {}, clientInfo }
        })
      })
      return proc
    }

    const makeRunning = (server: StdioServer, child: ChildProcess.ChildProcess): Running => {
      const proc: Running = {
        server,
        child,
        pending: new Map(),
        ready: Promise.resolve(Result.succeed(undefined)),
        stopped: undefined,
        exited: new Promise((resolve) => {
          if (child.exitCode !== null || child.signalCode !== null) resolve()
          child.once("exit", () => resolve())
          child.once("error", () => resolve())
        })
      }
      return proc
    }

    /** The server's running process, started when there is none (after a wait when it keeps exiting). */
    const processOf = (server: StdioServer) =>
      Effect.gen(function* () {
        const live = running.get(server.name)
        if (live !== undefined) return live
        const last = exits.get(server.name)
        if (last !== undefined) {
          const wait = last.at + backoffMs(last.count) - Date.now()
          if (wait > 0) yield* Effect.sleep(Duration.millis(wait))
        }
        if (closed) return yield* Effect.fail(failure("error", "The service is stopping"))
        // Another request may have started it while this one waited.
        const again = running.get(server.name)
        if (again !== undefined) return again
        return yield* Effect.try({
          try: () => start(server),
          catch: (error) => {
            const previous = exits.get(server.name)
            exits.set(server.name, { count: (previous?.count ?? 0) + 1, at: Date.now() })
            return failure("error", `The MCP server ${server.name} could not be started: ${String(error)}`)
          }
        })
      })

    /** One request's reply, or the process's end; given up (and cancelled) when the fiber is interrupted. */
    const exchange = (proc: Running, method: string, params: Record<string, unknown>) =>
      Effect.callback<unknown, McpFailure>((resume) => {
        if (proc.stopped !== undefined) return resume(Effect.fail(proc.stopped))
        const id = nextId++
        proc.pending.set(id, (reply) =>
          resume(Result.isSuccess(reply) ? Effect.succeed(reply.success) : Effect.fail(reply.failure))
        )
        write(proc, { jsonrpc: "2.0", id, method, params })
        return Effect.sync(() => {
          if (proc.pending.delete(id)) {
            write(proc, { jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: id } })
          }
        })
      })

    /** Whether `tenantId` may use the server: configured, and the tenant among its `tenants` when it has them. */
    const allows = (server: StdioServer | undefined, tenantId: string): server is StdioServer =>
      server !== undefined && (server.tenants === undefined || server.tenants.has(tenantId))

    /** The names of the servers a tenant may use, sorted. */
    const availableTo = (tenantId: string): ReadonlyArray<string> =>
      [...servers.values()]
        .filter((server) => allows(server, tenantId))
        .map((server) => server.name)
        .sort()

    const request = (
      target: McpStdioTarget,
      method: string,
      params: Record<string, unknown>,
      options: McpStdioRequestOptions
    ): Effect.Effect<unknown, McpFailure> =>
      Effect.gen(function* () {
        const now = yield* Clock.currentTimeMillis
        return yield* Effect.timeoutOrElse(exchangeOnce(target, method, params), {
          duration: Duration.millis(Math.max(1, options.deadline - now)),
          orElse: () => Effect.fail(failure("timeout", options.timeoutMessage))
        })
      })

    const exchangeOnce = (target: McpStdioTarget, method: string, params: Record<string, unknown>) =>
      Effect.gen(function* () {
        const server = servers.get(target.server)
        if (!allows(server, target.tenantId)) {
          return yield* Effect.fail(
            failure("refused", `Refused: no MCP server ${JSON.stringify(target.server)} is configured for this tenant`)
          )
        }
        const proc = yield* processOf(server)
        const ready = yield* Effect.promise(() => proc.ready)
        if (Result.isFailure(ready)) return yield* Effect.fail(ready.failure)
        const reply = yield* exchange(proc, method, params)
        exits.delete(server.name)
        return reply
      })

    /** Every tool the server lists, following `nextCursor` (at most `maxPages` pages), as McpClient's. */
    const listTools = (target: McpStdioTarget, options: McpStdioRequestOptions) =>
      Effect.gen(function* () {
        const maxPages = 20
        const tools: Array<unknown> = []
        let cursor: string | undefined
        for (let page = 0; page < maxPages; page++) {
          const result = yield* request(target, "tools/list", cursor === undefined ? {} : { cursor }, options)
          const listed = (result as { readonly tools?: unknown } | null)?.tools
          if (!Array.isArray(listed)) {
            return yield* Effect.fail(failure("error", "The MCP server's tools/list result has no `tools` array"))
          }
          tools.push(...listed)
          const next = (result as { readonly nextCursor?: unknown }).nextCursor
          if (typeof next !== "string" || next === "") break
          cursor = next
        }
        return tools
      })

    const callTool = (target: McpStdioTarget, name: string, args: unknown, options: McpStdioRequestOptions) =>
      request(target, "tools/call", { name, arguments: args }, options)

    // Every process goes with the service: SIGTERM, then SIGKILL to what is still there after a grace.
    yield* Effect.addFinalizer(() =>
      Effect.promise(async () => {
        closed = true
        const all = [...running.values()]
        for (const proc of all) stop(proc, failure("error", "The service is stopping"), true)
        const timer = setTimeout(() => {
          for (const proc of all) signal(proc, "SIGKILL")
        }, killGraceMs)
        await Promise.all(all.map((proc) => proc.exited))
        clearTimeout(timer)
      })
    )

    return {
      names: [...servers.keys()].sort() as ReadonlyArray<string>,
      availableTo,
      listTools,
      callTool
    } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make)
}
