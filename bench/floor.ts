// Floors: what the frameworks under the service cost by themselves, side by
// side with the service in one run, to show where a request's and a run's
// time goes (see docs/performance.md).
//
//   npm run bench:floor                      embedded PostgreSQL in a temp directory
//   BENCH_DATABASE_URL=... npm run bench:floor   an existing server (a database is created there)
//   BENCH_SECONDS=8                          seconds per measurement
//
// - HTTP without a database: the same GET (a fixed row) and POST (a JSON body
//   read, 202 with an id) on fastify and on bare effect (HttpApi, no
//   middleware), and the service's /health/live (its whole request pipeline).
// - With the database: fastify + pg (one SELECT, one INSERT) against the
//   service's list and execute, as in `npm run bench`.
// - Runs: the service's own cluster (storage and settings) running a workflow
//   that does nothing, started in-process by 50 callers (bench/floor-cluster.ts),
//   against the service's one-step executions accepted over HTTP.
import type autocannon from "autocannon"
import * as ChildProcess from "node:child_process"
import * as Os from "node:os"
import pg from "pg"
import { cpuMicros, json, measureLoad, openDatabase, root, signUp, spawn, startFlags } from "./Support.ts"

const seconds = Number(process.env.BENCH_SECONDS ?? 8)
const connections = 50

type Measured = Awaited<ReturnType<typeof measureLoad>>

const load = async (pid: number, options: Partial<autocannon.Options> & { readonly url: string }) => {
  // Warm first: the measured seconds see compiled code and open connections.
  await measureLoad(pid, { connections, ...options, duration: 2 })
  return measureLoad(pid, { connections, duration: seconds, ...options })
}

const line = (name: string, result: Measured, against?: Measured) =>
  `${name.padEnd(44)} ${String(Math.round(result.requests.average)).padStart(7)} req/s ${String(
    Math.round(result.cpuPerRequest)
  ).padStart(
    6
  )} µs CPU/req${against === undefined ? "" : `  ${(result.requests.average / against.requests.average).toFixed(2)}x`}${
    result.non2xx > 0 ? `  non-2xx ${result.non2xx}` : ""
  }`

/** The cluster alone: runs floor-cluster.ts on the database and reads its one line of figures. */
const clusterFloor = (databaseUrl: string) =>
  new Promise<{ started: number; completed: number; seconds: number; cpuMicrosPerRun: number }>((resolve, reject) => {
    const child = ChildProcess.spawn(process.execPath, [...startFlags, "bench/floor-cluster.ts"], {
      cwd: root,
      env: {
        ...process.env,
        DATABASE_URL: databaseUrl,
        SECONDS: String(seconds),
        CONNECTIONS: String(connections),
        LOG_LEVEL: "Warn"
      },
      stdio: ["ignore", "pipe", "inherit"]
    })
    let out = ""
    child.stdout.on("data", (chunk: Buffer) => (out += chunk.toString("utf8")))
    child.once("exit", (code) => {
      const figures = out.split("\n").find((text) => text.startsWith('{"started"'))
      if (code !== 0 || figures === undefined)
        reject(new Error(`floor-cluster.ts exited with ${code}: ${out.slice(-2000)}`))
      else resolve(JSON.parse(figures))
    })
  })

const stop = (child: ChildProcess.ChildProcess) =>
  new Promise((resolve) => {
    child.once("exit", resolve)
    child.kill("SIGTERM")
  })

