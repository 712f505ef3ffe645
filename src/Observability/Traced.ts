import * as Effect from "effect/Effect"
import type * as Tracer from "effect/Tracer"

// Whether spans are exported: set while Observability.TracingLayer exports
// them (OTEL_EXPORTER_OTLP_ENDPOINT), for the whole process.
let exporting = false

/** Spans are exported from now until the returned function is called. */
export const startExporting = () => {
  exporting = true
  return () => {
    exporting = false
  }
}

/** Whether spans are exported now: code that makes its own spans asks before making them. */
export const isExporting = () => exporting

const generatorFunction = Object.getPrototypeOf(function* () {}).constructor

// `Effect.fnUntraced` takes only generator functions; another body keeps `Effect.fn`.
const either = (traced: Function, untraced: () => Function, body: unknown) =>
  !(body instanceof generatorFunction) ? traced : eitherOf(traced, untraced(), (body as Function).length)

const eitherOf = (traced: Function, untraced: Function, length: number) =>
  Object.defineProperty(
    function (this: unknown, ...args: Array<unknown>) {
      return (exporting ? traced : untraced).apply(this, args)
    },
    "length",
    { value: length, configurable: true }
  )

/**
 * `Effect.fn`, for the functions of the request and run paths: while spans
 * are exported, each call is a span named as given, with its call site as
 * `Effect.fn` records it; otherwise it runs as `Effect.fnUntraced`, without
 * either. `Effect.fn` captures a stack trace on every call (a JavaScript
 * error made and thrown away) even when nothing is traced, a visible share of
 * a cached list request's CPU time.
 */
export const fn: typeof Effect.fn = ((...args: Array<any>): any => {
  if (typeof args[0] === "string") {
    const [name, options] = args
    return (body: any, ...pipeables: Array<any>) =>
      either(
        (Effect.fn(name, options) as any)(body, ...pipeables),
        () => (Effect.fnUntraced as any)(body, ...pipeables),
        body
      )
  }
  const [body, ...pipeables] = args
  return either((Effect.fn as any)(body, ...pipeables), () => (Effect.fnUntraced as any)(body, ...pipeables), body)
}) as typeof Effect.fn

/**
 * `Effect.withSpan(name, options)`, decided when the effect runs: a span only
 * while spans are exported, else the effect as it is. `Effect.withSpan`
 * captures a stack trace each time it is applied, and it is applied on every
 * call of the repositories' functions.
 */
export const withSpan =
  (name: string, options?: Tracer.SpanOptions) =>
  <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E, Exclude<R, Tracer.ParentSpan>> =>
    Effect.suspend(() =>
      exporting ? Effect.withSpan(self, name, options) : (self as Effect.Effect<A, E, Exclude<R, Tracer.ParentSpan>>)
    )
