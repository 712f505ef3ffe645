import { Effect } from "effect"
import * as ChildProcess from "node:child_process"
import * as Net from "node:net"
import * as NodePath from "node:path"
import { eventually } from "./Eventually.ts"

export const projectRoot = NodePath.resolve(import.meta.dirname, "../..")

// Ports this test process has handed out: a port just freed may come back from the kernel for the next
// caller before the child given it has bound it (two nodes of one cluster then race for one port).
const handedOut = new Set<number>()

const anyFreePort = () =>
  new Promise<number>((resolve, reject) => {
    const server = Net.createServer()
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const port = (server.address() as Net.AddressInfo).port
      server.close(() => resolve(port))
    })
  })

/** A port nothing listens on right now, and not one this process handed out before. */
export const freePort = Effect.promise(async () => {
  for (;;) {
    const port = await anyFreePort()
    if (!handedOut.has(port)) {
      handedOut.add(port)
      return port
    }
  }
})

export interface ServiceProcess {
  readonly child: ChildProcess.ChildProcess
  readonly baseUrl: string
  /** Everything the process wrote to stdout so far. */
  readonly stdout: () => string
  readonly stderr: () => string
  readonly exited: Promise<number | null>
}

/** Runs `node src/main.ts` (what `npm start` runs) as a child process; killed when the scope closes. */
export const spawnService = (env: Record<string, string>) =>
  Effect.acquireRelease(
    Effect.gen(function* () {
      const port = yield* freePort
      let stdout = ""
      let stderr = ""
      const child = ChildProcess.spawn(process.execPath, ["src/main.ts"], {
        cwd: projectRoot,
        env: { ...process.env, PORT: String(port), HOST: "127.0.0.1", ...env },
        stdio: ["ignore", "pipe", "pipe"]
      })
      child.stdout.on("data", (chunk) => (stdout += chunk))
      child.stderr.on("data", (chunk) => (stderr += chunk))
      const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)))
      const service: ServiceProcess = {
        child,
        baseUrl: `http://127.0.0.1:${port}`,
        stdout: () => stdout,
        stderr: () => stderr,
        exited
      }
      return service
    }),
    (service) =>
      Effect.promise(async () => {
        if (service.child.exitCode === null && service.child.signalCode === null) {
          service.child.kill("SIGKILL")
          await service.exited
        }
      })
  )

/** `wait`, unless the process exits first: then it fails at once with `failure`. */
export const unlessExited = <A>(exited: Promise<unknown>, wait: Promise<A>, failure: () => Error) =>
  Promise.race([
    wait,
    exited.then(() => {
      throw failure()
    })
  ])

/** Polls /health/ready until it answers 200 (its time), or fails with what the process printed. */
export const waitReady = (service: ServiceProcess, timeoutMs = 30_000) => {
  const notReady = (cause?: unknown) =>
    new Error(`service not ready:\n${service.stdout()}\n${service.stderr()}`, { cause })
  return Effect.promise(() =>
    unlessExited(
      service.exited,
      eventually(
        async () => {
          const response = await fetch(`${service.baseUrl}/health/ready`)
          if (response.status !== 200) throw new Error(`/health/ready answered ${response.status}`)
          return Date.now()
        },
        { timeoutMs }
      ).catch((cause: unknown) => {
        throw notReady(cause)
      }),
      notReady
    )
  )
}
