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

/** POSTs `body()` to `url` at `rate` per second for `seconds`; latencies in ms. */
export const openLoop = (options: {
  readonly url: string
  readonly headers: Record<string, string>
  readonly body: () => string
  readonly rate: number
  readonly seconds: number
}): Promise<OpenLoopResult> => {
  const agent = new Http.Agent({ keepAlive: true, maxSockets: 256 })
  const url = new URL(options.url)
  const latencies: Array<number> = []
  let failed = 0
  let sent = 0
  const total = Math.round(options.rate * options.seconds)
  const interval = 1000 / options.rate
  const one = () =>
    new Promise<void>((resolve) => {
      const body = options.body()
      const startedAt = performance.now()
      const request = Http.request(
        {
          agent,
          host: url.hostname,
          port: url.port,
          path: url.pathname,
          method: "POST",
          headers: { ...options.headers, "content-type": "application/json", "content-length": Buffer.byteLength(body) }
        },
        (response) => {
          response.resume()
          response.on("end", () => {
            if (response.statusCode !== undefined && response.statusCode < 300)
              latencies.push(performance.now() - startedAt)
            else failed++
            resolve()
          })
        }
      )
      request.on("error", () => {
        failed++
        resolve()
      })
      request.end(body)
    })
  return new Promise((resolve) => {
    const pending: Array<Promise<void>> = []
    const begin = performance.now()
    const tick = () => {
      // Every request due by now starts now: a late timer does not lower the rate.
      const due = Math.min(total, Math.floor((performance.now() - begin) / interval) + 1)
      while (sent < due) {
        sent++
        pending.push(one())
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
