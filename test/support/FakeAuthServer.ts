import { Effect } from "effect"
import * as Crypto from "node:crypto"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"

// An OAuth 2.1 authorization server and an MCP server it protects, both on
// loopback, speaking the wire protocol of the MCP authorization specification
// (revision 2025-06-18):
// - the authorization server: its metadata (RFC 8414), dynamic client
//   registration (RFC 7591), an authorize endpoint that approves at once (a
//   302 to the redirect URI with the code and the state), and a token endpoint
//   that checks PKCE S256, the redirect URI and the resource (RFC 8707), issues
//   access tokens of a configurable lifetime, rotates refresh tokens (each good
//   once) and can be told to refuse refreshes;
// - the protected resource: a proxy in front of an MCP server (a FakeMcpServer)
//   that answers 401 with `WWW-Authenticate: Bearer resource_metadata=...`
//   without a valid access token, and serves its metadata (RFC 9728).

/** A request the token endpoint received, its secrets left out. */
export interface TokenRequest {
  readonly grantType: string
  readonly resource: string | undefined
  readonly clientId: string | undefined
  readonly status: number
}

const base64url = (bytes: Buffer) => bytes.toString("base64url")

const readBody = async (request: Http.IncomingMessage) => {
  const chunks: Array<Buffer> = []
  for await (const chunk of request) chunks.push(chunk as Buffer)
  return Buffer.concat(chunks).toString("utf8")
}

const json = (response: Http.ServerResponse, status: number, body: unknown, headers: Http.OutgoingHttpHeaders = {}) => {
  response.writeHead(status, { "content-type": "application/json", "cache-control": "no-store", ...headers })
  response.end(JSON.stringify(body))
}

const listen = (server: Http.Server) =>
  Effect.callback<number>((resume) => {
    server.listen(0, "127.0.0.1", () => resume(Effect.succeed((server.address() as AddressInfo).port)))
  })

const closing = (server: Http.Server) =>
  Effect.addFinalizer(() =>
    Effect.promise(() => {
      server.closeAllConnections()
      return new Promise<void>((resolve) => server.close(() => resolve()))
    })
  )

/**
 * The authorization server and the protected MCP server in front of `mcpUrl`.
 * `expiresIn` is the lifetime of the access tokens issued (seconds), changed
 * later with `setExpiresIn`.
 */
