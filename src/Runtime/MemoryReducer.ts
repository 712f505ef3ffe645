import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Metric from "effect/Metric"
import * as Schedule from "effect/Schedule"
import { performance } from "node:perf_hooks"
import * as V8 from "node:v8"
import * as Vm from "node:vm"
import { AppConfig } from "../Config.ts"
import { Metrics } from "../Observability/Observability.ts"

// Gives memory back to the OS once the node goes quiet after a burst.
//
// V8 keeps the pages a burst made its heap commit: freed pages go to a pool it
// reuses, and its own memory reducer, which would release them, only acts when
// the allocation rate stays below about 1 MB/s, which the node's background
// loops (the cluster's polls and lock refreshes) never go below. So RSS after
// a burst of executions stayed at its peak for as long as the node ran. Here,
// once the event loop has been busy less than `quietUtilization` of the time
// over the last `quietFor` (a short spike within it does not start the wait
// over), and RSS has grown by `growthBytes` since the last reduction
// (or since start), one full collection is run in the mode V8 keeps for memory
// pressure: it compacts the heap, shrinks the young generation and returns
// free and pooled pages to the OS. It pauses the event loop (from about 50 ms
// with 30 MB of live objects to several hundred with 200 MB), so it waits for
// a quiet that lasts: the default `quietFor` is longer than the 2 s a
// finished workflow's entity stays in memory (Cluster.ts), so what a burst of
// runs held is garbage by then.

export interface Options {
  /** Time between checks. */
  readonly interval: Duration.Input
  /** Below this share of busy event loop time since the last check, the node is quiet. */
  readonly quietUtilization: number
  /** How long the node must have been quiet. */
  readonly quietFor: Duration.Input
  /** RSS growth since the last reduction that makes one worth its pause. */
  readonly growthBytes: number
}

export const defaults: Options = {
  interval: Duration.seconds(2),
  quietUtilization: 0.1,
  quietFor: Duration.seconds(12),
  growthBytes: 32 * 1024 * 1024
}

/** V8's collector with its options (as `--expose-gc` gives it), taken without exposing it globally. */
const collector = (): ((options: { type: "major"; execution: "sync"; flavor: "last-resort" }) => void) => {
  V8.setFlagsFromString("--expose-gc")
  try {
    return Vm.runInNewContext("gc")
  } finally {
    V8.setFlagsFromString("--no-expose-gc")
  }
}

export interface Reduction {
  readonly rssBefore: number
  readonly rssAfter: number
  readonly millis: number
}

/** One reduction now. */
export const reduceNow = (): Reduction => {
  const rssBefore = process.memoryUsage.rss()
  const startedAt = performance.now()
  collector()({ type: "major", execution: "sync", flavor: "last-resort" })
  return { rssBefore, rssAfter: process.memoryUsage.rss(), millis: performance.now() - startedAt }
}

/**
 * Checks forever (fork it), calling `onReduction` after each reduction. The
 * first check after start reduces too when RSS is above `growthBytes` (or
 * `baseline`, the RSS of a reduction made just before), so a quiet node also
 * drops what its start-up left.
 */
export const run = (
  options: Options,
  onReduction: (reduction: Reduction) => Effect.Effect<void> = () => Effect.void,
  initialBaseline = 0
) =>
  Effect.suspend(() => {
    const gc = collector()
    const quietFor = Duration.toMillis(Duration.fromInputUnsafe(options.quietFor))
    let baseline = initialBaseline
    // The loop's utilization as read at each check, oldest first, back to the
    // newest reading at least `quietFor` old: the node is quiet when it was
    // busy less than `quietUtilization` of the time since that reading, so a
    // short spike (a burst's entities leaving memory) does not start the wait
    // over.
    type Reading = { readonly at: number; readonly elu: ReturnType<typeof performance.eventLoopUtilization> }
    let readings: Array<Reading> = [{ at: performance.now(), elu: performance.eventLoopUtilization() }]
    const check = Effect.suspend(() => {
      const at = performance.now()
      const elu = performance.eventLoopUtilization()
      readings.push({ at, elu })
      let first = -1
      for (let i = readings.length - 1; i >= 0; i--) {
        if (at - readings[i]!.at >= quietFor) {
          first = i
          break
        }
      }
      if (first < 0) return Effect.void
      if (first > 0) readings = readings.slice(first)
      const busy = performance.eventLoopUtilization(elu, readings[0]!.elu).utilization
      const rss = process.memoryUsage.rss()
      if (busy >= options.quietUtilization || rss < baseline + options.growthBytes) return Effect.void
      const startedAt = performance.now()
      gc({ type: "major", execution: "sync", flavor: "last-resort" })
      const reduction = { rssBefore: rss, rssAfter: process.memoryUsage.rss(), millis: performance.now() - startedAt }
      baseline = reduction.rssAfter
      // The collection's own pause is not counted as busy time: the wait starts over after it.
      readings = [{ at: performance.now(), elu: performance.eventLoopUtilization() }]
      return onReduction(reduction)
    })
    return check.pipe(Effect.repeat(Schedule.spaced(options.interval)), Effect.asVoid)
  })

const megabytes = (bytes: number) => Math.round(bytes / 1024 / 1024)

const logReduction = (message: string) => (reduction: Reduction) =>
  Effect.logInfo(message).pipe(
    Effect.annotateLogs({
      rssBeforeMb: megabytes(reduction.rssBefore),
      rssAfterMb: megabytes(reduction.rssAfter),
      pauseMs: Math.round(reduction.millis)
    }),
    Effect.andThen(Metric.update(Metrics.memoryReductions, 1))
  )

/**
 * Unless MEMORY_REDUCER=false: one reduction when built, for what start-up
 * left (module loading, migrations, the layers), then the reducer with the
 * default thresholds. Built before the server listens (Server.ts), so a node
 * is ready with that memory given back, for a pause of about 100 ms.
 */
export const layer = Layer.effectDiscard(
  Effect.gen(function* () {
    const config = yield* AppConfig
    if (!config.memoryReducer) return
    const startup = reduceNow()
    yield* logReduction("Start-up memory given back to the OS")(startup)
    yield* Effect.forkScoped(run(defaults, logReduction("Memory given back to the OS"), startup.rssAfter))
  })
)
