import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { spawnService, waitReady } from "../support/Process.ts"
import { TestDatabaseUrl } from "../support/TestServer.ts"

describe("the service process", () => {
  it.live("logs JSON lines and drains in-flight requests on SIGTERM, then exits 0", () =>
    Effect.gen(function*() {
      const databaseUrl = yield* TestDatabaseUrl
      const service = yield* spawnService({ DATABASE_URL: databaseUrl })
      yield* waitReady(service)

      // Registrations hash passwords with scrypt, so they are still running when SIGTERM arrives.
      const inFlight = Array.from({ length: 8 }, (_, i) =>
        fetch(`${service.baseUrl}/api/auth/register`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ email: `drain-${i}@example.com`, password: "12345678" })
        }).then((response) => response.status))
      yield* Effect.sleep("30 millis")
      service.child.kill("SIGTERM")
      const statuses = yield* Effect.promise(() => Promise.all(inFlight))
      const code = yield* Effect.promise(() => service.exited)

      assert.deepStrictEqual(statuses, Array(8).fill(201))
      assert.strictEqual(code, 0)
      const lines = service.stdout().trim().split("\n").map((line) => JSON.parse(line))
      const requests = lines.filter((line) => line.message === "request" || line.message?.[0] === "request")
      assert.isAtLeast(requests.length, 8)
      const registered = requests.find((line) => line.annotations?.path === "/api/auth/register")
      assert.isDefined(registered)
      assert.strictEqual(registered.annotations.status, 201)
      assert.isString(registered.annotations.requestId)
      assert.notInclude(service.stdout(), "12345678")
    }), 60_000)
})
