// Measures the service side by side with a baseline, each under the same load
// from this process (autocannon, 50 connections), and prints the figures.
//
//   npm run bench                  embedded PostgreSQL in a temp directory
//   BENCH_DATABASE_URL=... npm run bench   an existing server (a database is created there)
//   BENCH_SECONDS=10               seconds per measurement
import autocannon from "autocannon"
import { Effect, Exit, Redacted, Scope } from "effect"
import * as ChildProcess from "node:child_process"
import * as Crypto from "node:crypto"
import * as Fs from "node:fs/promises"
import * as Net from "node:net"
import * as Os from "node:os"
import * as Path from "node:path"
import pg from "pg"
import * as Embedded from "../src/Database/Embedded.ts"

const root = Path.resolve(import.meta.dirname, "..")
const seconds = Number(process.env.BENCH_SECONDS ?? 10)
const connections = 50

const freePort = () =>
  new Promise<number>((resolve) => {
    const server = Net.createServer().listen(0, "127.0.0.1", () => {
      const port = (server.address() as Net.AddressInfo).port
      server.close(() => resolve(port))
    })
  })

const spawn = async (script: string, env: Record<string, string>) => {
  const port = await freePort()
  const child = ChildProcess.spawn(process.execPath, [script], {
    cwd: root,
    env: { ...process.env, ...env, PORT: String(port), HOST: "127.0.0.1" },
    stdio: ["ignore", "ignore", "inherit"]
  })
  const url = `http://127.0.0.1:${port}`
  for (let i = 0; i < 300; i++) {
    const ok = await fetch(`${url}/health/ready`).then((r) => r.status < 500, () => false)
    if (ok) break
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  return { child, url }
}

const rssMb = (pid: number) =>
  Fs.readFile(`/proc/${pid}/status`, "utf8").then(
    (status) => Math.round(Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0) / 1024),
    () => NaN
  )

const load = (options: Partial<autocannon.Options> & { readonly url: string }) =>
  new Promise<autocannon.Result>((resolve, reject) =>
    autocannon({ connections, duration: seconds, ...options }, (error, result) => error ? reject(error) : resolve(result))
  )

const json = async (url: string, init: RequestInit) => {
  const response = await fetch(url, { ...init, headers: { "content-type": "application/json", ...init.headers } })
  if (response.status >= 300) throw new Error(`${init.method} ${url}: ${response.status} ${await response.text()}`)
  return response.json() as Promise<any>
}

const row = (name: string, result: autocannon.Result) =>
  `${name.padEnd(44)} ${String(Math.round(result.requests.average)).padStart(7)} req/s   p50 ${
    String(result.latency.p50).padStart(5)
  } ms   p99 ${String(result.latency.p99).padStart(5)} ms   non-2xx ${result.non2xx}`

