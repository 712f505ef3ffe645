/**
 * A fake webhook receiver: a real HTTP server on 127.0.0.1 (an ephemeral port)
 * that records every request as it arrived (headers, raw body, time) and
 * answers from a script.
 *
 * ```ts
 * const receiver = yield* FakeReceiver.make()      // scoped: closed with the test's scope
 * receiver.script({ status: 500, times: 2 }, { delayMs: 2_000 }, { status: 302, location: "http://..." })
 * receiver.url("/hook")                            // http://127.0.0.1:<port>/hook
 * receiver.requests                                // every request so far
 * receiver.script({ hold: true }); receiver.releaseHeld() // held unanswered until released (or closed by the client)
 * receiver.closedByClient                          // requests whose client hung up before their answer
 * ```
 *
 * Requests take the scripted answers in order; then every request gets 200
 * with an empty JSON object.
 */
import { Effect } from "effect"
import * as Http from "node:http"

export interface ReceivedRequest {
  readonly method: string
  readonly path: string
  /** Lower-cased header names. */
  readonly headers: Readonly<Record<string, string>>
  /** The body exactly as received. */
  readonly body: string
  /** When the request arrived (ms since the epoch). */
  readonly at: number
}

export interface ScriptedAnswer {
  /** Default 200. */
  readonly status?: number
  /** Wait this long before answering. */
  readonly delayMs?: number
  /** A Location header (for redirects). */
  readonly location?: string
  /** Default `{}`. */
  readonly body?: string
  /** Use this answer for this many requests; default 1. */
  readonly times?: number
  /** Hold the request unanswered until `releaseHeld()` (then answer as scripted) or until the client closes it. */
  readonly hold?: boolean
}

export interface FakeReceiver {
  readonly port: number
  readonly url: (path?: string) => string
  readonly requests: ReadonlyArray<ReceivedRequest>
  readonly script: (...answers: ReadonlyArray<ScriptedAnswer>) => void
  readonly reset: () => void
  /** Answers every request held (`hold`) so far whose client is still there. */
  readonly releaseHeld: () => void
  /** Requests whose connection the client closed before they were answered, in the order they were closed. */
  readonly closedByClient: ReadonlyArray<ReceivedRequest>
}

export const make = Effect.gen(function* () {
  const requests: Array<ReceivedRequest> = []
  let script: Array<ScriptedAnswer> = []
  let held: Array<() => void> = []
  const closedByClient: Array<ReceivedRequest> = []
  const sockets = new Set<import("node:net").Socket>()
  const server = Http.createServer((request, response) => {
    const chunks: Array<Buffer> = []
    request.on("data", (chunk: Buffer) => chunks.push(chunk))
    request.on("end", () => {
      const headers: Record<string, string> = {}
      for (const [name, value] of Object.entries(request.headers)) {
        if (typeof value === "string") headers[name] = value
        else if (Array.isArray(value)) headers[name] = value.join(", ")
      }
      const received: ReceivedRequest = {
        method: request.method ?? "",
        path: request.url ?? "",
        headers,
        body: Buffer.concat(chunks).toString("utf8"),
        at: Date.now()
      }
      requests.push(received)
      response.once("close", () => {
        if (!response.writableEnded) closedByClient.push(received)
      })
      const next = script[0]
      if (next !== undefined) {
        const left = (next.times ?? 1) - 1
        if (left <= 0) script.shift()
        else script[0] = { ...next, times: left }
      }
      const answer = next ?? {}
      const send = () => {
        if (response.destroyed) return
        response.writeHead(answer.status ?? 200, {
          "content-type": "application/json",
          ...(answer.location === undefined ? {} : { location: answer.location })
        })
        response.end(answer.body ?? "{}")
      }
      const answerNow = () => {
        if (answer.delayMs === undefined) send()
        else setTimeout(send, answer.delayMs)
      }
      if (answer.hold === true) held.push(answerNow)
      else answerNow()
    })
  })
  server.on("connection", (socket) => {
    sockets.add(socket)
    socket.on("close", () => sockets.delete(socket))
  })
  const port = yield* Effect.acquireRelease(
    Effect.callback<number>((resume) => {
      server.listen(0, "127.0.0.1", () => resume(Effect.succeed((server.address() as { port: number }).port)))
    }),
    () =>
      Effect.callback<void>((resume) => {
        for (const socket of sockets) socket.destroy()
        server.close(() => resume(Effect.void))
      })
  )
  return {
    port,
    url: (path = "/hook") => `http://127.0.0.1:${port}${path}`,
    get requests() {
      return requests
    },
    script: (...answers) => {
      script = [...script, ...answers]
    },
    reset: () => {
      requests.length = 0
      closedByClient.length = 0
      script = []
    },
    releaseHeld: () => {
      const release = held
      held = []
      for (const answer of release) answer()
    },
    get closedByClient() {
      return closedByClient
    }
  } satisfies FakeReceiver as FakeReceiver
})
