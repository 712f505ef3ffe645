import * as ByteSize from "effect/ByteSize"
import type * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Metric from "effect/Metric"
import * as FindMyWay from "effect/http/FindMyWay"
import * as HttpMiddleware from "effect/http/HttpMiddleware"
import * as HttpIncomingMessage from "effect/http/HttpIncomingMessage"
import * as HttpRouter from "effect/http/HttpRouter"
import * as HttpServerError from "effect/http/HttpServerError"
import * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as Multipart from "effect/http/Multipart"
import * as ProblemDetails from "effect/http/ProblemDetails"
import * as Crypto from "node:crypto"
import { type Server, STATUS_CODES } from "node:http"
import type { unhandled } from "effect/Types"
import { AppConfig } from "../Config.ts"
import { findSqlError, isDataException, isUnavailable } from "../Database/Errors.ts"
import { Metrics } from "../Observability/Observability.ts"

const requestIdHeader = "x-request-id"
const acceptedRequestId = /^[A-Za-z0-9._:-]{1,128}$/
const methods = ["GET", "POST", "PUT", "PATCH", "DELETE"] as const

/** The part of an HttpApi the pipeline reads: its routes. */
interface RouteTable {
  readonly groups: Record<
    string,
    { readonly endpoints: Record<string, { readonly method: string; readonly path: string }> }
  >
}

/**
 * The route table as a matcher: the template a request matched (for metrics
 * and spans, never the raw path with its ids), and for a path that exists
 * under other methods, the methods it has (for 405 and `Allow`).
 */
/** The URL's path, without its query. */
const pathOf = (url: string) => {
  const query = url.indexOf("?")
  return query < 0 ? url : url.slice(0, query)
}

const makeRouteMatcher = (api: RouteTable, extraRoutes: ReadonlyArray<readonly [string, string]>) => {
  const router = FindMyWay.make<string>()
  for (const group of Object.values(api.groups)) {
    for (const endpoint of Object.values(group.endpoints)) {
      router.on(endpoint.method, endpoint.path as FindMyWay.PathInput, endpoint.path)
    }
  }
  for (const [method, path] of extraRoutes) router.on(method, path as FindMyWay.PathInput, path)
  return {
    allowedMethods: (url: string): ReadonlyArray<string> =>
      methods.filter((method) => router.find(method, url) !== undefined),
    template: (method: string, url: string): string => router.find(method, url)?.handler ?? unmatched
  }
}

// The route label of a request no route matched.
const unmatched = "unmatched"

// The methods OpenTelemetry's HTTP conventions name a span after; any other is `HTTP`.
const knownMethods = new Set(["CONNECT", "DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT", "QUERY", "TRACE"])

/**
 * Names each request's server span `{method} {route template}`, as
 * OpenTelemetry's HTTP conventions do (`POST /api/v1/orchestrations/:id/execute`),
 * or the method alone when no route matches. effect's server makes that span
 * before any route or middleware runs, from this reference in the server's
 * own context; it names it by the method alone by default. Asked only while
 * spans are recorded.
 */
export const spanNames = (api: RouteTable, extraRoutes: ReadonlyArray<readonly [string, string]> = []) => {
  const routes = makeRouteMatcher(api, extraRoutes)
  return Layer.succeed(HttpMiddleware.SpanNameGenerator, (request) => {
    if (!knownMethods.has(request.method)) return "HTTP"
    const route = routes.template(request.method, request.url)
    return route === unmatched ? request.method : `${request.method} ${route}`
  })
}

const isRouteNotFound = (cause: Cause.Cause<unknown>) =>
  cause.reasons.some((reason) => {
    const error = reason._tag === "Fail" ? reason.error : reason._tag === "Die" ? reason.defect : undefined
    return HttpServerError.isHttpServerError(error) && error.reason._tag === "RouteNotFound"
  })

const problem = (status: number, requestId: string, detail?: string, headers?: Record<string, string>) =>
  HttpServerResponse.setHeaders(
    ProblemDetails.toResponse({
      type: "about:blank",
      title: STATUS_CODES[status] ?? "Error",
      status,
      ...(detail === undefined ? {} : { detail }),
      requestId
    }),
    headers ?? {}
  )

/**
 * A body over a limit: the problem the upload route declares
 * (Problems.PayloadTooLarge), with the limit that was passed, for every route.
 */
