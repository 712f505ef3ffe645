import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as HttpRouter from "effect/http/HttpRouter"
import * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as HttpServerRespondable from "effect/http/HttpServerRespondable"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as PrometheusMetrics from "effect/observability/PrometheusMetrics"
import ipaddr from "ipaddr.js"
import * as Crypto from "node:crypto"
import { AppConfig } from "../Config.ts"
import { Forbidden, Unauthorized } from "../Domain/Problems.ts"

// Digests have one length whatever the inputs, so the comparison leaks neither the token nor its length.
const digest = (value: string) => Crypto.createHash("sha256").update(value).digest()

const bearerToken = (authorization: string | undefined): string | undefined => {
  const match = authorization === undefined ? null : /^Bearer\s+(\S+)\s*$/i.exec(authorization)
  return match === null ? undefined : match[1]
}

/** 127.0.0.0/8, ::1 and their IPv4-mapped forms; anything else (or nothing) is not. */
export const isLoopback = (address: string): boolean => {
  const plain = address
    .trim()
    .replace(/^\[(.*)\]$/, "$1")
    .replace(/%.*$/, "")
  if (!ipaddr.isValid(plain)) return false
  return ipaddr.process(plain).range() === "loopback"
}

// A proxy on the same host connects from loopback; these headers say it forwarded someone else's request.
const forwardingHeaders = ["forwarded", "x-forwarded-for", "x-real-ip"] as const

/**
 * Without METRICS_TOKEN, a scrape is answered only when it comes straight from
 * this host: the connected peer is a loopback address and no proxy says it
 * forwarded the request.
 */
export const isLocalScrape = (
  peerAddress: Option.Option<string>,
  headers: Readonly<Record<string, string | undefined>>
) =>
  Option.isSome(peerAddress) &&
  isLoopback(peerAddress.value) &&
  forwardingHeaders.every((name) => headers[name] === undefined)

/**
 * GET /metrics in the Prometheus text format. With METRICS_TOKEN set, a scrape
 * must send `Authorization: Bearer <token>` (401 problem otherwise); without
 * it, only local scrapes are answered (403 problem otherwise), so a node never
 * serves its metrics to the network unless an operator chose a token.
 */
export const layer = Layer.effectDiscard(
  Effect.gen(function* () {
    const router = yield* HttpRouter.HttpRouter
    const config = yield* AppConfig
    const expected = Option.map(config.metricsToken, (token) => digest(Redacted.value(token)))

    const handler = Effect.gen(function* () {
      const request = yield* HttpServerRequest.HttpServerRequest
      if (Option.isSome(expected)) {
        const sent = bearerToken(request.headers.authorization)
        if (sent === undefined || !Crypto.timingSafeEqual(digest(sent), expected.value)) {
          const refused = yield* HttpServerRespondable.toResponse(
            new Unauthorized({ detail: "Send the metrics token (METRICS_TOKEN) as Authorization: Bearer <token>" })
          )
          return HttpServerResponse.setHeader(refused, "www-authenticate", "Bearer")
        }
      } else if (!isLocalScrape(request.peerAddress, request.headers)) {
        return yield* HttpServerRespondable.toResponse(
          new Forbidden({
            detail:
              "Without METRICS_TOKEN, /metrics answers only requests from this host (loopback, not forwarded by a proxy); " +
              "set METRICS_TOKEN and send it as Authorization: Bearer <token>"
          })
        )
      }
      const body = yield* PrometheusMetrics.format()
      return HttpServerResponse.text(body, { contentType: "text/plain; version=0.0.4; charset=utf-8" })
    })

    yield* router.add("GET", "/metrics", handler)
  })
)
