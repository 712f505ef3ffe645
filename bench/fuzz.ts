// A long fuzz run (test/support/Fuzz.ts) against the service started as
// `npm start` starts it, printing counts by status and by route.
//
//   npm run fuzz                         embedded PostgreSQL in a temp directory
//   FUZZ_DATABASE_URL=... npm run fuzz   an existing server (a database is created there; TEST_DATABASE_URL works too)
//   FUZZ_REQUESTS=10000                  how many requests (default 10000)
//   FUZZ_SEED=123                        replay a run
//   FUZZ_CONCURRENCY=4                   requests in flight
//
// Exits 1 when a request broke the contract (a 5xx, no answer, a 4xx that is
// not a problem) or the service was not ready afterwards. The service's log
// is kept in a temp file whose path is printed.
import { Effect, Exit, Redacted, Scope } from "effect"
import * as ChildProcess from "node:child_process"
import * as Crypto from "node:crypto"
import * as Fs from "node:fs"
import * as Net from "node:net"
import * as Os from "node:os"
import * as Path from "node:path"
import pg from "pg"
import * as Embedded from "../src/Database/Embedded.ts"
import { FakeAnthropic } from "../test/support/FakeAnthropic.ts"
import { FakeOpenAi } from "../test/support/FakeOpenAi.ts"
import * as Fuzz from "../test/support/Fuzz.ts"

const root = Path.resolve(import.meta.dirname, "..")
const requests = Number(process.env.FUZZ_REQUESTS ?? 10_000)
const concurrency = Number(process.env.FUZZ_CONCURRENCY ?? 4)
const stripeSecret = "whsec_fuzz"

const freePort = () =>
  new Promise<number>((resolve) => {
    const server = Net.createServer().listen(0, "127.0.0.1", () => {
      const port = (server.address() as Net.AddressInfo).port
      server.close(() => resolve(port))
    })
  })

const main = async () => {
  const seed = Fuzz.seedFromEnv()
  const scope = Effect.runSync(Scope.make())
  const tmp = Fs.mkdtempSync(Path.join(Os.tmpdir(), "agent-host-fuzz-"))
  Fs.chmodSync(tmp, 0o755)
  let child: ChildProcess.ChildProcess | undefined
  let exitCode = 1
  try {
    let adminUrl = process.env.FUZZ_DATABASE_URL ?? process.env.TEST_DATABASE_URL
    if (adminUrl === undefined || adminUrl === "") {
      const server = await Effect.runPromise(
        Embedded.start({ dataDir: Path.join(tmp, "postgres"), port: await freePort(), osUser: "postgres" }).pipe(
          Scope.provide(scope)
        )
      )
      adminUrl = Redacted.value(server.url)
    }
    const database = `fuzz_${Crypto.randomBytes(4).toString("hex")}`
    const admin = new pg.Client({ connectionString: adminUrl })
    await admin.connect()
    await admin.query(`CREATE DATABASE ${database}`)
    await admin.end()
    Scope.addFinalizer(
      scope,
      Effect.promise(async () => {
        const drop = new pg.Client({ connectionString: adminUrl })
        await drop.connect()
        await drop.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`)
        await drop.end()
      })
    ).pipe(Effect.runSync)
    const url = new URL(adminUrl)
    url.pathname = `/${database}`

    // Model providers on loopback: a PUT may move an agent off `local`, and nothing goes to the network.
    const openai = await Effect.runPromise(FakeOpenAi.make().pipe(Scope.provide(scope)))
    const anthropic = await Effect.runPromise(FakeAnthropic.make().pipe(Scope.provide(scope)))

    const port = await freePort()
    const logPath = Path.join(Os.tmpdir(), `agent-host-fuzz-${seed}.log`)
    const log = Fs.openSync(logPath, "w")
    child = ChildProcess.spawn(process.execPath, ["src/main.ts"], {
      cwd: root,
      env: {
        ...process.env,
        PORT: String(port),
        HOST: "127.0.0.1",
        DATABASE_URL: url.toString(),
        OPENAI_BASE_URL: openai.url,
        OPENAI_API_KEY: "sk-fuzz",
        ANTHROPIC_BASE_URL: anthropic.url,
        ANTHROPIC_API_KEY: "sk-ant-fuzz",
        MODEL_MAX_RETRIES: "0",
        STRIPE_WEBHOOK_SECRET: stripeSecret,
        METRICS_ENABLED: "true",
        // Its accounts log in again and again; throttling is tested on its own.
        AUTH_ATTEMPTS_PER_ACCOUNT: "1000000",
        AUTH_FAILURES_PER_ACCOUNT: "1000000",
        AUTH_ATTEMPTS_PER_ADDRESS: "1000000"
      },
      stdio: ["ignore", log, log]
    })
    const baseUrl = `http://127.0.0.1:${port}`
    const readyBy = Date.now() + 60_000
    while (
      !(await fetch(`${baseUrl}/health/ready`).then(
        (r) => r.status === 200,
        () => false
      ))
    ) {
      if (Date.now() > readyBy || child.exitCode !== null)
        throw new Error(`the service did not become ready; see ${logPath}`)
      await new Promise((resolve) => setTimeout(resolve, 50))
    }

    const db = new pg.Client({ connectionString: url.toString() })
    await db.connect()
    const fixtures = await Fuzz.prepare(baseUrl, {
      stripeSecret,
      promote: async (tenantId) => {
        await db.query("UPDATE tenants SET plan = 'business' WHERE id = $1", [tenantId])
      }
    })
    await db.end()

    console.log(`fuzzing ${baseUrl} with ${requests} requests, FUZZ_SEED=${seed}, service log in ${logPath}`)
    const report = await Fuzz.run({ baseUrl, seed, requests, concurrency, fixtures })
    const ready = await fetch(`${baseUrl}/health/ready`).then(
      (r) => r.status,
      () => 0
    )
    console.log(Fuzz.formatCounts(report))
    console.log(`/health/ready afterwards: ${ready}`)
    if (report.failures.length > 0) console.log(Fuzz.formatFailures(report, 200))
    exitCode = report.failures.length === 0 && ready === 200 ? 0 : 1
  } finally {
    if (child !== undefined && child.exitCode === null) {
      const exited = new Promise((resolve) => child!.once("exit", resolve))
      child.kill("SIGTERM")
      await exited
    }
    await Effect.runPromise(Scope.close(scope, Exit.void))
    Fs.rmSync(tmp, { recursive: true, force: true })
  }
  process.exit(exitCode)
}

main().catch((error) => {
  console.error(error)
  process.exit(1)
})
