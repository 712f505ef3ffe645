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
  const startedAt = performance.now()
  const child = ChildProcess.spawn(process.execPath, [script], {
    cwd: root,
    env: { ...process.env, ...env, PORT: String(port), HOST: "127.0.0.1" },
    stdio: ["ignore", "ignore", "inherit"]
  })
  const url = `http://127.0.0.1:${port}`
  for (let i = 0; i < 600; i++) {
    const ok = await fetch(`${url}/health/ready`).then((r) => r.status < 500, () => false)
    if (ok) break
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
  return { child, url, readyMs: Math.round(performance.now() - startedAt) }
}

const rssMb = (pid: number) =>
  Fs.readFile(`/proc/${pid}/status`, "utf8").then(
    (status) => Math.round(Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0) / 1024),
    () => NaN
  )

// CPU time (user + system) a process has used, in microseconds.
const ticks = Number(ChildProcess.execFileSync("getconf", ["CLK_TCK"]).toString().trim())
const cpuMicros = async (pid: number) => {
  const fields = (await Fs.readFile(`/proc/${pid}/stat`, "utf8")).split(") ")[1]!.split(" ")
  return (Number(fields[11]) + Number(fields[12])) * 1_000_000 / ticks
}

/** Load with autocannon, noting the CPU the measured process spent per answered request. */
const load = async (pid: number, options: Partial<autocannon.Options> & { readonly url: string }) => {
  const before = await cpuMicros(pid)
  const result = await new Promise<autocannon.Result>((resolve, reject) =>
    autocannon({ connections, duration: seconds, ...options }, (error, result) => error ? reject(error) : resolve(result))
  )
  const cpuPerRequest = (await cpuMicros(pid) - before) / Math.max(1, result.requests.total)
  return { ...result, cpuPerRequest }
}

const json = async (url: string, init: RequestInit) => {
  const response = await fetch(url, { ...init, headers: { "content-type": "application/json", ...init.headers } })
  if (response.status >= 300) throw new Error(`${init.method} ${url}: ${response.status} ${await response.text()}`)
  return response.json() as Promise<any>
}

const row = (name: string, result: Awaited<ReturnType<typeof load>>) =>
  `${name.padEnd(50)} ${String(Math.round(result.requests.average)).padStart(6)} req/s  p50 ${
    String(result.latency.p50).padStart(3)
  } ms  p99 ${String(result.latency.p99).padStart(3)} ms  ${
    String(Math.round(result.cpuPerRequest)).padStart(4)
  } µs CPU/req  non-2xx ${result.non2xx}`

