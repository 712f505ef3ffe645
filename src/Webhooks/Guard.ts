import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import * as Semaphore from "effect/Semaphore"
import * as HttpTraceContext from "effect/http/HttpTraceContext"
import ipaddr from "ipaddr.js"
import * as Dns from "node:dns/promises"
import * as Http from "node:http"
import * as Https from "node:https"
import * as Net from "node:net"
import { AppConfig } from "../Config.ts"
import * as Traced from "../Observability/Traced.ts"

/**
 * The guard against server-side request forgery for outbound webhooks (and
 * the HTTP calls of tools, src/Tools/Invoke.ts, under the same policy). A URL
 * is checked when it is set, and again at each delivery: the host is resolved,
 * every address it resolves to is checked, and the connection goes to the
 * checked address itself (the Host header and TLS server name still name the
 * host), so a name that resolves elsewhere a moment later (DNS rebinding)
 * cannot reach an internal address.
 */

/** Addresses of cloud instance metadata services: refused even where private addresses are allowed. */
const metadataAddresses = new Set(["169.254.169.254", "fd00:ec2::254", "100.100.100.200"])
const metadataHosts = new Set(["metadata.google.internal", "metadata.goog", "metadata"])

// Refused even with WEBHOOK_ALLOW_PRIVATE: cloud credential services live all over
// them (ECS 169.254.170.2, EKS Pod Identity 169.254.170.23 and fd00:ec2::23).
const linkLocalV4 = ipaddr.IPv4.parseCIDR("169.254.0.0/16")
const awsV6 = ipaddr.IPv6.parseCIDR("fd00:ec2::/32")
// RFC 8215's local-use NAT64 prefix: which IPv4 address one of its addresses
// stands for depends on the prefix length the gateway uses inside it (/48 to
// /96), so no single decoding is safe; refused outright.
const localNat64 = ipaddr.IPv6.parseCIDR("64:ff9b:1::/48")

// What WEBHOOK_ALLOW_PRIVATE opens: a self-hosted network's own addresses.
const privateRanges = new Set(["private", "loopback", "linkLocal", "carrierGradeNat", "uniqueLocal"])

type Address = ipaddr.IPv4 | ipaddr.IPv6

/**
 * The IPv4 address an IPv6 one stands for, if any: IPv4-mapped (::ffff:a.b.c.d),
 * IPv4-compatible (::a.b.c.d), NAT64 (64:ff9b::/96) and 6to4 (2002::/16).
 */
const embeddedIpv4 = (address: ipaddr.IPv6): ipaddr.IPv4 | undefined => {
  const parts = address.parts
  const low = (high: number, lowPart: number) => new ipaddr.IPv4([high >> 8, high & 0xff, lowPart >> 8, lowPart & 0xff])
  if (address.isIPv4MappedAddress()) return address.toIPv4Address()
  const range = address.range()
  if (parts.slice(0, 6).every((part) => part === 0) && (parts[6] !== 0 || parts[7]! > 1))
    return low(parts[6]!, parts[7]!)
  if (range === "rfc6052" && !address.match(localNat64)) return low(parts[6]!, parts[7]!)
  if (range === "6to4") return low(parts[1]!, parts[2]!)
  return undefined
}

/** Why an address may not be a webhook's target, or undefined when it may. */
export const refusal = (raw: string, allowPrivate: boolean): string | undefined => {
  let address: Address
  try {
    address = ipaddr.parse(raw.replace(/^\[|\]$/g, ""))
  } catch {
    return `${raw} is not an IP address`
  }
  const shown = address.toString()
  if (address.kind() === "ipv6") {
    const v6 = address as ipaddr.IPv6
    if (v6.match(localNat64))
      return `${shown} is a local-use NAT64 address (64:ff9b:1::/48), which may stand for any IPv4 address`
    const embedded = embeddedIpv4(v6)
    if (embedded !== undefined) {
      const inner = refusal(embedded.toString(), allowPrivate)
      return inner === undefined ? undefined : `${shown} stands for ${embedded.toString()}: ${inner}`
    }
  }
  const normal = address.kind() === "ipv6" ? (address as ipaddr.IPv6).toNormalizedString() : shown
  if (metadataAddresses.has(shown) || metadataAddresses.has(normal)) return `${shown} is a cloud metadata address`
  if (address.kind() === "ipv4" ? address.match(linkLocalV4) : address.match(awsV6)) {
    return `${shown} is in ${address.kind() === "ipv4" ? "169.254.0.0/16" : "fd00:ec2::/32"}, where cloud metadata and credential services answer`
  }
  const range = address.range()
  if (range === "unicast") return undefined
  if (allowPrivate && privateRanges.has(range)) return undefined
  return `${shown} is a ${range} address`
}

