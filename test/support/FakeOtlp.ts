import { Effect } from "effect"
import * as Http from "node:http"
import type * as Net from "node:net"

/** One span as received, with the resource (node) that sent it. */
export interface ReceivedSpan {
  readonly traceId: string
  readonly spanId: string
  readonly parentSpanId: string | undefined
  readonly name: string
  readonly kind: number
  readonly attributes: Record<string, unknown>
  readonly resource: Record<string, unknown>
  /** OTLP status code: 0 unset, 1 ok, 2 error. */
  readonly status: number
}

export interface FakeOtlp {
  /** Base URL, for OTEL_EXPORTER_OTLP_ENDPOINT. */
  readonly url: string
  readonly spans: () => ReadonlyArray<ReceivedSpan>
}

// OTLP/JSON attribute values: { stringValue } | { intValue } | { boolValue } | { doubleValue } | ...
const valueOf = (value: any): unknown =>
  value === undefined || value === null
    ? undefined
    : "stringValue" in value
      ? value.stringValue
      : "intValue" in value
        ? Number(value.intValue)
        : "doubleValue" in value
          ? value.doubleValue
          : "boolValue" in value
            ? value.boolValue
            : "arrayValue" in value
              ? (value.arrayValue.values ?? []).map(valueOf)
              : value

const attributesOf = (list: ReadonlyArray<any> | undefined): Record<string, unknown> =>
  Object.fromEntries((list ?? []).map((kv) => [kv.key, valueOf(kv.value)]))

/** An OpenTelemetry collector's OTLP/HTTP JSON trace receiver on loopback, keeping what it receives. */
export const FakeOtlp = {
  make: Effect.acquireRelease(
    Effect.promise(
      () =>
        new Promise<{ server: Http.Server; fake: FakeOtlp }>((resolve) => {
          const spans: Array<ReceivedSpan> = []
          const server = Http.createServer((request, response) => {
            let body = ""
            request.setEncoding("utf8")
            request.on("data", (chunk) => (body += chunk))
            request.on("end", () => {
              if (request.method !== "POST" || request.url !== "/v1/traces") {
                response.writeHead(404).end()
                return
              }
              try {
                const data = JSON.parse(body)
                for (const resourceSpans of data.resourceSpans ?? []) {
                  const resource = attributesOf(resourceSpans.resource?.attributes)
                  for (const scopeSpans of resourceSpans.scopeSpans ?? []) {
                    for (const span of scopeSpans.spans ?? []) {
                      spans.push({
                        traceId: span.traceId,
                        spanId: span.spanId,
                        parentSpanId: span.parentSpanId === "" ? undefined : span.parentSpanId,
                        name: span.name,
                        kind: span.kind,
                        attributes: attributesOf(span.attributes),
                        resource,
                        status: Number(span.status?.code ?? 0)
                      })
                    }
                  }
                }
                response.writeHead(200, { "content-type": "application/json" }).end("{}")
              } catch {
                response.writeHead(400).end()
              }
            })
          })
          server.listen(0, "127.0.0.1", () => {
            const port = (server.address() as Net.AddressInfo).port
            resolve({ server, fake: { url: `http://127.0.0.1:${port}`, spans: () => [...spans] } })
          })
        })
    ),
    ({ server }) => Effect.promise(() => new Promise<void>((resolve) => server.close(() => resolve())))
  ).pipe(Effect.map(({ fake }) => fake))
}
