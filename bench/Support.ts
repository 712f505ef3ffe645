// What the benches share: a database to measure on, the service (or a
// baseline) started as a child process, and JSON requests.
import autocannon from "autocannon"
import { Effect, Exit, Redacted, Scope } from "effect"
import * as ChildProcess from "node:child_process"
import * as Crypto from "node:crypto"
import * as NodeFs from "node:fs"
import * as Fs from "node:fs/promises"
import * as Net from "node:net"
import * as Os from "node:os"
import * as Path from "node:path"
import pg from "pg"
import * as Embedded from "../src/Database/Embedded.ts"

export const root = Path.resolve(import.meta.dirname, "..")

export const freePort = () =>
  new Promise<number>((resolve) => {
    const server = Net.createServer().listen(0, "127.0.0.1", () => {
      const port = (server.address() as Net.AddressInfo).port
      server.close(() => resolve(port))
    })
  })

/** Node's flags in `npm start` (the service is measured as it is started). */
export const startFlags: ReadonlyArray<string> = JSON.parse(
  NodeFs.readFileSync(Path.join(root, "package.json"), "utf8")
)
  .scripts.start.split(" ")
  .filter((word: string) => word.startsWith("--"))

/** Starts `script` (the service or a baseline) on a free port and waits until it is ready. */
export const spawn = async (script: string, env: Record<string, string>) => {
  const port = await freePort()
  const startedAt = performance.now()
  const child = ChildProcess.spawn(process.execPath, [...(script === "src/main.ts" ? startFlags : []), script], {
    cwd: root,
    env: { ...process.env, ...env, PORT: String(port), HOST: "127.0.0.1" },
    stdio: ["ignore", "ignore", "inherit"]
  })
  const url = `http://127.0.0.1:${port}`
  for (let i = 0; i < 600; i++) {
    const ok = await fetch(`${url}/health/ready`).then(
      (r) => r.status < 500,
      () => false
    )
    if (ok) break
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
  return { child, url, readyMs: Math.round(performance.now() - startedAt) }
}

/** The resident memory of a process, in MB (NaN once it is gone). */
export const rssMb = (pid: number) =>
  Fs.readFile(`/proc/${pid}/status`, "utf8").then(
    (status) => Math.round(Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0) / 1024),
    () => NaN
  )

// CPU time (user + system) a process has used, in microseconds.
const ticks = Number(ChildProcess.execFileSync("getconf", ["CLK_TCK"]).toString().trim())
export const cpuMicros = async (pid: number) => {
  const fields = (await Fs.readFile(`/proc/${pid}/stat`, "utf8")).split(") ")[1]!.split(" ")
  return ((Number(fields[11]) + Number(fields[12])) * 1_000_000) / ticks
}

/** Load with autocannon, noting the CPU the measured process spent per answered request. */
export const measureLoad = async (pid: number, options: autocannon.Options) => {
  const before = await cpuMicros(pid)
  const result = await new Promise<autocannon.Result>((resolve, reject) =>
    autocannon(options, (error, result) => (error ? reject(error) : resolve(result)))
  )
  const cpuPerRequest = ((await cpuMicros(pid)) - before) / Math.max(1, result.requests.total)
  return { ...result, cpuPerRequest }
}

export const json = async (url: string, init: RequestInit) => {
  const response = await fetch(url, { ...init, headers: { "content-type": "application/json", ...init.headers } })
  if (response.status >= 300) throw new Error(`${init.method} ${url}: ${response.status} ${await response.text()}`)
  return response.json() as Promise<any>
}

/**
 * A new database on BENCH_DATABASE_URL's server, or on an embedded server in
 * a temporary directory; `close` drops it and stops what was started.
 */
export const openDatabase = async (prefix: string) => {
  const scope = Effect.runSync(Scope.make())
  let adminUrl = process.env.BENCH_DATABASE_URL
  let dataRoot: string | undefined
  if (adminUrl === undefined) {
    dataRoot = await Fs.mkdtemp(Path.join(Os.tmpdir(), `agent-host-${prefix}-`))
    await Fs.chmod(dataRoot, 0o755)
    const server = await Effect.runPromise(
      Embedded.start({ dataDir: Path.join(dataRoot, "postgres"), port: await freePort(), osUser: "postgres" }).pipe(
        Scope.provide(scope)
      )
    )
    adminUrl = Redacted.value(server.url)
  }
  const database = `${prefix}_${Crypto.randomBytes(4).toString("hex")}`
  const admin = new pg.Client({ connectionString: adminUrl })
  await admin.connect()
  await admin.query(`CREATE DATABASE ${database}`)
  const url = new URL(adminUrl)
  url.pathname = `/${database}`
  return {
    databaseUrl: url.toString(),
    close: async () => {
      await admin.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`).catch(() => undefined)
      await admin.end()
      await Effect.runPromise(Scope.close(scope, Exit.void))
      if (dataRoot) await Fs.rm(dataRoot, { recursive: true, force: true })
    }
  }
}

/** A new account on the service, logged in: its bearer header and tenant id. */
export const signUp = async (serviceUrl: string) => {
  const email = `bench-${Date.now()}-${Crypto.randomBytes(3).toString("hex")}@example.com`
  const registered = await json(`${serviceUrl}/api/auth/register`, {
    method: "POST",
    body: JSON.stringify({ email, password: "benchmark-password" })
  })
  const { token } = await json(`${serviceUrl}/api/auth/login`, {
    method: "POST",
    body: JSON.stringify({ email, password: "benchmark-password" })
  })
  return { auth: { authorization: `Bearer ${token}` }, tenantId: registered.tenant.id as string }
}
