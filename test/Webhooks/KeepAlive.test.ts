import { assert, describe, it } from "@effect/vitest"
import { Duration, Effect } from "effect"
import * as Http from "node:http"
import type * as Net from "node:net"
import * as Guard from "../../src/Webhooks/Guard.ts"

// Guard.request keeps connections open by the checked address, and sends a
// request once more when a kept connection turns out closed by the receiver.

const listen = (handler: Http.RequestListener, options: Http.ServerOptions = {}) =>
  Effect.acquireRelease(
    Effect.callback<{ server: Http.Server; url: URL; connections: () => number }>((resume) => {
      let connections = 0
      const server = Http.createServer(options, handler)
      server.on("connection", () => connections++)
      server.listen(0, "127.0.0.1", () =>
        resume(
          Effect.succeed({
            server,
            url: new URL(`http://127.0.0.1:${(server.address() as Net.AddressInfo).port}/items/A-1`),
            connections: () => connections
          })
        )
      )
    }),
    ({ server }) =>
      Effect.callback<void>((resume) => {
        server.closeAllConnections()
        server.close(() => resume(Effect.void))
      })
  )

const get = (url: URL) =>
  Guard.request({
    method: "GET",
    url,
    address: "127.0.0.1",
    headers: {},
    timeout: Duration.seconds(5),
    timeoutMessage: "no answer",
    maxBody: 1_024
  })

describe("kept connections", () => {
  it.live("calls one after the other to the same address share one connection", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const receiver = yield* listen((_, response) => response.end("ok"))
        for (let i = 0; i < 5; i++) {
          const answer = yield* get(receiver.url)
          assert.strictEqual(answer.status, 200)
          assert.strictEqual(answer.body, "ok")
        }
        assert.strictEqual(receiver.connections(), 1)
      })
    )
  )

  it.live("a body cut at maxBody drops its connection: the next request opens another", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const receiver = yield* listen((_, response) => response.end("x".repeat(4_096)))
        const cut = yield* get(receiver.url)
        assert.isTrue(cut.truncated)
        assert.strictEqual(cut.body.length, 1_024)
        const next = yield* get(receiver.url)
        assert.strictEqual(next.status, 200)
        assert.strictEqual(receiver.connections(), 2)
      })
    )
  )

  it.live("a kept connection the receiver reset is not an error: the request goes again on a new one", () =>
    Effect.scoped(
      Effect.gen(function* () {
        let answered = 0
        const served = new WeakMap<Net.Socket, number>()
        const receiver = yield* listen((request, response) => {
          const before = served.get(request.socket) ?? 0
          served.set(request.socket, before + 1)
          // A connection's second request is reset unanswered, as by a receiver that closed it just then.
          if (before === 1) return request.socket.resetAndDestroy()
          response.end(`answer ${++answered}`)
        })
        const first = yield* get(receiver.url)
        assert.strictEqual(first.body, "answer 1")
        const second = yield* get(receiver.url)
        assert.strictEqual(second.status, 200)
        assert.strictEqual(second.body, "answer 2")
        assert.strictEqual(receiver.connections(), 2)
      })
    )
  )
})