const main = async () => {
  const scope = Effect.runSync(Scope.make())
  let adminUrl = process.env.BENCH_DATABASE_URL
  let dataRoot: string | undefined
  if (adminUrl === undefined) {
    dataRoot = await Fs.mkdtemp(Path.join(Os.tmpdir(), "agent-host-bench-"))
    await Fs.chmod(dataRoot, 0o755)
    const server = await Effect.runPromise(
      Embedded.start({ dataDir: Path.join(dataRoot, "postgres"), port: await freePort(), osUser: "postgres" }).pipe(
        Scope.provide(scope)
      )
    )
    adminUrl = Redacted.value(server.url)
  }
  const database = `bench_${Crypto.randomBytes(4).toString("hex")}`
  const admin = new pg.Client({ connectionString: adminUrl })
  await admin.connect()
  await admin.query(`CREATE DATABASE ${database}`)
  const url = new URL(adminUrl)
  url.pathname = `/${database}`
  const databaseUrl = url.toString()

  const service = await spawn("src/main.ts", { DATABASE_URL: databaseUrl })
  try {
    const idleRss = await rssMb(service.child.pid!)
    const email = `bench-${Date.now()}@example.com`
    await json(`${service.url}/api/auth/register`, {
      method: "POST",
      body: JSON.stringify({ email, password: "benchmark-password" })
    })
    const { token } = await json(`${service.url}/api/auth/login`, {
      method: "POST",
      body: JSON.stringify({ email, password: "benchmark-password" })
    })
    const auth = { authorization: `Bearer ${token}` }
    const { key } = await json(`${service.url}/api/keys`, { method: "POST", headers: auth, body: JSON.stringify({ name: "bench" }) })
    const agents = []
    for (let i = 0; i < 10; i++) {
      agents.push(await json(`${service.url}/api/agents`, {
        method: "POST",
        headers: auth,
        body: JSON.stringify({ name: `Agent ${i}`, memoryEnabled: false })
      }))
    }
    const baseline = await spawn("bench/baseline.ts", { DATABASE_URL: databaseUrl })
    // The same service without daily limits, on the same database, to price the counting.
    const uncounted = await spawn("src/main.ts", { DATABASE_URL: databaseUrl, ENFORCE_DAILY_LIMITS: "false" })
    // The bench tenant must not run out of requests.
    const benchDb = new pg.Client({ connectionString: databaseUrl })
    await benchDb.connect()
    await benchDb.query("UPDATE tenants SET plan = 'business'")
    await benchDb.end()

    const warm = (u: string, extra: Partial<autocannon.Options> = {}) => load({ ...extra, url: u, duration: 2 })
    const keyHeader = { authorization: `Bearer ${key}` }

    await warm(`${baseline.url}/agents/${agents[0].id}`)
    const base = await load({ url: `${baseline.url}/agents/${agents[0].id}` })
    await warm(`${service.url}/api/v1/agents`, { headers: keyHeader })
    const list = await load({ url: `${service.url}/api/v1/agents`, headers: keyHeader })
    await warm(`${uncounted.url}/api/v1/agents`, { headers: keyHeader })
    const listUncounted = await load({ url: `${uncounted.url}/api/v1/agents`, headers: keyHeader })
    uncounted.child.kill("SIGTERM")

    let n = 0
    const chatOptions = {
      url: `${service.url}/api/v1/agents/${agents[0].id}/chat`,
      method: "POST" as const,
      headers: { ...keyHeader, "content-type": "application/json" },
      // 50 conversations, one per connection's worth of traffic.
      requests: [{
        setupRequest: (request: autocannon.Request) => ({
          ...request,
          body: JSON.stringify({ message: "Hello, how are you?", conversationId: `bench-${n++ % connections}` })
        })
      }]
    }
    await warm(chatOptions.url, chatOptions)
    const chat = await load(chatOptions)
    const loadedRss = await rssMb(service.child.pid!)

    console.log(`\n${seconds}s per measurement, ${connections} connections, ${Os.cpus().length} cores\n`)
    console.log(row("baseline: fastify + pg, SELECT by id", base))
    console.log(row("GET /api/v1/agents (key auth + quota + list)", list))
    console.log(row("GET /api/v1/agents without daily limits", listUncounted))
    console.log(row("POST /api/v1/agents/{id}/chat (local model)", chat))
    console.log(`\nGET /api/v1/agents / baseline: ${(list.requests.average / base.requests.average).toFixed(2)}x`)
    console.log(`counting costs: ${(100 * (1 - list.requests.average / listUncounted.requests.average)).toFixed(1)}% of throughput`)
    console.log(`service RSS: idle ${idleRss} MB, after load ${loadedRss} MB`)
    baseline.child.kill("SIGTERM")
  } finally {
    service.child.kill("SIGTERM")
    await new Promise((resolve) => service.child.once("exit", resolve))
    await admin.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`).catch(() => undefined)
    await admin.end()
    await Effect.runPromise(Scope.close(scope, Exit.void))
    if (dataRoot) await Fs.rm(dataRoot, { recursive: true, force: true })
  }
}

await main()
