import * as Effect from "effect/Effect"
import * as HttpEffect from "effect/http/HttpEffect"
import type * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import { plainSessionCookieName, sessionCookieName } from "./Api.ts"

/** The first value of a header a proxy may have appended to, in lower case. */
export const firstValue = (header: string | undefined) => header?.split(",")[0]?.trim().toLowerCase() || undefined

// Only these names are served plain by the developer's own machine; any other
// name is assumed to be reached through TLS (a proxy in front, usually).
const localNames: ReadonlySet<string> = new Set(["localhost", "127.0.0.1", "[::1]"])

const withoutPort = (host: string) =>
  host.startsWith("[") ? host.slice(0, host.indexOf("]") + 1) : host.split(":")[0]!

/**
 * Whether the request was sent over plain HTTP to localhost: the Host (or
 * X-Forwarded-Host) names the loopback, and the scheme is http (a proxy's
 * X-Forwarded-Proto, else this socket's). As in the origin check, trusting
 * these headers is safe: a page cannot set them on another user's request,
 * so a client only ever changes the cookie it gets itself.
 */
export const isPlainLocalhost = (request: HttpServerRequest.HttpServerRequest): boolean => {
  const host = firstValue(request.headers["x-forwarded-host"]) ?? firstValue(request.headers.host)
  if (host === undefined) return false
  const scheme = firstValue(request.headers["x-forwarded-proto"]) ?? "http"
  return scheme === "http" && localNames.has(withoutPort(host))
}

/**
 * The session cookie a response to this request sets. COOKIE_SECURE unset:
 * `__Host-session` with Secure, except over plain HTTP on localhost (where a
 * browser would drop a Secure cookie), `session` without it, so `npm start`
 * works in a browser on http://localhost. true: always the former; false:
 * always the latter (a deliberately plain-HTTP deployment).
 */
export const sessionCookieFor = (request: HttpServerRequest.HttpServerRequest, cookieSecure: boolean | undefined) =>
  (cookieSecure ?? !isPlainLocalhost(request))
    ? ({ name: sessionCookieName, secure: true } as const)
    : ({ name: plainSessionCookieName, secure: false } as const)

/** The session token the request's cookies carry: `__Host-session` first, then `session`. */
export const sessionCookieValue = (request: HttpServerRequest.HttpServerRequest): string =>
  request.cookies[sessionCookieName] || request.cookies[plainSessionCookieName] || ""

/**
 * Expires the session cookie this request would be given and any other
 * session cookie it carries, each with the attributes a browser needs to
 * accept the deletion (`__Host-` only with Secure and Path=/).
 */
export const expireSessionCookies = (
  request: HttpServerRequest.HttpServerRequest,
  cookieSecure: boolean | undefined
) => {
  const names = new Set<string>([sessionCookieFor(request, cookieSecure).name])
  for (const name of [sessionCookieName, plainSessionCookieName])
    if (request.cookies[name] !== undefined) names.add(name)
  return HttpEffect.appendPreResponseHandler((_request, response) =>
    Effect.succeed(
      [...names].reduce(
        (current, name) =>
          HttpServerResponse.expireCookieUnsafe(current, name, {
            path: "/",
            httpOnly: true,
            sameSite: "lax",
            ...(name === sessionCookieName ? { secure: true } : {})
          }),
        response
      )
    )
  )
}