export const defaultPort = (url: URL) => (url.port !== "" ? Number(url.port) : url.protocol === "https:" ? 443 : 80)

/** The URL if it may be a webhook's (http(s), a host, no credentials), or why not; addresses are checked apart. */
export const parseUrl = (raw: string): Result.Result<URL, string> => {
  let url: URL
  try {
    url = new URL(raw)
  } catch {
    return Result.fail("Expected an absolute http(s) URL")
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") return Result.fail("Expected an http or https URL")
  if (url.hostname === "") return Result.fail("Expected a URL with a host")
  if (url.username !== "" || url.password !== "") return Result.fail("Expected a URL without user name or password")
  if (metadataHosts.has(url.hostname.toLowerCase().replace(/\.$/, ""))) {
    return Result.fail(`${url.hostname} is a cloud metadata host`)
  }
  return Result.succeed(url)
}

const hostOf = (url: URL) => url.hostname.replace(/^\[|\]$/g, "")

/** What a webhook may reach: WEBHOOK_ALLOW_PRIVATE and WEBHOOK_ALLOWED_PORTS. */
export interface Policy {
  readonly allowPrivate: boolean
  readonly allowedPorts: ReadonlyArray<number>
}

/** Where a webhook's URL leads, every address checked. */
export interface Target {
  /** Every address the host stands for; a delivery connects to the first. */
  readonly addresses: ReadonlyArray<string>
  /**
   * Every address is public. Only then is the answer's body kept in the
   * delivery log: from a private target it would read internal services back.
   */
  readonly public: boolean
}

/** The target if the URL's addresses and port may be a webhook's, or why not. */
export const admit = (url: URL, addresses: ReadonlyArray<string>, policy: Policy): Result.Result<Target, string> => {
  if (addresses.length === 0) return Result.fail(`${hostOf(url)} has no address`)
  for (const address of addresses) {
    const why = refusal(address, policy.allowPrivate)
    if (why !== undefined) return Result.fail(`Refused address: ${why}`)
  }
  const isPublic = addresses.every((address) => refusal(address, false) === undefined)
  const port = defaultPort(url)
  // A public address is anyone's host, the operator's own included (databases,
  // the runner port): only web ports. Private targets, once allowed, are the
  // operator's own network, where receivers listen on any port.
  const privateOnly = addresses.every((address) => refusal(address, false) !== undefined)
  if (!policy.allowedPorts.includes(port) && !(policy.allowPrivate && privateOnly)) {
    return Result.fail(`Refused port: ${port} is not one of ${policy.allowedPorts.join(", ")} (WEBHOOK_ALLOWED_PORTS)`)
  }
  return Result.succeed({ addresses, public: isPublic })
}

// Names that mean this host (RFC 6761), answered here as the system resolver would.
const isLocalhost = (host: string) => /(^|\.)localhost\.?$/i.test(host)

// c-ares: per query 1 s, then one more try (doubled); all within the lookup's own bound below.
const resolverOptions = { timeout: 1_000, tries: 2 }
const lookupBound = Duration.seconds(5)

// A family with no record is no failure as long as the other has one.
const noRecord = new Set(["ENODATA", "ENOTFOUND"])

/**
 * A and AAAA records with c-ares, on the event loop: getaddrinfo (`dns.lookup`)
 * would hold a thread of libuv's 4-thread pool, which password hashing and
 * file I/O share, for the name server's full timeout. Each lookup has its own
 * channel so an abandoned one can be cancelled.
 */
const lookup = (
  host: string,
  servers: ReadonlyArray<string> | undefined
): Effect.Effect<ReadonlyArray<string>, string> =>
  Effect.tryPromise({
    try: async (signal) => {
      const resolver = new Dns.Resolver(resolverOptions)
      if (servers !== undefined) resolver.setServers(servers)
      signal.addEventListener("abort", () => resolver.cancel(), { once: true })
      return Promise.allSettled([resolver.resolve4(host), resolver.resolve6(host)])
    },
    catch: (error) => `${host} could not be resolved (${String(error)})`
  }).pipe(
    Effect.flatMap((results) => {
      const found = results.flatMap((result) => (result.status === "fulfilled" ? result.value : []))
      if (found.length > 0) return Effect.succeed(found)
      const codes = results.flatMap((result) =>
        result.status === "rejected" ? [String((result.reason as { code?: string }).code ?? result.reason)] : []
      )
      const code = codes.find((candidate) => !noRecord.has(candidate)) ?? codes[0] ?? "ENODATA"
      return Effect.fail(`${host} could not be resolved (${code})`)
    })
  )

export interface EgressGuardShape {
  /** Every address the URL's host stands for (a literal address itself; A and AAAA records of a name), all admitted. */
  readonly check: (url: URL) => Effect.Effect<Target, string>
}

/**
 * Checks webhook URLs under `policy`, resolving names with at most
 * `concurrency` lookups in flight: a lookup beyond it waits for a turn, and
 * waiting counts towards its 5 s bound. `servers` (`ip[:port]`) replaces the
 * system's name servers.
 */
export const make = (options: {
  readonly policy: Policy
  readonly concurrency: number
  readonly servers?: ReadonlyArray<string> | undefined
}): Effect.Effect<EgressGuardShape> =>
  Effect.map(Semaphore.make(Math.max(1, options.concurrency)), (permits) => {
    const addressesOf = (host: string): Effect.Effect<ReadonlyArray<string>, string> => {
      if (Net.isIP(host) !== 0) return Effect.succeed([host])
      if (isLocalhost(host)) return Effect.succeed(["127.0.0.1", "::1"])
      return permits
        .withPermits(1)(lookup(host, options.servers))
        .pipe(
          Effect.timeoutOrElse({
            duration: lookupBound,
            orElse: () => Effect.fail(`${host} could not be resolved in time`)
          })
        )
    }
    return {
      check: (url) =>
        addressesOf(hostOf(url)).pipe(
          Effect.flatMap((addresses) => Effect.fromResult(admit(url, addresses, options.policy)))
        )
    }
  })

/** The node's guard: WEBHOOK_ALLOW_PRIVATE, WEBHOOK_ALLOWED_PORTS, WEBHOOK_DNS_CONCURRENCY. */
export class EgressGuard extends Context.Service<EgressGuard, EgressGuardShape>()("agent-host/Webhooks/EgressGuard") {
  static readonly layer = Layer.effect(
    EgressGuard,
    Effect.gen(function* () {
      const config = yield* AppConfig
      return EgressGuard.of(
        yield* make({
          policy: { allowPrivate: config.webhookAllowPrivate, allowedPorts: config.webhookAllowedPorts },
          concurrency: config.webhookDnsConcurrency
        })
      )
    })
  )
}

/** What came back from one POST. */
export interface Answer {
  readonly status: number
  readonly location: string | undefined
  /** At most `maxBody` bytes of the body, as text. */
  readonly body: string
}

/** What came back from one request (`request`): the answer, its headers, and what was sent. */
export interface Response extends Answer {
  /** Lower-cased names; a repeated header's values joined with `, `. */
  readonly headers: Readonly<Record<string, string>>
  /** Whether the body went on past `maxBody` bytes: `body` is its first `maxBody`. */
  readonly truncated: boolean
  /** The headers the request carried, those set here (host, content-length, the trace's) included. */
  readonly sentHeaders: Readonly<Record<string, string>>
}

/** Why a request got no answer: none within its timeout, or the connection failed. */
export interface RequestFailure {
  readonly reason: "timeout" | "connection"
  readonly message: string
}

const headersOf = (raw: Http.IncomingHttpHeaders): Record<string, string> => {
  const headers: Record<string, string> = {}
  for (const [name, value] of Object.entries(raw)) {
    if (typeof value === "string") headers[name] = value
    else if (Array.isArray(value)) headers[name] = value.join(", ")
  }
  return headers
}

/**
 * Connections kept open between requests, by the address connected to (the
 * checked one), its port and, for TLS, the name the certificate must match:
 * a kept connection goes only to an address that was checked for the
 * request reusing it. Idle ones are closed after a few seconds.
 */
const keepAlive = { keepAlive: true, maxFreeSockets: 16, timeout: 15_000, scheduling: "lifo" } as const
const agents = { "http:": new Http.Agent(keepAlive), "https:": new Https.Agent(keepAlive) }

/** A request's options to `url`, sent to the checked `address`. */
const pinned = (
  url: URL,
  address: string,
  method: string,
  headers: Readonly<Record<string, string>>,
  agent: Http.Agent | false
): Https.RequestOptions => {
  const host = hostOf(url)
  return {
    host: address,
    port: defaultPort(url),
    path: `${url.pathname}${url.search}`,
    method,
    // The name the certificate must match, not the address connected to.
    ...(url.protocol === "https:" && Net.isIP(host) === 0 ? { servername: host } : {}),
    headers,
    agent
  }
}

/**
 * Sends one request to `url`, connecting to `address` (already checked)
 * rather than resolving the host again; without a `body`, none (and no
 * Content-Length) is sent. Redirects are not followed. At most `maxBody`
 * bytes of the answer are read, then the connection is dropped. Fails on a
 * connection error, or with `timeoutMessage` when `timeout` passes. While
 * spans are exported the request is a client span of its own (see `traced`)
 * and carries its W3C `traceparent`, replacing one in `headers`.
 *
 * With `completeWhen`, an answer may be complete before its body ends (a
 * stream the server keeps open): reading stops at the first chunk its check
 * accepts, and the connection, half read, is dropped rather than kept.
 */
export const request = (options: {
  readonly method: string
  readonly url: URL
  readonly address: string
  readonly headers: Readonly<Record<string, string>>
  readonly body?: string | undefined
  readonly timeout: Duration.Duration
  readonly timeoutMessage: string
  readonly maxBody: number
  /** The URL as the span shows it; default `spanUrl(url)` (a tool's shows it with secret values masked). */
  readonly shownUrl?: string | undefined
  /**
   * Called once the answer's status and headers are in: a check given each
   * chunk of the body as it arrives (within `maxBody`), true when the answer
   * is complete; undefined to read the body to its end.
   */
  readonly completeWhen?:
    | ((status: number, headers: Readonly<Record<string, string>>) => ((chunk: Buffer) => boolean) | undefined)
    | undefined
}): Effect.Effect<Response, RequestFailure> => {
  const { body, method, url } = options
  const noAnswer: RequestFailure = { reason: "timeout", message: options.timeoutMessage }
  const send = (headers: Readonly<Record<string, string>>) => sendOnce(headers, true)
  // A kept connection the receiver closed as the request went out is reset: the request is sent once more,
  // on a new connection (what Node's documentation advises for `reusedSocket`).
  const sendOnce = (
    headers: Readonly<Record<string, string>>,
    mayResend: boolean
  ): Effect.Effect<Response, RequestFailure> =>
    Effect.callback<Response, RequestFailure>((resume) => {
      const transport = url.protocol === "https:" ? Https : Http
      let settled = false
      const done = (result: Effect.Effect<Response, RequestFailure>) => {
        if (settled) return
        settled = true
        resume(result)
      }
      const sentHeaders: Record<string, string> = {
        ...headers,
        host: url.host,
        ...(body === undefined ? {} : { "content-length": String(Buffer.byteLength(body)) })
      }
      let outgoing: Http.ClientRequest
      try {
        outgoing = transport.request(
          pinned(
            url,
            options.address,
            method,
            sentHeaders,
            url.protocol === "https:" ? agents["https:"] : agents["http:"]
          ),
          (response) => {
            const chunks: Array<Buffer> = []
            let size = 0
            const complete = options.completeWhen?.(response.statusCode ?? 0, headersOf(response.headers))
            const finish = () => {
              const location = response.headers.location
              done(
                Effect.succeed({
                  status: response.statusCode ?? 0,
                  location: typeof location === "string" ? location : undefined,
                  body: Buffer.concat(chunks).subarray(0, options.maxBody).toString("utf8"),
                  headers: headersOf(response.headers),
                  truncated: size > options.maxBody,
                  sentHeaders
                })
              )
            }
            response.on("data", (chunk: Buffer) => {
              if (settled) return
              chunks.push(chunk)
              size += chunk.length
              // One byte past the bound tells a body cut from one of exactly `maxBody` bytes; the rest is
              // not read, and the connection is not kept.
              if (size > options.maxBody || complete?.(chunk) === true) {
                finish()
                outgoing.destroy()
              }
            })
            // After Node has handed the connection back to the pool (on a later tick), so that a request
            // made right after this one can take it.
            response.on("end", () => setImmediate(finish))
            response.on("error", () => {
              finish()
              outgoing.destroy()
            })
          }
        )
      } catch (error) {
        // Node refuses a header it cannot send (a control character in a value) before connecting.
        done(Effect.fail({ reason: "connection", message: `The request could not be made: ${String(error)}` }))
        return
      }
      outgoing.on("error", (error: NodeJS.ErrnoException) =>
        done(
          mayResend && outgoing.reusedSocket && error.code === "ECONNRESET"
            ? sendOnce(headers, false)
            : Effect.fail({
                reason: "connection",
                message: `Connection to ${options.address} failed: ${error.code ?? error.message}`
              })
        )
      )
      outgoing.end(body)
      return Effect.sync(() => outgoing.destroy())
    }).pipe(
      Effect.timeoutOrElse({
        duration: options.timeout,
        orElse: () => Effect.fail(noAnswer)
      })
    )
  return Effect.suspend(() =>
    Traced.isExporting()
      ? traced({ method, url, address: options.address, shownUrl: options.shownUrl }, options.headers, send)
      : send(options.headers)
  )
}

/** An answer whose body is read as it arrives, for as long as it lasts (`open`). */
export interface OpenAnswer {
  readonly status: number
  /** Lower-cased names; a repeated header's values joined with `, `. */
  readonly headers: Readonly<Record<string, string>>
  readonly sentHeaders: Readonly<Record<string, string>>
  /**
   * Starts reading: `onChunk` gets each chunk of the body; `onEnd` is called
   * once, when the body ends, the connection fails or `close` is called.
   */
  readonly read: (onChunk: (chunk: Buffer) => void, onEnd: (why: string) => void) => void
  /** Drops the connection. */
  readonly close: () => void
}

/**
 * Sends one request as `request` does (to the checked `address`, no redirect
 * followed, traced), but succeeds as soon as the status and headers are in,
 * leaving the body to the caller for as long as it lasts: a stream of
 * server-sent events. `timeout` bounds the wait for the status only. The
 * connection is the request's own, never kept for another one, and does not
 * keep the process alive.
 */
export const open = (options: {
  readonly method: string
  readonly url: URL
  readonly address: string
  readonly headers: Readonly<Record<string, string>>
  readonly timeout: Duration.Duration
  readonly timeoutMessage: string
  /** The URL as the span shows it; default `spanUrl(url)`. */
  readonly shownUrl?: string | undefined
}): Effect.Effect<OpenAnswer, RequestFailure> => {
  const { method, url } = options
  const send = (headers: Readonly<Record<string, string>>): Effect.Effect<OpenAnswer, RequestFailure> =>
    Effect.callback<OpenAnswer, RequestFailure>((resume) => {
      const transport = url.protocol === "https:" ? Https : Http
      const sentHeaders: Record<string, string> = { ...headers, host: url.host }
      let answered = false
      let ended: string | undefined
      let onEnd: ((why: string) => void) | undefined
      const end = (why: string) => {
        if (ended !== undefined) return
        ended = why
        onEnd?.(why)
      }
      let outgoing: Http.ClientRequest
      try {
        outgoing = transport.request(pinned(url, options.address, method, sentHeaders, false), (response) => {
          answered = true
          response.on("end", () => end("the stream ended"))
          response.on("error", (error: NodeJS.ErrnoException) =>
            end(`the stream failed: ${error.code ?? error.message}`)
          )
          response.on("close", () => end("the connection closed"))
          response.socket.unref()
          resume(
            Effect.succeed({
              status: response.statusCode ?? 0,
              headers: headersOf(response.headers),
              sentHeaders,
              read: (onChunk, onEnded) => {
                onEnd = onEnded
                if (ended !== undefined) onEnded(ended)
                else response.on("data", onChunk)
              },
              close: () => {
                outgoing.destroy()
                end("closed")
              }
            })
          )
        })
      } catch (error) {
        resume(Effect.fail({ reason: "connection", message: `The request could not be made: ${String(error)}` }))
        return
      }
      outgoing.on("error", (error: NodeJS.ErrnoException) => {
        if (answered) end(`the stream failed: ${error.code ?? error.message}`)
        else {
          resume(
            Effect.fail({
              reason: "connection",
              message: `Connection to ${options.address} failed: ${error.code ?? error.message}`
            })
          )
        }
      })
      outgoing.end()
      // Interrupted before the answer was handed over: nobody will read or close it.
      return Effect.sync(() => outgoing.destroy())
    }).pipe(
      Effect.timeoutOrElse({
        duration: options.timeout,
        orElse: () => Effect.fail<RequestFailure>({ reason: "timeout", message: options.timeoutMessage })
      })
    )
  return Effect.suspend(() =>
    Traced.isExporting()
      ? traced({ method, url, address: options.address, shownUrl: options.shownUrl }, options.headers, send)
      : send(options.headers)
  )
}

/**
 * POSTs `body` to `url`, connecting to `address` (already checked) rather than
 * resolving the host again: `request` with webhooks' timeout message. Fails
 * with a message on a connection error or when `timeout` passes.
 */
export const post = (options: {
  readonly url: URL
  readonly address: string
  readonly headers: Readonly<Record<string, string>>
  readonly body: string
  readonly timeout: Duration.Duration
  readonly maxBody: number
}): Effect.Effect<Answer, string> =>
  request({
    ...options,
    method: "POST",
    timeoutMessage: `No answer within ${Duration.toMillis(options.timeout)} ms (WEBHOOK_TIMEOUT)`
  }).pipe(
    Effect.map(({ body, location, status }) => ({ status, location, body })),
    Effect.mapError((failure) => failure.message)
  )

/**
 * The URL as a span may show it: every query value replaced by `REDACTED`
 * (receivers put tokens there), as OpenTelemetry's HTTP conventions ask of
 * `url.full`. Webhook URLs carry no user name or password (parseUrl).
 */
export const spanUrl = (url: URL): string => {
  if (url.search === "") return url.href
  const shown = new URL(url.href)
  const params = new URLSearchParams()
  for (const name of url.searchParams.keys()) params.append(name, "REDACTED")
  shown.search = params.toString()
  return shown.href
}

/**
 * The request as an OpenTelemetry HTTP client span, named by its method,
 * under the current span (the delivery attempt's, the tool call's), with the
 * W3C `traceparent` (and `b3`) headers of that span on the request. A status
 * of 400 or more, no answer in time or a failed connection makes it a failed
 * span with `error.type`.
 */
const traced = <A extends { readonly status: number }>(
  {
    address,
    method,
    shownUrl,
    url
  }: { readonly method: string; readonly url: URL; readonly address: string; readonly shownUrl?: string | undefined },
  headers: Readonly<Record<string, string>>,
  send: (headers: Readonly<Record<string, string>>) => Effect.Effect<A, RequestFailure>
): Effect.Effect<A, RequestFailure> =>
  Effect.flatMap(
    Effect.makeSpan(method, {
      kind: "client",
      attributes: {
        "http.request.method": method,
        "url.full": shownUrl ?? spanUrl(url),
        "url.scheme": url.protocol.slice(0, -1),
        "server.address": hostOf(url),
        "server.port": defaultPort(url),
        "network.peer.address": address
      }
    }),
    (span) => {
      const end = (exit: Exit.Exit<unknown, unknown>) =>
        Effect.flatMap(Clock.currentTimeNanos, (now) => Effect.sync(() => span.end(now, exit)))
      return send({ ...headers, ...HttpTraceContext.toHeaders(span) }).pipe(
        Effect.onExit((exit) => {
          if (exit._tag === "Failure") {
            const error = Cause.findErrorOption(exit.cause)
            span.attribute("error.type", Option.isNone(error) ? "cancelled" : error.value.reason)
            return end(exit)
          }
          const status = exit.value.status
          span.attribute("http.response.status_code", status)
          if (status < 400) return end(exit)
          span.attribute("error.type", String(status))
          return end(Exit.fail(`HTTP ${status}`))
        })
      )
    }
  )
