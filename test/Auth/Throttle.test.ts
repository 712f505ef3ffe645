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
  authFailuresPerAccount: 12,
  authThrottleWindow: Duration.minutes(10),
  passwordHashConcurrency: 1,
  passwordHashQueue: 1
}

let nextAddress = 1
const freshAddress = () => `198.51.100.${nextAddress++}`

const from = (address: string) => ({ "x-forwarded-for": address })

const login = (email: string, password: string, address: string) =>
  Effect.flatMap(TestClient, (client) =>
    client.request("POST", "/api/auth/login", { headers: from(address), body: { email, password } })
  )

const register = (email: string, password: string, address: string) =>
  Effect.flatMap(TestClient, (client) =>
    client.request("POST", "/api/auth/register", { headers: from(address), body: { email, password } })
  )

const password = "correct horse battery staple"

const outcome = (response: TestServer.TestResponse) => ({
  status: response.status,
  type: response.body?.type as string | undefined,
  retryAfter: response.headers.get("retry-after") !== null
})

layer(TestServer.layer(settings), { excludeTestServices: true })("login and register throttling", (it) => {
  describe("per (address, e-mail) pair", () => {
    it.effect(
      "failures from one address for one e-mail get 429 with Retry-After there, even for the right password; successes do not count; the owner elsewhere still logs in",
      () =>
        Effect.gen(function* () {
          const owner = freshAddress()
          assert.strictEqual((yield* register("pair@example.com", password, owner)).status, 201)
          const guesser = freshAddress()
          // A success first: had it used the pair's bucket, the fifth wrong password below would be refused.
          assert.strictEqual((yield* login("pair@example.com", password, guesser)).status, 200)
          for (let i = 0; i < 5; i++) {
            assert.strictEqual((yield* login("pair@example.com", `wrong password ${i}`, guesser)).status, 401)
          }
          const refused = yield* login("Pair@Example.com", "wrong password 5", guesser)
          assert.strictEqual(refused.status, 429)
          assert.strictEqual(refused.headers.get("content-type"), "application/problem+json")
          assert.strictEqual(refused.body.type, "urn:agent-host:problem:too-many-attempts")
          const retryAfter = Number(refused.headers.get("retry-after"))
          assert.isTrue(retryAfter >= 1 && retryAfter <= 600, `${retryAfter}`)
          assert.strictEqual(refused.body.retryAfter, retryAfter)
          // The right password from that address waits too: guessing there gains nothing.
          assert.strictEqual((yield* login("pair@example.com", password, guesser)).status, 429)
          // The owner, from another address, is not affected.
          const ownLogin = yield* login("pair@example.com", password, owner)
          assert.strictEqual(ownLogin.status, 200, ownLogin.text)
        })
    )

    it.effect("an unknown e-mail is throttled exactly like a known one with wrong passwords", () =>
      Effect.gen(function* () {
        assert.strictEqual((yield* register("known@example.com", password, freshAddress())).status, 201)
        const outcomes = (email: string) => {
          const address = freshAddress()
          return Effect.forEach(
            Array.from({ length: 6 }, (_, i) => i),
            (i) => Effect.map(login(email, `wrong password ${i}`, address), outcome)
          )
        }
        const known = yield* outcomes("known@example.com")
        const unknown = yield* outcomes("nobody@example.com")
        assert.deepStrictEqual(
          known.map((r) => r.status),
          [401, 401, 401, 401, 401, 429]
        )
        assert.deepStrictEqual(unknown, known)
      })
    )
  })

  describe("per e-mail ceiling", () => {
    // Five wrong passwords (the pair's limit) from each of four addresses: twenty failures against a ceiling of 12.
    const attack = (email: string) =>
      Effect.gen(function* () {
        const attackers = Array.from({ length: 4 }, freshAddress)
        const outcomes: Array<ReturnType<typeof outcome>> = []
        for (const attacker of attackers) {
          for (let i = 0; i < 5; i++) outcomes.push(outcome(yield* login(email, `wrong password ${i}`, attacker)))
        }
        return { attackers, outcomes }
      })

    it.effect(
      "wrong passwords from many addresses never lock the owner out: past the ceiling they get 429, the right password still logs in",
      () =>
        Effect.gen(function* () {
          const owner = freshAddress()
          assert.strictEqual((yield* register("target@example.com", password, owner)).status, 201)
          const { attackers, outcomes } = yield* attack("target@example.com")
          assert.deepStrictEqual(
            outcomes.map((r) => r.status),
            [...Array(12).fill(401), ...Array(8).fill(429)]
          )
          for (const refused of outcomes.slice(12)) {
            assert.deepStrictEqual(refused, {
              status: 429,
              type: "urn:agent-host:problem:too-many-attempts",
              retryAfter: true
            })
          }
          // The owner's right password logs in, from their own address and from one never seen before.
          const atHome = yield* login("target@example.com", password, owner)
          assert.strictEqual(atHome.status, 200, atHome.text)
          const elsewhere = yield* login("Target@Example.com", password, freshAddress())
          assert.strictEqual(elsewhere.status, 200, elsewhere.text)
          // Wrong passwords stay refused: from an attacker's address, and from a new one.
          assert.strictEqual((yield* login("target@example.com", "wrong password 6", attackers[0]!)).status, 429)
          assert.strictEqual((yield* login("target@example.com", "wrong password 7", freshAddress())).status, 429)
          // The same attack on an e-mail without an account looks the same.
          assert.deepStrictEqual((yield* attack("no-target@example.com")).outcomes, outcomes)
        })
    )
  })

  describe("per client address", () => {
    it.effect(
      "a burst from one address gets 429; other addresses still log in; spoofed X-Forwarded-For entries do not help",
      () =>
        Effect.gen(function* () {
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
        })
    )
  })

  describe("password hashing", () => {
    it.effect("beyond the running hash and the bounded queue, logins get 503 with Retry-After, not a pile-up", () =>
      Effect.gen(function* () {
        const responses = yield* Effect.forEach(
          Array.from({ length: 30 }, (_, i) => i),
          (i) => login(`flood-${i}@example.com`, "wrong password", freshAddress()),
          { concurrency: "unbounded" }
        )
        const statuses = responses.map((r) => r.status)
        assert.isTrue(
          statuses.every((s) => s === 401 || s === 503),
          statuses.join(",")
        )
        const busy = responses.filter((r) => r.status === 503)
        assert.isAbove(busy.length, 0, statuses.join(","))
        assert.isAbove(statuses.filter((s) => s === 401).length, 0)
        for (const response of busy) {
          assert.strictEqual(response.headers.get("retry-after"), "1")
          assert.strictEqual(response.headers.get("content-type"), "application/problem+json")
        }
        // Nothing was left holding a permit.
        assert.strictEqual((yield* register("after-flood@example.com", password, freshAddress())).status, 201)
      })
    )
  })
})

describe("the hashing gate", () => {
  plainIt.effect("runs at most `concurrency` at once, queues at most `queue`, and refuses the rest at once", () =>
    Effect.gen(function* () {
      const gate = yield* makeGate(2, 3, () => "busy" as const)
      const release = yield* Deferred.make<void>()
      let running = 0
      let most = 0
      const job = Effect.gen(function* () {
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
    })
  )
})
