// An open-loop load: requests start at a fixed rate whatever the answers do,
// so latency is measured without the queueing a closed loop hides. Times are
// taken with performance.now() (microseconds), not autocannon's whole
// milliseconds, since the figures compared are a few milliseconds apart.
import * as Http from "node:http"

export interface OpenLoopResult {
  readonly sent: number
  readonly ok: number
  readonly failed: number
  readonly p50: number
  readonly p99: number
  readonly max: number
}

export const percentile = (sorted: ReadonlyArray<number>, p: number) =>
  sorted.length === 0 ? NaN : sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!

/** One request and its answer, read whole; undefined when it could not be made. */
export const send = (
  agent: Http.Agent,
  url: URL,
  options: { readonly method: string; readonly headers: Record<string, string>; readonly body?: string }
) =>
  new Promise<{ readonly status: number; readonly body: string } | undefined>((resolve) => {
    const request = Http.request(
      {
        agent,
        host: url.hostname,
        port: url.port,
        path: url.pathname,
        method: options.method,
        headers:
          options.body === undefined
            ? options.headers
            : {
                ...options.headers,
                "content-type": "application/json",
                "content-length": Buffer.byteLength(options.body)
              }
      },
      (response) => {
        const chunks: Array<Buffer> = []
        response.on("data", (chunk: Buffer) => chunks.push(chunk))
        response.on("end", () =>
          resolve({ status: response.statusCode ?? 0, body: Buffer.concat(chunks).toString("utf8") })
        )
      }
    )
    request.on("error", () => resolve(undefined))
    request.end(options.body)
  })

/**
 * Starts `one` at `rate` per second for `seconds`, each timed from its start
 * to its end (in ms); `one` resolves whether it went well. It gets an agent
 * with keep-alive connections, shared by all.
 */
export const pacedLoop = (options: {
  readonly rate: number
  readonly seconds: number
  readonly one: (agent: Http.Agent) => Promise<boolean>
}): Promise<OpenLoopResult> => {
  const agent = new Http.Agent({ keepAlive: true, maxSockets: 256 })
  const latencies: Array<number> = []
  let failed = 0
  let sent = 0
  const total = Math.round(options.rate * options.seconds)
  const interval = 1000 / options.rate
  const timed = async () => {
    const startedAt = performance.now()
    const ok = await options.one(agent).catch(() => false)
    if (ok) latencies.push(performance.now() - startedAt)
    else failed++
  }
  return new Promise((resolve) => {
    const pending: Array<Promise<void>> = []
    const begin = performance.now()
    const tick = () => {
      // Every request due by now starts now: a late timer does not lower the rate.
      const due = Math.min(total, Math.floor((performance.now() - begin) / interval) + 1)
      while (sent < due) {
        sent++
        pending.push(timed())
      }
      if (sent < total) setTimeout(tick, Math.max(0, begin + sent * interval - performance.now()))
      else {
        void Promise.all(pending).then(() => {
          agent.destroy()
          const sorted = latencies.sort((a, b) => a - b)
          resolve({
            sent,
            ok: sorted.length,
            failed,
            p50: percentile(sorted, 50),
            p99: percentile(sorted, 99),
            max: sorted[sorted.length - 1] ?? NaN
          })
        })
      }
    }
    tick()
  })
}

/** POSTs `body()` to `url` at `rate` per second for `seconds`; latencies in ms. */
export const openLoop = (options: {
  readonly url: string
  readonly headers: Record<string, string>
  readonly body: () => string
  readonly rate: number
  readonly seconds: number
}): Promise<OpenLoopResult> => {
  const url = new URL(options.url)
  return pacedLoop({
    rate: options.rate,
    seconds: options.seconds,
    one: (agent) =>
      send(agent, url, { method: "POST", headers: options.headers, body: options.body() }).then(
        (answer) => answer !== undefined && answer.status < 300
      )
  })
}
