import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Result from "effect/Result"
import ipaddr from "ipaddr.js"
import * as Dns from "node:dns/promises"
import * as Http from "node:http"
import * as Https from "node:https"
import * as Net from "node:net"

/**
 * The guard against server-side request forgery for outbound webhooks. A URL
 * is checked when it is set, and again at each delivery: the host is resolved,
 * every address it resolves to is checked, and the connection goes to the
 * checked address itself (the Host header and TLS server name still name the
 * host), so a name that resolves elsewhere a moment later (DNS rebinding)
 * cannot reach an internal address.
 */

/** Addresses of cloud instance metadata services: refused even where private addresses are allowed. */
const metadataAddresses = new Set(["169.254.169.254", "fd00:ec2::254", "100.100.100.200"])
const metadataHosts = new Set(["metadata.google.internal", "metadata.goog", "metadata"])

// What WEBHOOK_ALLOW_PRIVATE opens: a self-hosted network's own addresses.
const privateRanges = new Set(["private", "loopback", "linkLocal", "carrierGradeNat", "uniqueLocal"])

type Address = ipaddr.IPv4 | ipaddr.IPv6

/**
 * The IPv4 address an IPv6 one stands for, if any: IPv4-mapped (::ffff:a.b.c.d),
 * IPv4-compatible (::a.b.c.d), NAT64 (64:ff9b::/96, 64:ff9b:1::/48) and 6to4 (2002::/16).
 */
const embeddedIpv4 = (address: ipaddr.IPv6): ipaddr.IPv4 | undefined => {
  const parts = address.parts
  const low = (high: number, lowPart: number) =>
    new ipaddr.IPv4([high >> 8, high & 0xff, lowPart >> 8, lowPart & 0xff])
  if (address.isIPv4MappedAddress()) return address.toIPv4Address()
  const range = address.range()
  if (parts.slice(0, 6).every((part) => part === 0) && (parts[6] !== 0 || parts[7]! > 1)) return low(parts[6]!, parts[7]!)
  if (range === "rfc6052") return low(parts[6]!, parts[7]!)
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
    const embedded = embeddedIpv4(address as ipaddr.IPv6)
    if (embedded !== undefined) {
      const inner = refusal(embedded.toString(), allowPrivate)
      return inner === undefined ? undefined : `${shown} stands for ${embedded.toString()}: ${inner}`
    }
  }
  const normal = address.kind() === "ipv6" ? (address as ipaddr.IPv6).toNormalizedString() : shown
  if (metadataAddresses.has(shown) || metadataAddresses.has(normal)) return `${shown} is a cloud metadata address`
  const range = address.range()
  if (range === "unicast") return undefined
  if (allowPrivate && privateRanges.has(range)) return undefined
  return `${shown} is a ${range} address`
}

export const defaultPort = (url: URL) => url.port !== "" ? Number(url.port) : url.protocol === "https:" ? 443 : 80

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

/**
 * Every address the URL's host stands for (a literal address itself; A and
 * AAAA records of a name), each checked. Fails with why the first refused one is.
 */
export const resolve = (url: URL, allowPrivate: boolean): Effect.Effect<ReadonlyArray<string>, string> =>
  Effect.gen(function*() {
    const host = hostOf(url)
    const addresses = Net.isIP(host) !== 0
      ? [host]
      : yield* Effect.tryPromise({
        try: () => Dns.lookup(host, { all: true, verbatim: true }),
        catch: (error) => `${host} could not be resolved (${(error as { code?: string }).code ?? String(error)})`
      }).pipe(
        Effect.map((found) => found.map((entry) => entry.address)),
        Effect.timeoutOrElse({ duration: "5 seconds", orElse: () => Effect.fail(`${host} could not be resolved in time`) })
      )
    if (addresses.length === 0) return yield* Effect.fail(`${host} has no address`)
    for (const address of addresses) {
      const why = refusal(address, allowPrivate)
      if (why !== undefined) return yield* Effect.fail(`Refused address: ${why}`)
    }
    return addresses
  })

/** What came back from one POST. */
export interface Answer {
  readonly status: number
  readonly location: string | undefined
  /** At most `maxBody` bytes of the body, as text. */
  readonly body: string
}

/**
 * POSTs `body` to `url`, connecting to `address` (already checked) rather than
 * resolving the host again. Redirects are not followed. At most `maxBody`
 * bytes of the answer are read, then the connection is dropped. Fails with a
 * message on a connection error or when `timeout` passes.
 */
export const post = (options: {
  readonly url: URL
  readonly address: string
  readonly headers: Readonly<Record<string, string>>
  readonly body: string
  readonly timeout: Duration.Duration
  readonly maxBody: number
}): Effect.Effect<Answer, string> => {
  const { url } = options
  const timeoutMs = Duration.toMillis(options.timeout)
  const attempt = Effect.callback<Answer, string>((resume) => {
    const host = hostOf(url)
    const transport = url.protocol === "https:" ? Https : Http
    let settled = false
    const done = (result: Effect.Effect<Answer, string>) => {
      if (settled) return
      settled = true
      resume(result)
    }
    const request = transport.request({
      host: options.address,
      port: defaultPort(url),
      path: `${url.pathname}${url.search}`,
      method: "POST",
      // The name the certificate must match, not the address connected to.
      ...(url.protocol === "https:" && Net.isIP(host) === 0 ? { servername: host } : {}),
      headers: { ...options.headers, host: url.host, "content-length": String(Buffer.byteLength(options.body)) },
      agent: false
    }, (response) => {
      const chunks: Array<Buffer> = []
      let size = 0
      const finish = () => {
        const location = response.headers.location
        done(Effect.succeed({
          status: response.statusCode ?? 0,
          location: typeof location === "string" ? location : undefined,
          body: Buffer.concat(chunks).subarray(0, options.maxBody).toString("utf8")
        }))
        request.destroy()
      }
      response.on("data", (chunk: Buffer) => {
        chunks.push(chunk)
        size += chunk.length
        if (size >= options.maxBody) finish()
      })
      response.on("end", finish)
      response.on("error", finish)
    })
    request.on("error", (error: NodeJS.ErrnoException) =>
      done(Effect.fail(`Connection to ${options.address} failed: ${error.code ?? error.message}`))
    )
    request.end(options.body)
    return Effect.sync(() => request.destroy())
  })
  return attempt.pipe(
    Effect.timeoutOrElse({
      duration: options.timeout,
      orElse: () => Effect.fail(`No answer within ${timeoutMs} ms (WEBHOOK_TIMEOUT)`)
    })
  )
}
