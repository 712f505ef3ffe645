import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Result from "effect/Result"
import * as Crypto from "node:crypto"
import { AppConfig } from "../Config.ts"
import type { TenantId, ToolId } from "../Domain/Ids.ts"
import { BadRequest, NotFound } from "../Domain/Problems.ts"
import * as Traced from "../Observability/Traced.ts"
import { resealInBackground, SecretVault } from "../Secrets/Vault.ts"
import * as Guard from "../Webhooks/Guard.ts"
import { clientInfo, type McpFailure, protocolVersion } from "./McpClient.ts"
import { type ConnectionRow, McpOAuthRepo, type SealedConnection, type SealedPending } from "./McpOAuthRepo.ts"
import { ToolsRepo } from "./Repo.ts"
import type { McpSettings, Tool } from "./Tool.ts"

// OAuth 2.1 for `mcp` tools, as the MCP authorization specification
// (revision 2025-06-18) has a client do it (docs/mcp.md#oauth): the server's
// protected resource metadata (RFC 9728) names its authorization server,
// whose metadata (RFC 8414) gives its endpoints; a client is registered there
// dynamically (RFC 7591); the user approves an authorization code request
// with PKCE (S256) and the resource indicator (RFC 8707) in the browser; the
// tokens come back sealed, are renewed with the refresh token before they
// expire, and are sent as `Authorization: Bearer` on every request to the
// server. Every request of this module goes through the egress guard.

/** The route the authorization server sends the browser back to. */
export const callbackPath = "/api/mcp/oauth/callback"

/** A token this close to its expiry is renewed before use. */
const renewWithinMs = 60_000
/** How long one request to the server or its authorization server may take. */
const requestTimeout = Duration.seconds(10)
/** The most bytes of a metadata or token answer read. */
const maxBody = 262_144

/** What a tool's connection shows (`GET /api/tools/{id}/oauth`): never a token. */
export interface ConnectionStatus {
  readonly status: "connected" | "not_connected" | "expired"
  readonly authorizationServer: string | null
  readonly scope: string | null
  readonly expiresAt: string | null
  readonly connectedAt: string | null
}

/** The `mcp` tool a token is for: its id, the name it was saved under and its server's URL. */
export interface OAuthTarget {
  readonly toolId: string
  readonly toolName: string
  readonly url: string
}

/** Where an authorization that came back leaves the user: the tool (when known) and what went wrong, if anything. */
export interface CallbackOutcome {
  readonly tenantId: TenantId | undefined
  readonly toolId: string | undefined
  readonly error: string | undefined
}

const base64url = (bytes: Buffer) => bytes.toString("base64url")
const sha256 = (text: string) => Crypto.createHash("sha256").update(text).digest()
export const stateHashOf = (state: string) => sha256(state).toString("hex")

const ownerOf = (tenantId: string, toolId: string, what: string) => ({ tenantId, id: `${toolId}:${what}` })

const excerpt = (text: string, max = 200) => (text.length <= max ? text : `${text.slice(0, max)}…`)

const withoutSlash = (url: string) => url.replace(/\/+$/, "")

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

const stringOf = (value: unknown) => (typeof value === "string" && value !== "" ? value : undefined)

/** The parameters of a `Bearer` challenge of a WWW-Authenticate header (RFC 6750 §3), by lower-cased name. */
export const bearerChallenge = (header: string): ReadonlyMap<string, string> | undefined => {
  const at = header.search(/(^|[\s,])bearer(\s|$)/i)
  if (at === -1) return undefined
  const params = new Map<string, string>()
  const rest = header.slice(at).replace(/^[\s,]*bearer/i, "")
  const pattern = /\s*([a-zA-Z0-9_-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]*))\s*,?/y
  let match: RegExpExecArray | null
  while ((match = pattern.exec(rest)) !== null) {
    const name = match[1]!.toLowerCase()
    // A name without `=` after it starts the next challenge.
    if (params.has(name)) break
    params.set(name, match[2] !== undefined ? match[2].replace(/\\(.)/g, "$1") : (match[3] ?? ""))
    if (pattern.lastIndex >= rest.length) break
  }
  return params
}

/** The well-known URLs of `url`'s metadata: path-aware (`/.well-known/NAME/path`) first, then the root's. */
const wellKnown = (url: URL, name: string): ReadonlyArray<string> => {
  const path = withoutSlash(url.pathname)
  return path === "" ? [`${url.origin}/.well-known/${name}`] : [`${url.origin}/.well-known/${name}${path}`]
}