const tooLarge = (requestId: string, detail: string, limit: number, headers?: Record<string, string>) =>
  HttpServerResponse.setHeaders(
    ProblemDetails.toResponse({
      type: "urn:agent-host:problem:payload-too-large",
      title: "Payload Too Large",
      status: 413,
      detail,
      requestId,
      limit
    }),
    headers ?? {}
  )

/** The multipart limit a request passed, when one did (a file's bytes, or the number of parts). */
const multipartLimitPassed = (cause: Cause.Cause<unknown>) => {
  for (const reason of cause.reasons) {
    const error = reason._tag === "Fail" ? reason.error : reason._tag === "Die" ? reason.defect : undefined
    if (Multipart.isMultipartError(error)) return error.reason._tag
  }
  return undefined
}

const defaultDetails: Record<number, string> = {
  400: "The request could not be read",
  404: "No such route",
  413: "The request body is larger than the limit",
  415: "Send the body as application/json",
  500: "An unexpected error occurred; quote the requestId when reporting it",
  503: "The service is shutting down or not ready"
}

// Seconds a client should wait before trying a 503 again.
const retryAfterSeconds = "5"

/**
 * The limits of a multipart upload (MAX_UPLOAD_BYTES per file, and
 * MAX_UPLOAD_FILES), the same for every request, in the server's own
 * context. Provided to each request, they were two more layers of its
 * context, which then passed the depth at which effect copies a context
 * whole, once per request. The body limit is still provided to each request
 * (layer, below): an upload's is larger, and a value in the server's context
 * would win over it, since the routes' handlers carry that context too.
 */
export const multipartLimits = Layer.unwrap(
  Effect.map(AppConfig, (config) =>
    Layer.mergeAll(
      Layer.succeed(Multipart.MaxFileSize, ByteSize.bytes(config.maxUploadBytes)),
      Layer.succeed(Multipart.MaxParts, config.maxUploadFiles + 8)
    )
  )
)

/**
 * Wraps every request: a request id (taken from `X-Request-Id` when sane),
 * the body size limit, 405 for known paths under another method, one access
 * log line, and problem+json for every error response, including those the
 * router and the HTTP layer produce on their own. Unexpected failures are
 * logged with their cause and answered with a 500 that carries only the
 * request id. A database that cannot be reached (or a statement that timed
 * out) is a 503 with `Retry-After` wherever it surfaces, and a value
 * Postgres refuses (SQLSTATE class 22) a 400: neither is the service's bug.
 */
