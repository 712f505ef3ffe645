import * as Stream from "effect/Stream"
import * as HttpServerResponse from "effect/http/HttpServerResponse"

// The one writer of text/event-stream responses: a run's event log
// (Http/Management.ts) and a streamed chat (Agents/Http.ts). The typed
// client reads them with the schemas of Domain/EventStream.ts.

/** One event: its name, its data (sent as JSON) and, for an event a client may resume after, its id. */
export interface ServerSentEvent {
  readonly id?: string | undefined
  readonly event: string
  readonly data: unknown
}

const encoder = new TextEncoder()

/**
 * The event's lines and the blank line that ends it. JSON text never holds
 * a line break (JSON.stringify escapes those inside strings), so the data is
 * always one `data:` line.
 */
export const encode = (event: ServerSentEvent): Uint8Array =>
  encoder.encode(
    `${event.id === undefined ? "" : `id: ${event.id}\n`}event: ${event.event}\ndata: ${JSON.stringify(event.data)}\n\n`
  )

/** The events as a streamed response, each written as it comes; proxies are asked not to cache or buffer them. */
export const response = (events: Stream.Stream<ServerSentEvent>): HttpServerResponse.HttpServerResponse =>
  HttpServerResponse.stream(Stream.map(events, encode), {
    contentType: "text/event-stream",
    headers: { "cache-control": "no-cache", "x-accel-buffering": "no" }
  })