/** What discovery found about the server's authorization server. */
interface Discovered {
  readonly issuer: string
  readonly authorizationEndpoint: string
  readonly tokenEndpoint: string
  readonly registrationEndpoint: string | undefined
  readonly scope: string | undefined
}

interface TokenAnswer {
  readonly accessToken: string
  readonly refreshToken: string | undefined
  readonly expiresIn: number | undefined
  readonly scope: string | undefined
}

/** Why a token request failed: `refused` when the authorization server said no (the grant is spent or revoked). */
interface TokenFailure {
  readonly refused: boolean
  readonly message: string
}

const notConnected = (target: OAuthTarget) =>
  `The MCP server of the tool ${JSON.stringify(target.toolName)} (${target.url}) is not connected: connect it in ` +
  `the dashboard (Tools → ${target.toolName} → Connect). Nothing was sent.`

const connectAgain = (target: OAuthTarget, why: string) =>
  `The MCP server of the tool ${JSON.stringify(target.toolName)} (${target.url}) needs to be connected again: ${why}. ` +
  `Connect it again in the dashboard (Tools → ${target.toolName} → Connect). Nothing was sent.`

/** The settings of an `mcp` tool over HTTP that connects with OAuth. */
export const oauthSettingsOf = (tool: Pick<Tool, "settings">): McpSettings | undefined =>
  tool.settings.kind === "mcp" && "url" in tool.settings && tool.settings.auth === "oauth" ? tool.settings : undefined

/**
 * The connection an `mcp` tool's call uses: `tool` may be one of the model
 * tools it stands for (Mcp.ts `modelTools`), named `<toolName>__<server tool>`,
 * whose own name is read back from its exposed name.
 */
export const oauthTargetOf = (tool: Tool, settings: McpSettings): OAuthTarget => {
  const exposed = settings.serverTools.find((one) => one.exposedAs === tool.name)
  const suffix = exposed === undefined ? "" : `__${exposed.name.replace(/[^a-zA-Z0-9_-]/g, "_")}`
  const toolName = suffix !== "" && tool.name.endsWith(suffix) ? tool.name.slice(0, -suffix.length) : tool.name
  return { toolId: tool.id, toolName, url: settings.url }
}