const ratio = (a: { requests: { average: number } }, b: { requests: { average: number } }) =>
  (a.requests.average / b.requests.average).toFixed(2)

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
  const pid = service.child.pid!
  try {
    const idleRss = await rssMb(pid)
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
    const orchestration = await json(`${service.url}/api/orchestrations`, {
      method: "POST",
      headers: auth,
      body: JSON.stringify({ name: "One step", steps: [{ id: "s", agentId: agents[0].id, prompt: "Say {{input}}" }] })
    })
    const baseline = await spawn("bench/baseline.ts", { DATABASE_URL: databaseUrl })
    const baselinePid = baseline.child.pid!
    // The same service without daily limits, on the same database, to price the counting.
    const uncounted = await spawn("src/main.ts", { DATABASE_URL: databaseUrl, ENFORCE_DAILY_LIMITS: "false" })
    // A warm start: the database is migrated and the modules are in the file cache.
    const warmStartMs = uncounted.readyMs
    const db = new pg.Client({ connectionString: databaseUrl })
    await db.connect()
    // The bench tenant must not run out of requests.
    await db.query("UPDATE tenants SET plan = 'business'")

    const warm = (u: string, extra: Partial<autocannon.Options> = {}) =>
      new Promise((resolve) => autocannon({ connections, ...extra, url: u, duration: 2 }, resolve))
    const keyHeader = { authorization: `Bearer ${key}` }

    // Reads: the v1 list against one SELECT by primary key.
    await warm(`${baseline.url}/agents/${agents[0].id}`)
    const select = await load(baselinePid, { url: `${baseline.url}/agents/${agents[0].id}` })
    await warm(`${service.url}/api/v1/agents`, { headers: keyHeader })
    const list = await load(pid, { url: `${service.url}/api/v1/agents`, headers: keyHeader })
    await warm(`${uncounted.url}/api/v1/agents`, { headers: keyHeader })
    const listUncounted = await load(uncounted.child.pid!, { url: `${uncounted.url}/api/v1/agents`, headers: keyHeader })
    // Both run the cluster on one database in single-node mode: the second
    // must be gone before the executions, or the two would share the shards.
    uncounted.child.kill("SIGTERM")
    await new Promise((resolve) => uncounted.child.once("exit", resolve))

    // Writes: execute (202 once the run is durable) against one INSERT; then
    // how fast the accepted one-step runs complete on the instant local model.
    const body = JSON.stringify({ input: "hello" })
    const post = { method: "POST" as const, body, headers: { ...keyHeader, "content-type": "application/json" } }
    await warm(`${baseline.url}/items`, post)
    const insert = await load(baselinePid, { url: `${baseline.url}/items`, ...post })
    const executeUrl = `${service.url}/api/v1/orchestrations/${orchestration.id}/execute`
    const countDone = async () =>
      Number((await db.query("SELECT count(*) AS n FROM executions WHERE status IN ('completed', 'failed')")).rows[0].n)
    const waitForRuns = async (total: number) => {
      for (let i = 0; i < 6000; i++) {
        const done = Number(
          (await db.query("SELECT count(*) AS n FROM executions WHERE status NOT IN ('pending', 'running')")).rows[0].n
        )
        if (done >= total) return
        await new Promise((resolve) => setTimeout(resolve, 20))
      }
      throw new Error("executions did not finish within 120 s")
    }
    await warm(executeUrl, post)
    await waitForRuns(Number((await db.query("SELECT count(*) AS n FROM executions")).rows[0].n))
    const doneBefore = await countDone()
    const executeStartedAt = performance.now()
    const execute = await load(pid, { url: executeUrl, ...post })
    const accepted = execute["2xx"]
    await waitForRuns(Number((await db.query("SELECT count(*) AS n FROM executions")).rows[0].n))
    const executeSeconds = (performance.now() - executeStartedAt) / 1000
    const completed = (await countDone()) - doneBefore
    const failed = Number((await db.query("SELECT count(*) AS n FROM executions WHERE status = 'failed'")).rows[0].n)

    // Chat on the instant local model: all overhead. Closed loop (50 clients
    // as fast as answered), then an open loop at a fixed rate that the
    // service keeps up with, which shows latency without queueing.
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
    const chat = await load(pid, chatOptions)
    const chatRate = 200
    const chatPaced = await load(pid, { ...chatOptions, overallRate: chatRate })
    const loadedRss = await rssMb(pid)
    await db.end()

    console.log(`\n${seconds}s per measurement, ${connections} connections, ${Os.cpus().length} cores\n`)
    console.log(row("baseline: fastify + pg, SELECT by id", select))
    console.log(row("GET /api/v1/agents (key auth + quota + list)", list))
    console.log(row("GET /api/v1/agents without daily limits", listUncounted))
    console.log(row("baseline: fastify + pg, INSERT", insert))
    console.log(row("POST /api/v1/orchestrations/{id}/execute", execute))
    console.log(row("POST /api/v1/agents/{id}/chat (local model)", chat))
    console.log(row(`same, open loop at ${chatRate} req/s`, chatPaced))
    console.log(`\nGET /api/v1/agents / SELECT baseline: ${ratio(list, select)}x (target 0.8x)`)
    console.log(`counting costs: ${(100 * (1 - list.requests.average / listUncounted.requests.average)).toFixed(1)}% of throughput`)
    console.log(`execute / INSERT baseline: ${ratio(execute, insert)}x (target 0.6x)`)
    console.log(
      `one-step executions: ${accepted} accepted, ${completed} finished (${failed} failed) in ${
        executeSeconds.toFixed(1)
      } s from the first request: ${Math.round(completed / executeSeconds)} per second (target 1,000)`
    )
    console.log(`chat latency, closed loop: p50 ${chat.latency.p50} ms, p99 ${chat.latency.p99} ms (target p50 2 ms, p99 10 ms)`)
    console.log(`chat latency, ${chatRate} req/s: p50 ${chatPaced.latency.p50} ms, p99 ${chatPaced.latency.p99} ms`)
    console.log(`service RSS: idle ${idleRss} MB, after load ${loadedRss} MB (targets 150 / 400 MB)`)
    console.log(`warm start until /health/ready: ${warmStartMs} ms (target 3,000 ms)`)
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
