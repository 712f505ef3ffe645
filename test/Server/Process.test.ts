import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Fs from "node:fs/promises"
import * as Http from "node:http"
import * as Os from "node:os"
import * as NodePath from "node:path"
import { freePort, spawnService, waitReady } from "../support/Process.ts"
import { TestDatabaseUrl } from "../support/TestServer.ts"

const postOnNewConnection = (url: string, body: unknown) =>
  new Promise<number>((resolve, reject) => {
    const request = Http.request(
      url,
      { method: "POST", agent: false, headers: { "content-type": "application/json" } },
      (response) => {
        response.resume()
        response.on("end", () => resolve(response.statusCode ?? 0))
      }
    )
    request.on("error", reject)
    request.end(JSON.stringify(body))
  })

describe("the service process", () => {
  it.live(
    "logs JSON lines and drains in-flight requests on SIGTERM, then exits 0",
    () =>
      Effect.gen(function* () {
        const databaseUrl = yield* TestDatabaseUrl
        const service = yield* spawnService({ DATABASE_URL: databaseUrl })
        yield* waitReady(service)

        // Registrations hash passwords with scrypt, so they are still running when SIGTERM arrives.
        // Each on a fresh connection: a pooled keep-alive connection may be closed
        // as idle by the shutdown just as a request is written on it.
        const inFlight = Array.from({ length: 8 }, (_, i) =>
          postOnNewConnection(`${service.baseUrl}/api/auth/register`, {
            email: `drain-${i}@example.com`,
            password: "12345678"
          })
        )
        // Once one has been answered, the server has read them all; a request
        // still unread in a socket buffer when shutdown starts is not in flight.
        yield* Effect.promise(() => Promise.race(inFlight))
        service.child.kill("SIGTERM")
        const statuses = yield* Effect.promise(() => Promise.all(inFlight))
        const code = yield* Effect.promise(() => service.exited)

        assert.deepStrictEqual(statuses, Array(8).fill(201))
        assert.strictEqual(code, 0)
        const lines = service
          .stdout()
          .trim()
          .split("\n")
          .map((line) => JSON.parse(line))
        const requests = lines.filter((line) => line.message === "request" || line.message?.[0] === "request")
        assert.isAtLeast(requests.length, 8)
        const registered = requests.find((line) => line.annotations?.path === "/api/auth/register")
        assert.isDefined(registered)
        assert.strictEqual(registered.annotations.status, 201)
        assert.isString(registered.annotations.requestId)
        assert.notInclude(service.stdout(), "12345678")
        // What start-up left was given back to the OS before the first request was served.
        const startup = lines.findIndex((line) => line.message === "Start-up memory given back to the OS")
        assert.isAtLeast(startup, 0)
        assert.isBelow(startup, lines.indexOf(requests[0]))
        assert.isBelow(lines[startup].annotations.rssAfterMb, lines[startup].annotations.rssBeforeMb)
      }),
    60_000
  )
})

describe("the embedded PostgreSQL across runs", () => {
  it.live(
    "a run killed with SIGKILL leaves a server that the next run adopts and stops",
    () =>
      Effect.gen(function* () {
        const dataRoot = yield* Effect.acquireRelease(
          Effect.promise(async () => {
            const dir = await Fs.mkdtemp(NodePath.join(Os.tmpdir(), "agent-host-process-"))
            // Under root the server runs as another user, who must be able to enter it.
            await Fs.chmod(dir, 0o755)
            return dir
          }),
          (dir) => Effect.promise(() => Fs.rm(dir, { recursive: true, force: true }))
        )
        const env = {
          EMBEDDED_POSTGRES_DATA_DIR: NodePath.join(dataRoot, "postgres"),
          EMBEDDED_POSTGRES_PORT: String(yield* freePort)
        }
        const postmasterPid = async () =>
          Number((await Fs.readFile(NodePath.join(dataRoot, "postgres", "postmaster.pid"), "utf8")).split("\n")[0])
        const isAlive = (pid: number) => {
          try {
            process.kill(pid, 0)
            return true
          } catch {
            return false
          }
        }

        const first = yield* spawnService(env)
        yield* waitReady(first, 60_000)
        const registered = yield* Effect.promise(() =>
          fetch(`${first.baseUrl}/api/auth/register`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify({ email: "survivor@example.com", password: "12345678" })
          }).then((response) => response.status)
        )
        assert.strictEqual(registered, 201)
        const pid = yield* Effect.promise(postmasterPid)
        first.child.kill("SIGKILL")
        yield* Effect.promise(() => first.exited)
        assert.isTrue(isAlive(pid), "the server outlives a killed run")

        const second = yield* spawnService(env)
        yield* waitReady(second, 60_000)
        assert.include(second.stdout(), "left behind by a killed run")
        // The data written by the killed run is there.
        const login = yield* Effect.promise(() =>
          fetch(`${second.baseUrl}/api/auth/login`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify({ email: "survivor@example.com", password: "12345678" })
          }).then((response) => response.status)
        )
        assert.strictEqual(login, 200)
        second.child.kill("SIGTERM")
        assert.strictEqual(yield* Effect.promise(() => second.exited), 0)
        assert.isFalse(isAlive(pid), "the adopted server is stopped with the run that adopted it")
      }),
    120_000
  )
})