export class McpOAuth extends Context.Service<McpOAuth>()("agent-host/McpOAuth", {
  make: Effect.gen(function* () {
    const repo = yield* McpOAuthRepo
    const tools = yield* ToolsRepo
    const vault = yield* SecretVault
    const guard = yield* Guard.EgressGuard
    const config = yield* AppConfig

    const seal = (value: string, tenantId: string, toolId: string, what: string) =>
      vault.seal(Redacted.make(value), ownerOf(tenantId, toolId, what))
    const open = (sealed: string, keyVersion: number, tenantId: string, toolId: string, what: string) => {
      const value = vault.open({ sealedValue: sealed, keyVersion }, ownerOf(tenantId, toolId, what))
      return value === undefined ? undefined : Redacted.value(value)
    }

    // --- the key rotation -------------------------------------------------------

    /** A sealed value under the current key: null stays null; undefined when no configured key opens it. */
    const resealed = (sealed: string | null, keyVersion: number, tenantId: string, toolId: string, what: string) => {
      if (sealed === null) return null
      const value = open(sealed, keyVersion, tenantId, toolId, what)
      return value === undefined ? undefined : seal(value, tenantId, toolId, what).sealedValue
    }

    // As the vault does for the tenants' secrets: the connections (and the authorizations that may still come back)
    // sealed under another key version are re-sealed under the current key, so the old key can then be dropped.
    const current = config.secretsKeyVersion
    yield* resealInBackground({
      what: "MCP OAuth connections",
      current,
      page: (after: SealedConnection | undefined, limit: number) =>
        repo.connectionsUnderOtherKeys(current, after?.toolId ?? "", limit),
      reseal: (row) => {
        const again = (sealed: string | null, what: string) =>
          resealed(sealed, row.keyVersion, row.tenantId, row.toolId, what)
        const clientSecret = again(row.clientSecret, "client_secret")
        const accessToken = again(row.accessToken, "access_token")
        const refreshToken = again(row.refreshToken, "refresh_token")
        if (clientSecret === undefined || accessToken === undefined || refreshToken === undefined) {
          return Effect.undefined
        }
        return repo.resealConnection(row, { clientSecret, accessToken, refreshToken, keyVersion: current })
      }
    })
    yield* resealInBackground({
      what: "MCP OAuth authorizations in progress",
      current,
      page: (after: SealedPending | undefined, limit: number) =>
        repo.pendingUnderOtherKeys(current, after?.stateHash ?? "", limit),
      reseal: (row) => {
        const clientSecret = resealed(row.clientSecret, row.keyVersion, row.tenantId, row.toolId, "client_secret")
        const verifier = resealed(row.verifier, row.keyVersion, row.tenantId, row.toolId, "pkce_verifier")
        if (clientSecret === undefined || verifier === undefined || verifier === null) return Effect.undefined
        return repo.resealPending(row, { clientSecret, verifier, keyVersion: current })
      }
    })

    // --- outbound requests ------------------------------------------------------

    /**
     * One request through the egress guard. Plain http is refused to a public
     * address: tokens and codes would cross the internet in the clear.
     */
    const send = (options: {
      readonly method: "GET" | "POST"
      readonly url: string
      readonly headers: Readonly<Record<string, string>>
      readonly body?: string | undefined
    }): Effect.Effect<Guard.Response, string> =>
      Effect.gen(function* () {
        const parsed = Guard.parseUrl(options.url)
        if (Result.isFailure(parsed)) return yield* Effect.fail(`${options.url}: ${parsed.failure}`)
        const url = parsed.success
        const target = yield* Effect.mapError(guard.check(url), (why) => `${url.origin} is refused: ${why}`)
        if (url.protocol === "http:" && target.public) {
          return yield* Effect.fail(`${url.origin} is plain http on a public address: https is required`)
        }
        return yield* Effect.mapError(
          Guard.request({
            method: options.method,
            url,
            address: target.addresses[0]!,
            headers: { "user-agent": "agent-host-tools/1.0", ...options.headers },
            body: options.body,
            timeout: requestTimeout,
            timeoutMessage: `${url.origin} did not answer within ${Duration.toMillis(requestTimeout)} ms`,
            maxBody
          }),
          (failure) => failure.message
        )
      })

    const jsonOf = (answer: Guard.Response): unknown => {
      try {
        return JSON.parse(answer.body)
      } catch {
        return undefined
      }
    }

    /** The first of `urls` that answers 200 with a JSON object `accept` takes, or why none did. */
    const firstMetadata = <A>(
      urls: ReadonlyArray<string>,
      accept: (document: Record<string, unknown>, url: string) => Result.Result<A, string>
    ): Effect.Effect<A, string> =>
      Effect.gen(function* () {
        const tried: Array<string> = []
        for (const url of urls) {
          const answer = yield* Effect.result(send({ method: "GET", url, headers: { accept: "application/json" } }))
          if (Result.isFailure(answer)) {
            tried.push(`${url}: ${answer.failure}`)
            continue
          }
          const document = jsonOf(answer.success)
          if (answer.success.status !== 200 || !isObject(document)) {
            tried.push(`${url}: ${answer.success.status === 200 ? "not a JSON object" : answer.success.status}`)
            continue
          }
          const accepted = accept(document, url)
          if (Result.isSuccess(accepted)) return accepted.success
          tried.push(`${url}: ${accepted.failure}`)
        }
        return yield* Effect.fail(tried.join("; "))
      })

    // --- discovery ----------------------------------------------------------------

    /**
     * The server's authorization server: an initialize without credentials
     * should be answered 401 with the resource metadata's URL (and perhaps
     * the scope) in its WWW-Authenticate challenge; without one, the
     * metadata's well-known URLs are tried.
     */
    const discover = (settings: McpSettings) =>
      Effect.gen(function* () {
        const server = new URL(settings.url)
        const host = server.hostname.toLowerCase().replace(/\.$/, "")
        if (!settings.allowedHosts.includes(host)) {
          return yield* Effect.fail(`the url's host ${host} is not one of the tool's allowedHosts`)
        }
        // A probe that fails (a stream held open, say) leaves the well-known URLs to try.
        const probed = yield* Effect.result(
          send({
            method: "POST",
            url: settings.url,
            headers: { "content-type": "application/json", accept: "application/json, text/event-stream" },
            body: JSON.stringify({
              jsonrpc: "2.0",
              id: 1,
              method: "initialize",
              params: { protocolVersion, capabilities: {}, clientInfo }
            })
          })
        )
        const probe = Result.isSuccess(probed) ? probed.success : undefined
        const challenge = probe?.status === 401 ? bearerChallenge(probe.headers["www-authenticate"] ?? "") : undefined
        const hinted = challenge?.get("resource_metadata")
        const resourceUrls =
          hinted !== undefined
            ? [hinted]
            : [
                ...wellKnown(server, "oauth-protected-resource"),
                `${server.origin}/.well-known/oauth-protected-resource`
              ]
        const resource = yield* firstMetadata([...new Set(resourceUrls)], (document) => {
          const servers = document.authorization_servers
          const first = Array.isArray(servers) ? stringOf(servers[0]) : undefined
          if (first === undefined) return Result.fail("no authorization_servers")
          const named = stringOf(document.resource)
          // The metadata must be the server's (RFC 9728 §3.3): its resource is the server's URL or a prefix of it.
          const own = withoutSlash(settings.url)
          if (named !== undefined && own !== withoutSlash(named) && !own.startsWith(`${withoutSlash(named)}/`)) {
            return Result.fail(`its resource ${named} is not the server's URL`)
          }
          const scopes = Array.isArray(document.scopes_supported)
            ? document.scopes_supported.filter((scope): scope is string => typeof scope === "string" && scope !== "")
            : []
          return Result.succeed({ issuer: first, scopes })
        }).pipe(
          Effect.mapError((tried) => {
            if (probe?.status === 401) return `no protected resource metadata was found (${tried})`
            const asked = Result.isFailure(probed)
              ? `could not be asked (${probed.failure})`
              : `answered ${probed.success.status} without credentials`
            return `the server ${asked} and no protected resource metadata was found: it does not seem to use OAuth (${tried})`
          })
        )
        const issuerUrl = Guard.parseUrl(resource.issuer)
        if (Result.isFailure(issuerUrl)) {
          return yield* Effect.fail(`the authorization server ${resource.issuer} is not usable: ${issuerUrl.failure}`)
        }
        const issuer = issuerUrl.success
        const path = withoutSlash(issuer.pathname)
        const metadataUrls =
          path === ""
            ? [
                `${issuer.origin}/.well-known/oauth-authorization-server`,
                `${issuer.origin}/.well-known/openid-configuration`
              ]
            : [
                `${issuer.origin}/.well-known/oauth-authorization-server${path}`,
                `${issuer.origin}/.well-known/openid-configuration${path}`,
                `${issuer.origin}${path}/.well-known/openid-configuration`
              ]
        const discovered = yield* firstMetadata(metadataUrls, (document): Result.Result<Discovered, string> => {
          if (withoutSlash(stringOf(document.issuer) ?? "") !== withoutSlash(resource.issuer)) {
            return Result.fail(`its issuer is not ${resource.issuer}`)
          }
          const authorizationEndpoint = stringOf(document.authorization_endpoint)
          const tokenEndpoint = stringOf(document.token_endpoint)
          if (authorizationEndpoint === undefined || tokenEndpoint === undefined) {
            return Result.fail("no authorization_endpoint or token_endpoint")
          }
          const methods = document.code_challenge_methods_supported
          if (Array.isArray(methods) && !methods.includes("S256")) {
            return Result.fail("PKCE with S256 is not among its code_challenge_methods_supported")
          }
          const scope = challenge?.get("scope") ?? (resource.scopes.length > 0 ? resource.scopes.join(" ") : undefined)
          return Result.succeed({
            issuer: stringOf(document.issuer)!,
            authorizationEndpoint,
            tokenEndpoint,
            registrationEndpoint: stringOf(document.registration_endpoint),
            scope
          })
        }).pipe(
          Effect.mapError(
            (tried) => `the metadata of the authorization server ${resource.issuer} was not found (${tried})`
          )
        )
        for (const url of [discovered.authorizationEndpoint, discovered.tokenEndpoint]) {
          const parsed = Guard.parseUrl(url)
          if (Result.isFailure(parsed))
            return yield* Effect.fail(`the endpoint ${url} is not usable: ${parsed.failure}`)
        }
        return discovered
      })

    /** A client registered dynamically (RFC 7591), as a public client using PKCE. */
    const register = (registrationEndpoint: string, redirectUri: string) =>
      Effect.gen(function* () {
        const answer = yield* send({
          method: "POST",
          url: registrationEndpoint,
          headers: { "content-type": "application/json", accept: "application/json" },
          body: JSON.stringify({
            client_name: "Agent Host",
            redirect_uris: [redirectUri],
            grant_types: ["authorization_code", "refresh_token"],
            response_types: ["code"],
            token_endpoint_auth_method: "none"
          })
        })
        const document = jsonOf(answer)
        if (answer.status < 200 || answer.status > 299 || !isObject(document)) {
          const error = isObject(document) ? oauthError(document) : excerpt(answer.body)
          return yield* Effect.fail(`the client registration was refused (${answer.status}: ${error})`)
        }
        const clientId = stringOf(document.client_id)
        if (clientId === undefined) return yield* Effect.fail("the client registration answered no client_id")
        return { clientId, clientSecret: stringOf(document.client_secret) }
      })

    // --- tokens ---------------------------------------------------------------------

    const oauthError = (document: Record<string, unknown>) => {
      const error = stringOf(document.error) ?? "error"
      const description = stringOf(document.error_description)
      return excerpt(description === undefined ? error : `${error}: ${description}`)
    }

    /** A token request (RFC 6749 §3.2), form encoded; a client secret, if any, in HTTP Basic. */
    const tokenRequest = (
      tokenEndpoint: string,
      client: { readonly clientId: string; readonly clientSecret: string | undefined },
      params: Record<string, string>
    ): Effect.Effect<TokenAnswer, TokenFailure> =>
      Effect.gen(function* () {
        const answer = yield* Effect.mapError(
          send({
            method: "POST",
            url: tokenEndpoint,
            headers: {
              "content-type": "application/x-www-form-urlencoded",
              accept: "application/json",
              ...(client.clientSecret === undefined
                ? {}
                : {
                    authorization: `Basic ${Buffer.from(
                      `${encodeURIComponent(client.clientId)}:${encodeURIComponent(client.clientSecret)}`
                    ).toString("base64")}`
                  })
            },
            body: new URLSearchParams({ ...params, client_id: client.clientId }).toString()
          }),
          (message): TokenFailure => ({ refused: false, message })
        )
        const document = jsonOf(answer)
        if (answer.status !== 200) {
          // 400 and 401 are the server's no (invalid_grant, invalid_client...); anything else may pass.
          return yield* Effect.fail<TokenFailure>({
            refused: answer.status === 400 || answer.status === 401,
            message: `the token endpoint answered ${answer.status}${isObject(document) ? ` (${oauthError(document)})` : ""}`
          })
        }
        const accessToken = isObject(document) ? stringOf(document.access_token) : undefined
        if (!isObject(document) || accessToken === undefined) {
          return yield* Effect.fail<TokenFailure>({
            refused: false,
            message: "the token endpoint answered no access_token"
          })
        }
        const type = stringOf(document.token_type)
        if (type !== undefined && type.toLowerCase() !== "bearer") {
          return yield* Effect.fail<TokenFailure>({
            refused: false,
            message: `the token is of type ${excerpt(type, 40)}, not Bearer`
          })
        }
        const expiresIn =
          typeof document.expires_in === "number" && document.expires_in > 0 ? document.expires_in : undefined
        return {
          accessToken,
          refreshToken: stringOf(document.refresh_token),
          expiresIn,
          scope: stringOf(document.scope)
        }
      })

    const expiryOf = (now: number, answer: TokenAnswer) =>
      answer.expiresIn === undefined ? null : new Date(now + answer.expiresIn * 1000)

    /** The decision about a connection's token, taken in its locked row: a token, or why none. */
    type Renewal = { readonly token: string } | { readonly failure: string; readonly expire: boolean }

    /**
     * A token that is not `seen`: the one another request renewed meanwhile,
     * else a renewed one. The row stays locked while the token endpoint is
     * asked, so two nodes never spend one refresh token.
     */
    const renew = (tenantId: TenantId, target: OAuthTarget, seen: string) =>
      Effect.gen(function* () {
        const decision = yield* repo.withLocked(tenantId, target.toolId, (found) =>
          Effect.gen(function* (): Effect.fn.Return<Renewal> {
            if (Option.isNone(found) || found.value.accessToken === null || found.value.resource !== target.url) {
              return { failure: notConnected(target), expire: false }
            }
            const row = found.value
            const now = yield* Clock.currentTimeMillis
            const current = open(row.accessToken!, row.keyVersion, tenantId, target.toolId, "access_token")
            // Another request renewed it meanwhile: that token is used, not renewed again.
            if (
              current !== undefined &&
              current !== seen &&
              (row.expiresAt === null || row.expiresAt.getTime() > now)
            ) {
              return { token: current }
            }
            const refreshToken =
              row.refreshToken === null
                ? undefined
                : open(row.refreshToken, row.keyVersion, tenantId, target.toolId, "refresh_token")
            if (refreshToken === undefined) {
              return {
                failure: connectAgain(target, "its authorization expired and there is no refresh token"),
                expire: true
              }
            }
            const clientSecret =
              row.clientSecret === null
                ? undefined
                : open(row.clientSecret, row.keyVersion, tenantId, target.toolId, "client_secret")
            const answer = yield* Effect.result(
              tokenRequest(
                row.tokenEndpoint,
                { clientId: row.clientId, clientSecret },
                { grant_type: "refresh_token", refresh_token: refreshToken, resource: row.resource }
              )
            )
            if (Result.isFailure(answer)) {
              const { message, refused } = answer.failure
              return refused
                ? {
                    failure: connectAgain(
                      target,
                      `its authorization expired and the authorization server refused to renew it (${message})`
                    ),
                    expire: true
                  }
                : {
                    failure: `The OAuth token of the MCP server of the tool ${JSON.stringify(target.toolName)} (${target.url}) could not be renewed: ${message}. Nothing was sent.`,
                    expire: false
                  }
            }
            const renewed = answer.success
            const sealedAccess = seal(renewed.accessToken, tenantId, target.toolId, "access_token")
            yield* repo.saveTokens(tenantId, target.toolId, {
              accessToken: sealedAccess.sealedValue,
              // A server that rotates refresh tokens sends a new one; one that does not keeps the old.
              refreshToken: seal(renewed.refreshToken ?? refreshToken, tenantId, target.toolId, "refresh_token")
                .sealedValue,
              expiresAt: expiryOf(now, renewed),
              scope: renewed.scope ?? row.scope,
              clientSecret:
                clientSecret === undefined
                  ? null
                  : seal(clientSecret, tenantId, target.toolId, "client_secret").sealedValue,
              keyVersion: sealedAccess.keyVersion
            })
            return { token: renewed.accessToken }
          })
        )
        if ("token" in decision) return decision.token
        // Outside the transaction, which a failure inside would roll back.
        if (decision.expire) yield* repo.expire(tenantId, target.toolId)
        return yield* Effect.fail(decision.failure)
      })

    /** The connection's access token, renewed first when it expires within a minute; or why there is none. */
    const accessToken = (tenantId: TenantId, target: OAuthTarget): Effect.Effect<string, string> =>
      Effect.gen(function* () {
        const found = yield* repo.find(tenantId, target.toolId)
        if (Option.isNone(found) || found.value.accessToken === null || found.value.resource !== target.url) {
          return yield* Effect.fail(notConnected(target))
        }
        const row = found.value
        const token = open(row.accessToken!, row.keyVersion, tenantId, target.toolId, "access_token")
        if (token === undefined) {
          return yield* Effect.fail(connectAgain(target, "its token cannot be decrypted with the configured keys"))
        }
        const now = yield* Clock.currentTimeMillis
        if (row.expiresAt === null || row.expiresAt.getTime() - now > renewWithinMs) return token
        if (row.refreshToken === null) {
          if (row.expiresAt.getTime() > now) return token
          return yield* Effect.fail(connectAgain(target, "its authorization expired"))
        }
        return yield* renew(tenantId, target, token)
      })

    /**
     * Runs `use` with the connection's access token; when the server answers
     * 401, once more with a renewed one. No token is an error `use` never sees.
     */
    const withBearer = <A>(
      tenantId: TenantId,
      target: OAuthTarget,
      use: (token: string) => Effect.Effect<A, McpFailure>
    ): Effect.Effect<A, McpFailure> =>
      Effect.gen(function* () {
        const asFailure = (message: string): McpFailure => ({ reason: "error", message })
        const token = yield* Effect.mapError(accessToken(tenantId, target), asFailure)
        const first = yield* Effect.result(use(token))
        if (Result.isSuccess(first)) return first.success
        if (first.failure.status !== 401) return yield* Effect.fail(first.failure)
        const renewed = yield* Effect.mapError(renew(tenantId, target, token), asFailure)
        return yield* use(renewed).pipe(
          Effect.mapError((failure) =>
            failure.status === 401
              ? asFailure(
                  connectAgain(target, "the server refused its renewed token").replace(" Nothing was sent.", "")
                )
              : failure
          )
        )
      })

    /** Whether the tool has tokens for its server's current URL (renewable or not). */
    const isConnected = (tenantId: TenantId, toolId: string, url: string) =>
      Effect.map(
        repo.find(tenantId, toolId),
        (found) => Option.isSome(found) && found.value.accessToken !== null && found.value.resource === url
      )

    // --- the routes -----------------------------------------------------------------

    /** The tenant's `mcp` tool using OAuth, or a 404 / 400 saying why not. */
    const oauthTool = (tenantId: TenantId, toolId: ToolId) =>
      Effect.gen(function* () {
        const found = yield* tools.findById(tenantId, toolId)
        if (Option.isNone(found)) return yield* new NotFound({ detail: `No tool ${toolId}` })
        const tool = found.value
        if (tool.settings.kind !== "mcp") {
          return yield* new BadRequest({
            detail: `The tool ${tool.name} is of kind ${tool.settings.kind}: only an mcp tool connects with OAuth`
          })
        }
        const settings = oauthSettingsOf(tool)
        if (settings === undefined) {
          return yield* new BadRequest({
            detail: `The tool ${tool.name} sends its headers as credentials: set its settings.auth to "oauth" to connect it with OAuth`
          })
        }
        return { tool, settings }
      })

    /**
     * Starts an authorization (`POST /api/tools/{id}/oauth/start`): the URL
     * the user's browser opens at the authorization server. `origin` is the
     * service's own when PUBLIC_URL is unset.
     */
    const start = Traced.fn("McpOAuth.start")(function* (tenantId: TenantId, toolId: ToolId, origin: string) {
      const { settings, tool } = yield* oauthTool(tenantId, toolId)
      const failed = (why: string) =>
        new BadRequest({ detail: `The OAuth connection of ${tool.name} cannot start: ${why}` })
      const redirectUri = `${withoutSlash(Option.getOrElse(config.publicUrl, () => origin))}${callbackPath}`
      const discovered = yield* Effect.mapError(discover(settings), failed)

      // The client registered before, when it was registered with this authorization server, for this server
      // and this redirect URI.
      const existing = yield* repo.find(tenantId, toolId)
      let client: { readonly clientId: string; readonly clientSecret: string | undefined } | undefined
      if (
        Option.isSome(existing) &&
        existing.value.issuer === discovered.issuer &&
        existing.value.resource === settings.url &&
        existing.value.redirectUri === redirectUri
      ) {
        const row = existing.value
        const secret =
          row.clientSecret === null
            ? undefined
            : open(row.clientSecret, row.keyVersion, tenantId, toolId, "client_secret")
        if (row.clientSecret === null || secret !== undefined) client = { clientId: row.clientId, clientSecret: secret }
      }
      if (client === undefined) {
        if (discovered.registrationEndpoint === undefined) {
          return yield* failed(
            `the authorization server ${discovered.issuer} offers no dynamic client registration (no registration_endpoint in its metadata)`
          )
        }
        const registered = yield* Effect.mapError(register(discovered.registrationEndpoint, redirectUri), failed)
        client = registered
        const sealedSecret =
          registered.clientSecret === undefined
            ? undefined
            : seal(registered.clientSecret, tenantId, toolId, "client_secret")
        yield* repo.saveClient(tenantId, toolId, {
          resource: settings.url,
          issuer: discovered.issuer,
          tokenEndpoint: discovered.tokenEndpoint,
          clientId: registered.clientId,
          clientSecret: sealedSecret?.sealedValue ?? null,
          redirectUri,
          keyVersion: sealedSecret?.keyVersion ?? config.secretsKeyVersion
        })
      }

      const verifier = base64url(Crypto.randomBytes(32))
      const state = base64url(Crypto.randomBytes(32))
      const sealedVerifier = seal(verifier, tenantId, toolId, "pkce_verifier")
      yield* repo.addPending({
        stateHash: stateHashOf(state),
        tenantId,
        toolId,
        resource: settings.url,
        issuer: discovered.issuer,
        tokenEndpoint: discovered.tokenEndpoint,
        clientId: client.clientId,
        clientSecret:
          client.clientSecret === undefined
            ? null
            : seal(client.clientSecret, tenantId, toolId, "client_secret").sealedValue,
        verifier: sealedVerifier.sealedValue,
        keyVersion: sealedVerifier.keyVersion,
        redirectUri
      })
      const url = new URL(discovered.authorizationEndpoint)
      url.searchParams.set("response_type", "code")
      url.searchParams.set("client_id", client.clientId)
      url.searchParams.set("redirect_uri", redirectUri)
      url.searchParams.set("code_challenge", base64url(sha256(verifier)))
      url.searchParams.set("code_challenge_method", "S256")
      url.searchParams.set("state", state)
      url.searchParams.set("resource", settings.url)
      if (discovered.scope !== undefined) url.searchParams.set("scope", discovered.scope)
      return { authorizationUrl: url.href }
    })

    /**
     * An authorization that came back (`GET /api/mcp/oauth/callback`): its
     * state taken (once, within ten minutes), the code exchanged for tokens,
     * stored sealed. Never fails: the outcome says where the user goes.
     */
    const callback = Traced.fn("McpOAuth.callback")(function* (query: {
      readonly code?: string | undefined
      readonly state?: string | undefined
      readonly error?: string | undefined
      readonly error_description?: string | undefined
    }) {
      const outcome = (error: string | undefined, tenantId?: TenantId, toolId?: string): CallbackOutcome => ({
        tenantId,
        toolId,
        error
      })
      if (query.state === undefined || query.state === "") {
        return outcome("The authorization came back without its state: start the connection again")
      }
      const taken = yield* repo.takePending(stateHashOf(query.state))
      if (Option.isNone(taken)) {
        return outcome("The authorization is unknown or was already used: start the connection again")
      }
      const pending = taken.value
      const tenantId = pending.tenantId as TenantId
      const toolId = pending.toolId
      if (!pending.fresh) {
        return outcome("The authorization took more than 10 minutes: start the connection again", tenantId, toolId)
      }
      if (query.error !== undefined) {
        const described = query.error_description === undefined ? "" : `: ${query.error_description}`
        return outcome(`The authorization server answered ${excerpt(`${query.error}${described}`)}`, tenantId, toolId)
      }
      if (query.code === undefined || query.code === "") {
        return outcome("The authorization came back without a code", tenantId, toolId)
      }
      const verifier = open(pending.verifier, pending.keyVersion, tenantId, toolId, "pkce_verifier")
      const clientSecret =
        pending.clientSecret === null
          ? undefined
          : open(pending.clientSecret, pending.keyVersion, tenantId, toolId, "client_secret")
      if (verifier === undefined || (pending.clientSecret !== null && clientSecret === undefined)) {
        return outcome(
          "The authorization cannot be decrypted with the configured keys: start the connection again",
          tenantId,
          toolId
        )
      }
      const now = yield* Clock.currentTimeMillis
      const answer = yield* Effect.result(
        tokenRequest(
          pending.tokenEndpoint,
          { clientId: pending.clientId, clientSecret },
          {
            grant_type: "authorization_code",
            code: query.code,
            redirect_uri: pending.redirectUri,
            code_verifier: verifier,
            resource: pending.resource
          }
        )
      )
      if (Result.isFailure(answer)) {
        return outcome(`The code could not be exchanged for a token: ${answer.failure.message}`, tenantId, toolId)
      }
      const tokens = answer.success
      const sealedAccess = seal(tokens.accessToken, tenantId, toolId, "access_token")
      yield* repo.connect(
        tenantId,
        toolId,
        {
          resource: pending.resource,
          issuer: pending.issuer,
          tokenEndpoint: pending.tokenEndpoint,
          clientId: pending.clientId,
          redirectUri: pending.redirectUri,
          clientSecret:
            clientSecret === undefined ? null : seal(clientSecret, tenantId, toolId, "client_secret").sealedValue,
          keyVersion: sealedAccess.keyVersion
        },
        {
          accessToken: sealedAccess.sealedValue,
          refreshToken:
            tokens.refreshToken === undefined
              ? null
              : seal(tokens.refreshToken, tenantId, toolId, "refresh_token").sealedValue,
          expiresAt: expiryOf(now, tokens),
          scope: tokens.scope ?? null
        }
      )
      return outcome(undefined, tenantId, toolId)
    })

    /** What `GET /api/tools/{id}/oauth` shows. */
    const status = Traced.fn("McpOAuth.status")(function* (tenantId: TenantId, toolId: ToolId) {
      const { settings } = yield* oauthTool(tenantId, toolId)
      const found = yield* repo.find(tenantId, toolId)
      const none: ConnectionStatus = {
        status: "not_connected",
        authorizationServer: null,
        scope: null,
        expiresAt: null,
        connectedAt: null
      }
      if (Option.isNone(found)) return none
      const row: ConnectionRow = found.value
      if (row.accessToken === null || row.resource !== settings.url) {
        return { ...none, authorizationServer: row.resource === settings.url ? row.issuer : null }
      }
      const now = yield* Clock.currentTimeMillis
      const expired = row.expiresAt !== null && row.expiresAt.getTime() <= now && row.refreshToken === null
      return {
        status: expired ? "expired" : "connected",
        authorizationServer: row.issuer,
        scope: row.scope,
        expiresAt: row.expiresAt?.toISOString() ?? null,
        connectedAt: row.connectedAt?.toISOString() ?? null
      } satisfies ConnectionStatus
    })

    /** Forgets the tool's tokens (`DELETE /api/tools/{id}/oauth`). */
    const disconnect = Traced.fn("McpOAuth.disconnect")(function* (tenantId: TenantId, toolId: ToolId) {
      yield* oauthTool(tenantId, toolId)
      yield* repo.forget(tenantId, toolId)
    })

    return { start, callback, status, disconnect, withBearer, accessToken, isConnected } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make).pipe(
    Layer.provide([McpOAuthRepo.layer, ToolsRepo.layer, SecretVault.layer, Guard.EgressGuard.layer])
  )
}