export const layer = (api: RouteTable, extraRoutes: ReadonlyArray<readonly [string, string]> = []) =>
  HttpRouter.middleware(
    Effect.gen(function* () {
      const config = yield* AppConfig
      const maxBodyBytes = config.maxBodyBytes
      // Knowledge uploads carry files: up to MAX_UPLOAD_BYTES of them, with
      // room for base64 in JSON (4/3) and for multipart's headers.
      const maxUploadBodyBytes = Math.max(maxBodyBytes, Math.ceil((config.maxUploadBytes * 4) / 3) + 64 * 1024)
      const uploadRoute = "/api/knowledge/:id/upload"
      const routes = makeRouteMatcher(api, extraRoutes)
      // HSTS only when the operator says it is all HTTPS; the automatic cookie rule also serves plain HTTP.
      const securityHeaders = securityHeadersFor(config.cookieSecure === true)
      // The request metrics of each route, method and status, found by the
      // route's and the method's own strings and the status as a number.
      type Series = { readonly requests: Metric.Counter<number>; readonly duration: Metric.Histogram<number> }
      const series = new Map<string, Map<string, Map<number, Series>>>()
      const seriesOf = (method: string, route: string, status: number) => {
        let byMethod = series.get(route)
        if (byMethod === undefined) series.set(route, (byMethod = new Map()))
        let byStatus = byMethod.get(method)
        if (byStatus === undefined) byMethod.set(method, (byStatus = new Map()))
        let found = byStatus.get(status)
        if (found === undefined) {
          found = {
            requests: Metrics.httpRequests(method, route, String(status)),
            duration: Metrics.httpDuration(method, route, String(status))
          }
          byStatus.set(status, found)
        }
        return found
      }
      return (
        httpEffect: Effect.Effect<HttpServerResponse.HttpServerResponse, unhandled>
      ): Effect.Effect<HttpServerResponse.HttpServerResponse, unhandled, HttpServerRequest.HttpServerRequest> =>
        Effect.gen(function* () {
          const request = yield* HttpServerRequest.HttpServerRequest
          const incomingId = request.headers[requestIdHeader]
          const requestId =
            incomingId !== undefined && acceptedRequestId.test(incomingId) ? incomingId : Crypto.randomUUID()
          const startedAt = performance.now()

          let response: HttpServerResponse.HttpServerResponse
          let failure: Cause.Cause<unknown> | undefined
          const declaredLength = Number(request.headers["content-length"] ?? 0)
          // The route template, found once: the body limit and the metrics and log use it.
          const route = routes.template(request.method, request.url)
          const bodyLimit = request.method === "POST" && route === uploadRoute ? maxUploadBodyBytes : maxBodyBytes
          if (lacksHost(request)) {
            response = problem(400, requestId, "An HTTP/1.1 request needs a Host header")
          } else if (declaredLength > bodyLimit) {
            response = tooLarge(requestId, `The request body is larger than ${bodyLimit} bytes`, bodyLimit, {
              connection: "close"
            })
          } else {
            // The multipart limits are in the server's context (multipartLimits).
            const exit = yield* httpEffect.pipe(
              Effect.provideService(HttpIncomingMessage.MaxBodySize, BigInt(bodyLimit) as never),
              Effect.annotateLogs({ requestId }),
              Effect.exit
            )
            if (exit._tag === "Failure") failure = exit.cause
            if (exit._tag === "Success") {
              response = exit.value
            } else if (isRouteNotFound(exit.cause)) {
              const allowed = routes.allowedMethods(request.url)
              response =
                allowed.length > 0
                  ? problem(405, requestId, `${request.method} is not allowed here`, { allow: allowed.join(", ") })
                  : problem(404, requestId, defaultDetails[404])
            } else {
              const sqlError = findSqlError(exit.cause)
              if (sqlError !== undefined && isUnavailable(sqlError)) {
                yield* Effect.logWarning("Database unavailable", sqlError.message).pipe(
                  Effect.annotateLogs({ requestId })
                )
                response = problem(503, requestId, "The database is unavailable; try again shortly")
              } else if (sqlError !== undefined && isDataException(sqlError)) {
                yield* Effect.logWarning("Value refused by the database", sqlError.message).pipe(
                  Effect.annotateLogs({ requestId })
                )
                response = problem(400, requestId, "A value in the request cannot be stored")
              } else {
                const [failed, cause] = yield* HttpServerError.causeResponse(exit.cause)
                response = failed
                if (failed.status >= 500 && failed.status !== 503) {
                  yield* Effect.logError("Unexpected failure", cause).pipe(Effect.annotateLogs({ requestId }))
                }
              }
            }
          }
          if (response.status === 503 && response.headers["retry-after"] === undefined) {
            response = HttpServerResponse.setHeader(response, "retry-after", retryAfterSeconds)
          }

          if (response.status === 413 && !isProblem(response)) {
            const passed = failure === undefined ? undefined : multipartLimitPassed(failure)
            response =
              passed === "FileTooLarge"
                ? tooLarge(requestId, `A file is larger than ${config.maxUploadBytes} bytes`, config.maxUploadBytes)
                : passed === "TooManyParts"
                  ? tooLarge(requestId, `More than ${config.maxUploadFiles} files`, config.maxUploadFiles)
                  : tooLarge(requestId, `The request body is larger than ${bodyLimit} bytes`, bodyLimit)
          }
          if (response.status >= 400 && !isProblem(response)) {
            response = problem(response.status, requestId, defaultDetails[response.status], bodylessHeaders(response))
          }
          const seconds = (performance.now() - startedAt) / 1000
          const series = seriesOf(request.method, route, response.status)
          yield* Metric.update(series.requests, 1)
          yield* Metric.update(series.duration, seconds)
          yield* Effect.annotateCurrentSpan(
            route === unmatched ? { "request.id": requestId } : { "http.route": route, "request.id": requestId }
          )
          yield* Effect.logInfo("request").pipe(
            Effect.annotateLogs({
              requestId,
              method: request.method,
              path: pathOf(request.url),
              route,
              status: response.status,
              durationMs: Math.round(seconds * 100_000) / 100
            })
          )
          return withFinalHeaders(response, securityHeaders, requestId)
        })
    }),
    { global: true }
  )

// Headers of a replaced response that still apply to its problem body (Allow, Connection, ...).
const bodylessHeaders = (response: HttpServerResponse.HttpServerResponse): Record<string, string> => {
  const headers: Record<string, string> = {}
  for (const [name, value] of Object.entries(response.headers)) {
    if (name !== "content-type" && name !== "content-length" && name !== "transfer-encoding") headers[name] = value
  }
  return headers
}

