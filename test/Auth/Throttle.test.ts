import { assert, describe, it as plainIt, layer } from "@effect/vitest"
import { Deferred, Duration, Effect, Fiber } from "effect"
import { makeGate } from "../../src/Auth/Secrets.ts"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"

// Behind one trusted proxy, so each test can speak from addresses of its own.
const settings = {
  trustedProxyHops: 1,
  authAttemptsPerAccount: 5,
  authAttemptsPerAddress: 8,
  authThrottleWindow: Duration.minutes(10),
  passwordHashConcurrency: 1,
  passwordHashQueue: 1
}

let nextAddress = 1
const freshAddress = () => `198.51.100.${nextAddress++}`

const from = (address: string) => ({ "x-forwarded-for": address })

const login = (email: string, password: string, address: string) =>
  Effect.flatMap(TestClient, (client) =>
    client.request("POST", "/api/auth/login", { headers: from(address), body: { email, password } }))

const register = (email: string, password: string, address: string) =>
  Effect.flatMap(TestClient, (client) =>
    client.request("POST", "/api/auth/register", { headers: from(address), body: { email, password } }))

const password = "correct horse battery staple"

layer(TestServer.layer(settings), { excludeTestServices: true })("login and register throttling", (it) => {
  describe("per account", () => {
    it.effect("a burst of failed logins for one account gets 429 with Retry-After; another account still logs in", () =>
      Effect.gen(function*() {
        assert.strictEqual((yield* register("victim@example.com", password, freshAddress())).status, 201)
        assert.strictEqual((yield* register("other@example.com", password, freshAddress())).status, 201)
        // The register was the account's first attempt; four wrong passwords from four addresses follow.
        for (let i = 0; i < 4; i++) {
          assert.strictEqual((yield* login("victim@example.com", `wrong password ${i}`, freshAddress())).status, 401)
        }
        const refused = yield* login("Victim@Example.com", `wrong password 5`, freshAddress())
        assert.strictEqual(refused.status, 429)
        assert.strictEqual(refused.headers.get("content-type"), "application/problem+json")
        assert.strictEqual(refused.body.type, "urn:agent-host:problem:too-many-attempts")
        const retryAfter = Number(refused.headers.get("retry-after"))
        assert.isTrue(retryAfter >= 1 && retryAfter <= 600, `${retryAfter}`)
        assert.strictEqual(refused.body.retryAfter, retryAfter)
        // The right password waits too: guessing gains nothing.
        assert.strictEqual((yield* login("victim@example.com", password, freshAddress())).status, 429)
        // Another account is not affected.
        const other = yield* login("other@example.com", password, freshAddress())
        assert.strictEqual(other.status, 200, other.text)
      }))

    it.effect("an unknown e-mail is throttled exactly like a known one with wrong passwords", () =>
      Effect.gen(function*() {
        assert.strictEqual((yield* register("known@example.com", password, freshAddress())).status, 201)
        // One attempt each, so both buckets stand at the same level.
        assert.strictEqual((yield* login("nobody@example.com", "wrong password", freshAddress())).status, 401)
        const statuses = (email: string) =>
          Effect.forEach(Array.from({ length: 5 }, (_, i) => i), (i) =>
            Effect.map(login(email, `wrong password ${i}`, freshAddress()), (r) => ({
              status: r.status,
              type: r.body?.type as string,
              retryAfter: r.headers.get("retry-after") !== null
            })))
        const known = yield* statuses("known@example.com")
        const unknown = yield* statuses("nobody@example.com")
        assert.deepStrictEqual(known.map((r) => r.status), [401, 401, 401, 401, 429])
        assert.deepStrictEqual(unknown, known)
      }))
  })

  describe("per client address", () => {
    it.effect("a burst from one address gets 429; other addresses still log in; spoofed X-Forwarded-For entries do not help", () =>
      Effect.gen(function*() {
        assert.strictEqual((yield* register("steady@example.com", password, freshAddress())).status, 201)
        const attacker = freshAddress()
        for (let i = 0; i < 8; i++) {
          assert.strictEqual((yield* login(`guess-${i}@example.com`, "wrong password", attacker)).status, 401)
        }
        const refused = yield* login("guess-9@example.com", "wrong password", attacker)
        assert.strictEqual(refused.status, 429)
        assert.isNotNull(refused.headers.get("retry-after"))
        // Entries left of the trusted proxy's are the client's own words, and ignored.
        const spoofed = yield* login("guess-10@example.com", "wrong password", `203.0.113.77, ${attacker}`)
        assert.strictEqual(spoofed.status, 429)
        // Registering from there is throttled too.
        assert.strictEqual((yield* register("new@example.com", password, attacker)).status, 429)
        assert.strictEqual((yield* login("steady@example.com", password, freshAddress())).status, 200)
      }))
  })

  describe("password hashing", () => {
    it.effect("beyond the running hash and the bounded queue, logins get 503 with Retry-After, not a pile-up", () =>
      Effect.gen(function*() {
        const responses = yield* Effect.forEach(Array.from({ length: 30 }, (_, i) => i), (i) =>
          login(`flood-${i}@example.com`, "wrong password", freshAddress()), { concurrency: "unbounded" })
        const statuses = responses.map((r) => r.status)
        assert.isTrue(statuses.every((s) => s === 401 || s === 503), statuses.join(","))
        const busy = responses.filter((r) => r.status === 503)
        assert.isAbove(busy.length, 0, statuses.join(","))
        assert.isAbove(statuses.filter((s) => s === 401).length, 0)
        for (const response of busy) {
          assert.strictEqual(response.headers.get("retry-after"), "1")
          assert.strictEqual(response.headers.get("content-type"), "application/problem+json")
        }
        // Nothing was left holding a permit.
        assert.strictEqual((yield* register("after-flood@example.com", password, freshAddress())).status, 201)
      }))
  })
})

describe("the hashing gate", () => {
  plainIt.effect("runs at most `concurrency` at once, queues at most `queue`, and refuses the rest at once", () =>
    Effect.gen(function*() {
      const gate = yield* makeGate(2, 3, () => "busy" as const)
      const release = yield* Deferred.make<void>()
      let running = 0
      let most = 0
      const job = Effect.gen(function*() {
        running++
        most = Math.max(most, running)
        yield* Deferred.await(release)
        running--
        return "done" as const
      })
      const fibers = yield* Effect.forEach(Array.from({ length: 5 }), () => Effect.forkChild(gate(job)))
      // Wait (bounded) until the first two run.
      for (let i = 0; i < 100 && running < 2; i++) yield* Effect.yieldNow
      assert.strictEqual(running, 2)
      const refused = yield* Effect.flip(gate(job))
      assert.strictEqual(refused, "busy")
      yield* Deferred.succeed(release, undefined)
      const results = yield* Effect.forEach(fibers, Fiber.join)
      assert.deepStrictEqual(results, ["done", "done", "done", "done", "done"])
      assert.strictEqual(most, 2)
      // All permits are back.
      assert.strictEqual(yield* gate(Effect.succeed("again")), "again")
    }))
})
