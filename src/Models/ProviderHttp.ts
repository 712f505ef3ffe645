import * as DateTime from "effect/DateTime"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Result from "effect/Result"
import * as Stream from "effect/Stream"
import * as AiError from "effect/ai/AiError"
import * as Sse from "effect/encoding/Sse"
import * as Headers from "effect/http/Headers"
import type * as HttpClient from "effect/http/HttpClient"
import type * as HttpClientError from "effect/http/HttpClientError"
import * as HttpClientRequest from "effect/http/HttpClientRequest"
import type * as HttpClientResponse from "effect/http/HttpClientResponse"

/**
 * The HTTP plumbing the provider adapters share: one JSON POST with errors
 * turned into `AiError`s that keep the status, the retry headers and the
 * provider's body, and an SSE reader.
 */

// Only what retry decisions and a support ticket need is kept from the
// provider's response headers.
const keptHeaders = ["retry-after", "retry-after-ms", "request-id", "x-request-id"]

// Enough of an error body to find its message; providers' error bodies are small.
const maxErrorBody = 8_192

/**
 * The human-readable message in a provider's error body. OpenAI and Anthropic
 * both use `{ error: { message } }`; OpenAI-compatible servers sometimes send
 * `{ error: "..." }`, `{ message }` or `{ detail }`.
 */
export const providerMessage = (body: string | undefined): string | undefined => {
  if (body === undefined || body === "") return undefined
  let json: any
  try {
    json = JSON.parse(body)
  } catch {
    return undefined
  }
  const candidates = [json?.error?.message, json?.error, json?.message, json?.detail]
  const found = candidates.find((value) => typeof value === "string" && value.trim() !== "")
  return found as string | undefined
}

/** The wait a provider asked for, from `retry-after-ms` (OpenAI) or `Retry-After` (seconds or HTTP date). */
export const retryAfterOf = (
  headers: Readonly<Record<string, unknown>> | undefined,
  nowMillis: number
): Duration.Duration | undefined => {
  const millis = headers?.["retry-after-ms"]
  if (typeof millis === "string" && /^\d+(\.\d+)?$/.test(millis.trim())) {
    return Duration.millis(Number(millis.trim()))
  }
  const value = headers?.["retry-after"]
  if (typeof value !== "string") return undefined
  const parsed = Headers.parseRetryAfter(value)
  if (Result.isFailure(parsed)) return undefined
  const retryAfter = parsed.success
  return retryAfter._tag === "Duration"
    ? retryAfter.duration
    : Duration.millis(Math.max(0, DateTime.toEpochMillis(retryAfter.dateTime) - nowMillis))
}

const failure = (module: string, method: string, reason: AiError.AiErrorReason) =>
  AiError.make({ module, method, reason })

// A connection that fails while the body is read is as transient as one that
// fails before the status line, so both become TransportErrors.
const fromClientError = (module: string, method: string) => (error: HttpClientError.HttpClientError) => {
  switch (error.reason._tag) {
    case "TransportError":
    case "EncodeError":
    case "InvalidUrlError":
      return failure(module, method, AiError.NetworkError.fromHttpClientError(error as any))
    default:
      return failure(
        module,
        method,
        new AiError.NetworkError({
          reason: "TransportError",
          method: error.request.method,
          url: error.request.url,
          description: "The connection failed while the response was read"
        })
      )
  }
}

/** The stream stopped before the provider's end-of-stream marker: the connection was cut. */
export const streamCut = (module: string, method: string, url: string) =>
  failure(
    module,
    method,
    new AiError.NetworkError({ reason: "TransportError", method: "POST", url, description: "The stream ended early" })
  )

const statusFailure = Effect.fnUntraced(function* (
  module: string,
  method: string,
  response: HttpClientResponse.HttpClientResponse
) {
  const body = yield* response.text.pipe(
    Effect.map((text) => text.slice(0, maxErrorBody)),
    Effect.orElseSucceed(() => "")
  )
  const headers: Record<string, string> = {}
  for (const name of keptHeaders) {
    const value = response.headers[name]
    if (typeof value === "string") headers[name] = value
  }
  const http = { response: { status: response.status, headers }, body }
  const description = providerMessage(body)
  if (response.status === 429) {
    const retryAfter = retryAfterOf(headers, Date.now())
    return failure(
      module,
      method,
      new AiError.RateLimitError({ http, ...(retryAfter === undefined ? {} : { retryAfter }) })
    )
  }
  return failure(module, method, AiError.reasonFromHttpStatus({ status: response.status, http, description }))
})

/**
 * POSTs `body` as JSON and returns the response when its status is 2xx.
 * Anything else fails with an `AiError` whose reason carries the status, the
 * retry headers and the error body; connection failures are `NetworkError`s.
 * The request carries the W3C `traceparent` of the current span, so a
 * self-hosted model server or gateway can join the trace.
 */
export const postJson = (options: {
  readonly client: HttpClient.HttpClient
  readonly module: string
  readonly method: string
  readonly url: string
  readonly headers: Record<string, string>
  readonly body: unknown
}): Effect.Effect<HttpClientResponse.HttpClientResponse, AiError.AiError> =>
  options.client
    .execute(
      HttpClientRequest.post(options.url).pipe(
        HttpClientRequest.setHeaders(options.headers),
        HttpClientRequest.bodyJsonUnsafe(options.body)
      )
    )
    .pipe(
      Effect.mapError(fromClientError(options.module, options.method)),
      Effect.flatMap((response) =>
        response.status >= 200 && response.status < 300
          ? Effect.succeed(response)
          : Effect.flatMap(statusFailure(options.module, options.method, response), Effect.fail)
      )
    )

/** The JSON body of a 2xx response. */
export const readJson = (module: string, method: string) => (response: HttpClientResponse.HttpClientResponse) =>
  response.json.pipe(Effect.mapError(fromClientError(module, method)))

/** A body that is not what the provider's format promises. */
export const invalidResponse = (module: string, method: string, description: string) =>
  failure(module, method, new AiError.InvalidResponseError({ description }))

/** One event of an SSE body: its `event:` name and `data:` payload. */
export interface SseEvent {
  readonly event: string
  readonly data: string
}

/**
 * The `data:` payloads of an SSE response body, with the `event:` name.
 * Reconnection is not supported, so `retry:` directives and ids are ignored.
 */
export const sseEvents = (
  module: string,
  method: string,
  response: HttpClientResponse.HttpClientResponse
): Stream.Stream<SseEvent, AiError.AiError> =>
  Stream.suspend(() => {
    const events: Array<SseEvent> = []
    const parser = Sse.makeParser((event) => {
      if (event._tag === "Event") events.push({ event: event.event, data: event.data })
    })
    return response.stream.pipe(
      Stream.mapError(fromClientError(module, method)),
      Stream.decodeText(),
      Stream.flatMap((chunk) => {
        const error = parser.feed(chunk)
        const parsed = Stream.fromIterable(events.splice(0))
        return error === undefined
          ? parsed
          : Stream.concat(parsed, Stream.fail(invalidResponse(module, method, "An SSE event was too large")))
      })
    )
  })

/** Parses one JSON payload of a stream. */
export const parseJson = (module: string, method: string, data: string): Effect.Effect<any, AiError.AiError> =>
  Effect.try({
    try: () => JSON.parse(data),
    catch: () => invalidResponse(module, method, "A stream event was not JSON")
  })