const isProblem = (response: HttpServerResponse.HttpServerResponse) =>
  response.body._tag === "Uint8Array" && response.body.contentType === ProblemDetails.contentType

/**
 * Headers every response carries unless its route set its own. Responses hold
 * tokens, keys and tenants' data, so nothing is cached or sniffed; nothing is
 * framed (clickjacking of the dashboard to come) or leaks its URL in a
 * Referer. HSTS only when the service says it is behind HTTPS (COOKIE_SECURE).
 */
const basePolicy = "frame-ancestors 'none'; base-uri 'none'; object-src 'none'; form-action 'self'"

const securityHeadersFor = (https: boolean): ReadonlyArray<readonly [string, string]> =>
  Object.entries({
    "x-content-type-options": "nosniff",
    "cache-control": "no-store",
    "content-security-policy": basePolicy,
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "cross-origin-opener-policy": "same-origin",
    ...(https ? { "strict-transport-security": "max-age=31536000" } : {})
  })

// An HTML <script> element: its attributes and its text, which ends at the first `</script` as in the browser.
const scriptElement = /<script(\s[^>]*)?>([\s\S]*?)<\/script[\s/>]/gi

/**
 * The Content-Security-Policy of a page we serve from effect's HTML (/docs):
 * it is on the session cookie's origin, so only its own inline scripts may
 * run, each allowed by its sha256. A script loaded by URL is not allowed: the
 * page must work offline, so it has none.
 */
export const inlineScriptPolicy = (html: string): string => {
  const hashes = new Set<string>()
  for (const [, attributes = "", text = ""] of html.matchAll(scriptElement)) {
    if (/\ssrc\s*=/i.test(attributes)) continue
    hashes.add(`'sha256-${Crypto.createHash("sha256").update(text, "utf8").digest("base64")}'`)
  }
  return `script-src ${hashes.size === 0 ? "'none'" : [...hashes].join(" ")}; ${basePolicy}`
}

/**
 * The security headers the route did not set, and the request id, added in
 * one copy of the response's headers (each copy of effect's headers makes
 * three objects).
 */
const withFinalHeaders = (
  response: HttpServerResponse.HttpServerResponse,
  securityHeaders: ReadonlyArray<readonly [string, string]>,
  requestId: string
) => {
  const added: Record<string, string> = {}
  for (const [name, value] of securityHeaders) {
    if (response.headers[name] === undefined) added[name] = value
  }
  added[requestIdHeader] = requestId
  return HttpServerResponse.setHeaders(response, added)
}

// Node's own Host check (off, see answerUnparsable) would answer with a bare 400; HTTP/1.0 needs no Host.
const lacksHost = (request: HttpServerRequest.HttpServerRequest) =>
  request.headers.host === undefined && (request.source as { readonly httpVersion?: string }).httpVersion === "1.1"

/**
 * Node answers a request it cannot parse (broken framing, a bad header line,
 * an unknown method, headers over its size limit) on its own, before the
 * pipeline ever sees it, with a bare status line. This gives those answers
 * the same problem+json body and a request id. The server must be created
 * with `requireHostHeader: false`: the pipeline answers a missing Host.
 */
export const answerUnparsable = (server: Server): Server =>
  server.on("clientError", (error: NodeJS.ErrnoException, socket) => {
    // Nothing to answer on a reset socket, and nothing more once a response has started.
    if (error.code === "ECONNRESET" || !socket.writable || (socket as { bytesWritten?: number }).bytesWritten !== 0) {
      socket.destroy()
      return
    }
    const status = error.code === "HPE_HEADER_OVERFLOW" ? 431 : error.code === "ERR_HTTP_REQUEST_TIMEOUT" ? 408 : 400
    const requestId = Crypto.randomUUID()
    const body = JSON.stringify({
      type: "about:blank",
      title: STATUS_CODES[status],
      status,
      detail:
        status === 431
          ? "The request headers are larger than the limit"
          : status === 408
            ? "The request took too long to arrive"
            : "The request is not valid HTTP",
      requestId
    })
    socket.end(
      `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\n` +
        `content-type: ${ProblemDetails.contentType}\r\n` +
        `content-length: ${Buffer.byteLength(body)}\r\n` +
        `${requestIdHeader}: ${requestId}\r\n` +
        "x-content-type-options: nosniff\r\n" +
        "cache-control: no-store\r\n" +
        "connection: close\r\n\r\n" +
        body
    )
  })