const main = async () => {
  const { close, databaseUrl } = await openDatabase("floor")
  const fastifyFloor = await spawn("bench/floor-http.ts", { FRAMEWORK: "fastify" })
  const effectFloor = await spawn("bench/floor-http.ts", { FRAMEWORK: "effect" })
  const baseline = await spawn("bench/baseline.ts", { DATABASE_URL: databaseUrl })
  const service = await spawn("src/main.ts", { DATABASE_URL: databaseUrl })
  const children = [fastifyFloor.child, effectFloor.child, baseline.child, service.child]
  const db = new pg.Client({ connectionString: databaseUrl })
  try {
    const { auth } = await signUp(service.url)
    const { key } = await json(`${service.url}/api/keys`, {
      method: "POST",
      headers: auth,
      body: JSON.stringify({ name: "floor" })
    })
    const agent = await json(`${service.url}/api/agents`, {
      method: "POST",
      headers: auth,
      body: JSON.stringify({ name: "Agent", memoryEnabled: false })
    })
    const orchestration = await json(`${service.url}/api/orchestrations`, {
      method: "POST",
      headers: auth,
      body: JSON.stringify({ name: "One step", steps: [{ id: "s", agentId: agent.id, prompt: "Say {{input}}" }] })
    })
    await db.connect()
    // The bench tenant must not run out of requests.
    await db.query("UPDATE tenants SET plan = 'business'")
    const keyHeader = { authorization: `Bearer ${key}` }
    const body = JSON.stringify({ input: "hello" })
    const post = (headers: Record<string, string> = {}) => ({
      method: "POST" as const,
      body,
      headers: { ...headers, "content-type": "application/json" }
    })
    const pid = (spawned: { readonly child: ChildProcess.ChildProcess }) => spawned.child.pid!

    const getFastify = await load(pid(fastifyFloor), { url: `${fastifyFloor.url}/items/${agent.id}` })
    const getEffect = await load(pid(effectFloor), { url: `${effectFloor.url}/items/${agent.id}` })
    const live = await load(pid(service), { url: `${service.url}/health/live` })
    const postFastify = await load(pid(fastifyFloor), { url: `${fastifyFloor.url}/items`, ...post() })
    const postEffect = await load(pid(effectFloor), { url: `${effectFloor.url}/items`, ...post() })
    const select = await load(pid(baseline), { url: `${baseline.url}/agents/${agent.id}` })
    const list = await load(pid(service), { url: `${service.url}/api/v1/agents`, headers: keyHeader })
    const insert = await load(pid(baseline), { url: `${baseline.url}/items`, ...post() })

    // Executions: accepted over HTTP, then run; timed from the first request
    // to the last run's end, with the service's CPU over all of it.
    const executeUrl = `${service.url}/api/v1/orchestrations/${orchestration.id}/execute`
    const unfinished = async () =>
      Number((await db.query("SELECT count(*) AS n FROM executions WHERE status IN ('pending', 'running')")).rows[0].n)
    const untilFinished = async () => {
      for (let i = 0; i < 6000 && (await unfinished()) > 0; i++) await new Promise((resolve) => setTimeout(resolve, 20))
    }
    await measureLoad(pid(service), { connections, duration: 2, url: executeUrl, ...post(keyHeader) })
    await untilFinished()
    const runsBefore = Number((await db.query("SELECT count(*) AS n FROM executions")).rows[0].n)
    const cpuBefore = await cpuMicros(pid(service))
    const startedAt = performance.now()
    const execute = await measureLoad(pid(service), {
      connections,
      duration: seconds,
      url: executeUrl,
      ...post(keyHeader)
    })
    await untilFinished()
    const runSeconds = (performance.now() - startedAt) / 1000
    const runs = Number((await db.query("SELECT count(*) AS n FROM executions")).rows[0].n) - runsBefore
    const failed = Number((await db.query("SELECT count(*) AS n FROM executions WHERE status = 'failed'")).rows[0].n)
    const runCpu = ((await cpuMicros(pid(service))) - cpuBefore) / Math.max(1, runs)

    // The cluster alone, on the same database, once the service has let go of its shards.
    await stop(service.child)
    const cluster = await clusterFloor(databaseUrl)

    console.log(`\n${seconds}s per measurement, ${connections} connections, ${Os.cpus().length} cores\n`)
    console.log("HTTP, no database")
    console.log(line("GET  fastify", getFastify))
    console.log(line("GET  effect (HttpApi, no middleware)", getEffect, getFastify))
    console.log(line("GET  service /health/live (whole pipeline)", live, getFastify))
    console.log(line("POST fastify (JSON body, 202)", postFastify))
    console.log(line("POST effect (HttpApi, schema, 202)", postEffect, postFastify))
    console.log("\nWith the database")
    console.log(line("GET  fastify + pg SELECT by id", select))
    console.log(line("GET  service /api/v1/agents", list, select))
    console.log(line("POST fastify + pg INSERT", insert))
    console.log(line("POST service execute (202 once durable)", execute, insert))
    console.log("\nOne-step runs, no model latency")
    console.log(
      `${"cluster alone (workflow doing nothing)".padEnd(44)} ${String(Math.round(cluster.completed / cluster.seconds)).padStart(7)} runs/s ${String(
        Math.round(cluster.cpuMicrosPerRun)
      ).padStart(6)} µs CPU/run  (${cluster.completed} of ${cluster.started} started)`
    )
    console.log(
      `${"service (execute accepted, then run)".padEnd(44)} ${String(Math.round(runs / runSeconds)).padStart(7)} runs/s ${String(
        Math.round(runCpu)
      ).padStart(6)} µs CPU/run  (${runs} of ${execute["2xx"]} accepted, ${failed} failed)`
    )
  } finally {
    await db.end().catch(() => undefined)
    await Promise.all(children.filter((child) => child.exitCode === null && child.signalCode === null).map(stop))
    await close()
  }
}

main().catch((error) => {
  console.error(error)
  process.exitCode = 1
})
