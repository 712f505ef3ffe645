import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as HttpRouter from "effect/http/HttpRouter"
import * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as HttpServerRespondable from "effect/http/HttpServerRespondable"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as PrometheusMetrics from "effect/observability/PrometheusMetrics"
import * as Crypto from "node:crypto"
import { AppConfig } from "../Config.ts"
import { Unauthorized } from "../Domain/Problems.ts"

// Digests have one length whatever the inputs, so the comparison leaks neither the token nor its length.
const digest = (value: string) => Crypto.createHash("sha256").update(value).digest()

const bearerToken = (authorization: string | undefined): string | undefined => {
  const match = authorization === undefined ? null : /^Bearer\s+(\S+)\s*$/i.exec(authorization)
  return match === null ? undefined : match[1]
}

/**
 * GET /metrics in the Prometheus text format. With METRICS_TOKEN set, a scrape
 * must send `Authorization: Bearer <token>`; anything else is a 401 problem.
 */
export const layer = Layer.effectDiscard(Effect.gen(function*() {
  const router = yield* HttpRouter.HttpRouter
  const config = yield* AppConfig
  const expected = Option.map(config.metricsToken, (token) => digest(Redacted.value(token)))

  const handler = Effect.gen(function*() {
    if (Option.isSome(expected)) {
      const request = yield* HttpServerRequest.HttpServerRequest
      const sent = bearerToken(request.headers["authorization"])
      if (sent === undefined || !Crypto.timingSafeEqual(digest(sent), expected.value)) {
        const refused = yield* HttpServerRespondable.toResponse(
          new Unauthorized({ detail: "Send the metrics token (METRICS_TOKEN) as Authorization: Bearer <token>" })
        )
        return HttpServerResponse.setHeader(refused, "www-authenticate", "Bearer")
      }
    }
    const body = yield* PrometheusMetrics.format()
    return HttpServerResponse.text(body, { contentType: "text/plain; version=0.0.4; charset=utf-8" })
  })

  yield* router.add("GET", "/metrics", handler)
}))
