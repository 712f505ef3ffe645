import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import * as References from "effect/References"
import * as Tracer from "effect/Tracer"
import * as OtlpSerialization from "effect/observability/OtlpSerialization"
import * as OtlpTracer from "effect/observability/OtlpTracer"
import * as Os from "node:os"
import { AppConfig, type AppSettings } from "../Config.ts"
import * as OutgoingHttp from "../Http/OutgoingHttp.ts"
import * as Traced from "./Traced.ts"

/**
 * Structured JSON log lines, each naming the node that wrote it and, when
 * there is one, the trace and span of the work that wrote it, so a line can
 * be found from a trace and back.
 */
export const jsonFormat = (node: string) =>
  Logger.make((options) => {
    // A fresh object each time: `node` is added to it rather than copied with it.
    const line: Record<string, unknown> = Logger.formatStructured.log(options)
    line.node = node
    const span = Context.getOrUndefined(options.fiber.context, Tracer.ParentSpan)
    if (span !== undefined) {
      line.traceId = span.traceId
      line.spanId = span.spanId
    }
    return JSON.stringify(line)
  })

/** The name of this node in logs and traces: its runner address, or its host name on a single node. */
export const nodeName = (config: AppSettings) =>
  Option.match(config.runnerAddress, {
    onSome: (address) => `${address.host}:${address.port}`,
    onNone: () => Os.hostname()
  })

/**
 * JSON lines on stdout, written in batches: one write per window instead of
 * one per line keeps logging off the request path. What is buffered is
 * flushed when the process stops.
 */
export const LoggerLayer = Layer.unwrap(
  Effect.map(AppConfig, (config) =>
    Layer.merge(
      Logger.layer([
        Logger.batched(jsonFormat(nodeName(config)), {
          window: "50 millis",
          flush: (lines) => Effect.sync(() => void process.stdout.write(`${lines.join("\n")}\n`))
        })
      ]),
      Layer.succeed(References.MinimumLogLevel, config.logLevel)
    )
  )
)

/**
 * Traces over OTLP/HTTP (JSON) to OTEL_EXPORTER_OTLP_ENDPOINT, with
 * OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES as the resource; without an
 * endpoint the built-in tracer stays and nothing is exported.
 */
export const TracingLayer = Layer.unwrap(
  Effect.gen(function* () {
    const config = yield* AppConfig
    if (Option.isNone(config.otelEndpoint)) return Layer.succeed(References.TracerEnabled, false)
    const base = config.otelEndpoint.value.replace(/\/+$/, "")
    return OtlpTracer.layer({
      url: `${base}/v1/traces`,
      resource: {
        serviceName: config.otelServiceName,
        serviceVersion: "0.1.0",
        attributes: { "service.instance.id": nodeName(config) }
      },
      exportInterval: "1 second"
    }).pipe(
      Layer.provide([OtlpSerialization.layerJson, OutgoingHttp.layer]),
      // The functions made with Traced.fn make spans (and record their call sites) while this layer is in use.
      Layer.merge(
        Layer.effectDiscard(Effect.acquireRelease(Effect.sync(Traced.startExporting), (stop) => Effect.sync(stop)))
      )
    )
  })
)

// Latency buckets in seconds, from a cache hit to a slow model call.
const latencyBoundaries = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30]

/**
 * A metric with labels, as one metric per set of label values, each made at
 * its first use and kept. effect keys a metric's series by its attributes,
 * and caches that key only for the attributes of the last update: updates
 * that go from one series of a metric to another (a model call's input and
 * then output tokens, executions of one status then another) each made the
 * key again (the JSON of the sorted attributes) and merged the attributes.
 * A series made once keeps its own key. The registry holds the same series
 * either way. Label values come from bounded sets (statuses, route
 * templates, configured models).
 */
export const labelled = <const Names extends readonly [string, ...Array<string>], M>(
  names: Names,
  make: (attributes: { readonly [K in Names[number]]: string }) => M
): ((...values: { readonly [I in keyof Names]: string }) => M) => {
  const root = new Map<string, unknown>()
  return (...values) => {
    let level = root
    for (let i = 0; i < values.length - 1; i++) {
      let next = level.get(values[i]!) as Map<string, unknown> | undefined
      if (next === undefined) level.set(values[i]!, (next = new Map()))
      level = next
    }
    const last = values[values.length - 1]!
    let found = level.get(last) as M | undefined
    if (found === undefined) {
      const attributes = Object.fromEntries(names.map((name, i) => [name, values[i]!]))
      level.set(last, (found = make(attributes as { readonly [K in Names[number]]: string })))
    }
    return found
  }
}

/** Metrics served at GET /metrics; those with labels are functions of their values. */
export const Metrics = {
  httpRequests: labelled(["method", "route", "status"], (attributes) =>
    Metric.counter("http_requests_total", {
      description: "HTTP requests answered, by method, route template and status",
      incremental: true,
      attributes
    })
  ),
  httpDuration: labelled(["method", "route", "status"], (attributes) =>
    Metric.histogram("http_request_duration_seconds", {
      description: "Time to answer an HTTP request, by method, route template and status",
      boundaries: latencyBoundaries,
      attributes
    })
  ),
  executions: labelled(["status"], (attributes) =>
    Metric.counter("executions_total", {
      description: "Executions that reached a status, by status",
      incremental: true,
      attributes
    })
  ),
  teamRuns: labelled(["status"], (attributes) =>
    Metric.counter("team_runs_total", {
      description: "Team runs that reached a final status, by status",
      incremental: true,
      attributes
    })
  ),
  workflowsInFlight: Metric.gauge("workflows_in_flight", {
    description: "Workflows (executions, team runs) running on this node"
  }),
  modelTokens: labelled(["model", "direction"], (attributes) =>
    Metric.counter("model_tokens_total", {
      description: "Tokens sent to and received from models, by model and direction",
      incremental: true,
      attributes
    })
  ),
  workflowStartLookups: labelled(["source"], (attributes) =>
    Metric.counter("workflow_start_lookups_total", {
      description:
        "Interrupt lookups of workflows starting on this node, answered from the read of their start (prefetched) or by a query of their own (database)",
      incremental: true,
      attributes
    })
  ),
  workflowStarts: labelled(["workflow", "stored"], (attributes) =>
    Metric.counter("workflow_starts_total", {
      description:
        "Runs this node accepted (executions, team runs, ingestions), by workflow and how its start was stored: with the run's row (this node's shard) or by the cluster's client",
      incremental: true,
      attributes
    })
  ),
  memoryReductions: Metric.counter("memory_reductions_total", {
    description: "Full collections run by the memory reducer when the node went quiet after a burst",
    incremental: true
  }),
  modelDuration: labelled(["model", "outcome"], (attributes) =>
    Metric.histogram("model_request_duration_seconds", {
      description: "Duration of model calls, retries included, by model and outcome",
      boundaries: latencyBoundaries,
      attributes
    })
  ),
  toolCalls: labelled(["kind", "outcome"], (attributes) =>
    Metric.counter("tool_calls_total", {
      description: "Tool calls made by agents, by tool kind (http, knowledge, agent) and outcome (ok, error)",
      incremental: true,
      attributes
    })
  ),
  toolDuration: labelled(["kind", "outcome"], (attributes) =>
    Metric.histogram("tool_call_duration_seconds", {
      description: "Duration of tool calls, by tool kind and outcome",
      boundaries: latencyBoundaries,
      attributes
    })
  )
} as const