export const make = (options: {
  readonly mcpUrl: string
  readonly expiresIn?: number
  readonly scopes?: ReadonlyArray<string>
  /** Without it, the metadata names no registration endpoint. */
  readonly registration?: boolean
  /** Without it, the 401 names no resource_metadata: the client must find the metadata at its well-known URL. */
  readonly hint?: boolean
}) =>
  Effect.gen(function* () {
    let expiresIn = options.expiresIn ?? 3600
    let refusingRefresh = false
    let denying = false
    const resourceGets: Array<string> = []
    const clients = new Map<string, { readonly redirectUris: ReadonlyArray<string> }>()
    const codes = new Map<
      string,
      { readonly clientId: string; readonly redirectUri: string; readonly challenge: string; readonly resource: string }
    >()
    const accessTokens = new Map<string, number>()
    const refreshTokens = new Map<string, { readonly clientId: string; readonly resource: string }>()
    const issuedAccess: Array<string> = []
    const issuedRefresh: Array<string> = []
    const tokenRequests: Array<TokenRequest> = []
    const authorizeRequests: Array<URLSearchParams> = []
    const registrations: Array<Record<string, unknown>> = []
    let unauthorized = 0

    const issue = (clientId: string, resource: string) => {
      const access = `at_${base64url(Crypto.randomBytes(24))}`
      const refresh = `rt_${base64url(Crypto.randomBytes(24))}`
      accessTokens.set(access, Date.now() + expiresIn * 1000)
      refreshTokens.set(refresh, { clientId, resource })
      issuedAccess.push(access)
      issuedRefresh.push(refresh)
      return {
        access_token: access,
        token_type: "Bearer",
        expires_in: expiresIn,
        refresh_token: refresh,
        scope: (options.scopes ?? ["mcp:tools"]).join(" ")
      }
    }

    // --- the authorization server -----------------------------------------------
    let issuer = ""
    const authServer = Http.createServer((request, response) => {
      void (async () => {
        const url = new URL(request.url ?? "/", issuer)
        if (request.method === "GET" && url.pathname === "/.well-known/oauth-authorization-server") {
          return json(response, 200, {
            issuer,
            authorization_endpoint: `${issuer}/authorize`,
            token_endpoint: `${issuer}/token`,
            ...(options.registration === false ? {} : { registration_endpoint: `${issuer}/register` }),
            response_types_supported: ["code"],
            grant_types_supported: ["authorization_code", "refresh_token"],
            code_challenge_methods_supported: ["S256"],
            token_endpoint_auth_methods_supported: ["none"]
          })
        }
        if (request.method === "POST" && url.pathname === "/register") {
          const body = JSON.parse(await readBody(request)) as Record<string, unknown>
          registrations.push(body)
          const redirectUris = Array.isArray(body.redirect_uris) ? (body.redirect_uris as Array<string>) : []
          if (redirectUris.length === 0) return json(response, 400, { error: "invalid_redirect_uri" })
          const clientId = `client_${base64url(Crypto.randomBytes(8))}`
          clients.set(clientId, { redirectUris })
          return json(response, 201, {
            ...body,
            client_id: clientId,
            client_id_issued_at: Math.floor(Date.now() / 1000)
          })
        }
        if (request.method === "GET" && url.pathname === "/authorize") {
          authorizeRequests.push(url.searchParams)
          const get = (name: string) => url.searchParams.get(name) ?? ""
          const client = clients.get(get("client_id"))
          if (client === undefined || !client.redirectUris.includes(get("redirect_uri"))) {
            return json(response, 400, {
              error: "invalid_request",
              error_description: "unknown client or redirect_uri"
            })
          }
          const back = new URL(get("redirect_uri"))
          back.searchParams.set("state", get("state"))
          if (denying) {
            back.searchParams.set("error", "access_denied")
            back.searchParams.set("error_description", "The user refused")
          } else if (
            get("response_type") !== "code" ||
            get("code_challenge_method") !== "S256" ||
            get("resource") === ""
          ) {
            back.searchParams.set("error", "invalid_request")
            back.searchParams.set("error_description", "expected a code request with PKCE S256 and a resource")
          } else {
            const code = `code_${base64url(Crypto.randomBytes(16))}`
            codes.set(code, {
              clientId: get("client_id"),
              redirectUri: get("redirect_uri"),
              challenge: get("code_challenge"),
              resource: get("resource")
            })
            back.searchParams.set("code", code)
          }
          response.writeHead(302, { location: back.href })
          return response.end()
        }
        if (request.method === "POST" && url.pathname === "/token") {
          const form = new URLSearchParams(await readBody(request))
          const answer = (status: number, body: unknown) => {
            tokenRequests.push({
              grantType: form.get("grant_type") ?? "",
              resource: form.get("resource") ?? undefined,
              clientId: form.get("client_id") ?? undefined,
              status
            })
            json(response, status, body)
          }
          if (form.get("grant_type") === "authorization_code") {
            const code = codes.get(form.get("code") ?? "")
            codes.delete(form.get("code") ?? "")
            if (code === undefined) return answer(400, { error: "invalid_grant", error_description: "unknown code" })
            const challenge = base64url(
              Crypto.createHash("sha256")
                .update(form.get("code_verifier") ?? "")
                .digest()
            )
            if (challenge !== code.challenge) {
              return answer(400, { error: "invalid_grant", error_description: "PKCE verification failed" })
            }
            if (form.get("client_id") !== code.clientId || form.get("redirect_uri") !== code.redirectUri) {
              return answer(400, { error: "invalid_grant", error_description: "client or redirect_uri differ" })
            }
            if (form.get("resource") !== code.resource) {
              return answer(400, { error: "invalid_target", error_description: "resource differs" })
            }
            return answer(200, issue(code.clientId, code.resource))
          }
          if (form.get("grant_type") === "refresh_token") {
            const token = form.get("refresh_token") ?? ""
            const grant = refreshTokens.get(token)
            if (refusingRefresh) return answer(400, { error: "invalid_grant", error_description: "refresh refused" })
            if (grant === undefined) {
              return answer(400, { error: "invalid_grant", error_description: "unknown or spent refresh token" })
            }
            if (form.get("resource") !== grant.resource || form.get("client_id") !== grant.clientId) {
              return answer(400, { error: "invalid_target", error_description: "resource or client differ" })
            }
            // Rotation: a refresh token is good once.
            refreshTokens.delete(token)
            return answer(200, issue(grant.clientId, grant.resource))
          }
          return answer(400, { error: "unsupported_grant_type" })
        }
        json(response, 404, { error: "not_found" })
      })().catch(() => {
        if (!response.headersSent) response.writeHead(500)
        response.end()
      })
    })
    const authPort = yield* listen(authServer)
    yield* closing(authServer)
    issuer = `http://127.0.0.1:${authPort}`

    // --- the protected resource ---------------------------------------------------
    const upstream = new URL(options.mcpUrl)
    let resourceOrigin = ""
    const metadataPath = `/.well-known/oauth-protected-resource${upstream.pathname}`
    const resourceServer = Http.createServer((request, response) => {
      void (async () => {
        const url = new URL(request.url ?? "/", resourceOrigin)
        if (request.method === "GET") resourceGets.push(url.pathname)
        if (request.method === "GET" && url.pathname === metadataPath) {
          return json(response, 200, {
            resource: `${resourceOrigin}${upstream.pathname}`,
            authorization_servers: [issuer],
            scopes_supported: options.scopes ?? ["mcp:tools"],
            bearer_methods_supported: ["header"]
          })
        }
        const presented = /^Bearer (.+)$/i.exec(request.headers.authorization ?? "")?.[1]
        const expiry = presented === undefined ? undefined : accessTokens.get(presented)
        if (expiry === undefined || expiry <= Date.now()) {
          unauthorized++
          await readBody(request)
          return json(
            response,
            401,
            { jsonrpc: "2.0", error: { code: -32001, message: "Unauthorized" }, id: null },
            {
              "www-authenticate":
                options.hint === false
                  ? 'Bearer error="invalid_token"'
                  : `Bearer error="invalid_token", resource_metadata="${resourceOrigin}${metadataPath}"`
            }
          )
        }
        const body = await readBody(request)
        const headers = { ...request.headers, host: upstream.host }
        const forwarded = Http.request(
          {
            host: upstream.hostname,
            port: upstream.port,
            path: `${upstream.pathname}${url.search}`,
            method: request.method,
            headers
          },
          (answer) => {
            response.writeHead(answer.statusCode ?? 502, answer.headers)
            answer.pipe(response)
          }
        )
        forwarded.on("error", () => {
          if (!response.headersSent) response.writeHead(502)
          response.end()
        })
        forwarded.end(body)
      })().catch(() => {
        if (!response.headersSent) response.writeHead(500)
        response.end()
      })
    })
    const resourcePort = yield* listen(resourceServer)
    yield* closing(resourceServer)
    resourceOrigin = `http://127.0.0.1:${resourcePort}`

    return {
      issuer,
      /** The protected MCP server's URL: the tool's `url`. */
      url: `${resourceOrigin}${upstream.pathname}`,
      setExpiresIn: (seconds: number) => {
        expiresIn = seconds
      },
      refuseRefresh: (refuse: boolean) => {
        refusingRefresh = refuse
      },
      /** The authorize endpoint answers access_denied, as when the user refuses. */
      deny: (refuse: boolean) => {
        denying = refuse
      },
      /** The paths of the GETs the protected resource received (its metadata's). */
      resourceGets: () => [...resourceGets],
      /** Every access token issued stops being accepted, as on a revocation. */
      revokeAccessTokens: () => accessTokens.clear(),
      issuedAccessTokens: () => [...issuedAccess],
      issuedRefreshTokens: () => [...issuedRefresh],
      tokenRequests: () => [...tokenRequests],
      refreshes: () => tokenRequests.filter((one) => one.grantType === "refresh_token" && one.status === 200).length,
      authorizeRequests: () => [...authorizeRequests],
      registrations: () => [...registrations],
      /** Requests the protected resource answered 401. */
      unauthorized: () => unauthorized
    }
  })
