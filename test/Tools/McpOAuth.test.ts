import { assert, describe, layer } from "@effect/vitest"
import { Effect, Option } from "effect"
import * as SqlClient from "effect/sql/SqlClient"
import * as FakeAuthServer from "../support/FakeAuthServer.ts"
import * as FakeMcpServer from "../support/FakeMcpServer.ts"
import * as TestServer from "../support/TestServer.ts"
import { type Account, TestClient } from "../support/TestServer.ts"

// `mcp` tools with `auth: "oauth"` (docs/mcp.md#oauth): the connection made
// through the real routes (start, the authorization server's approval, our
// callback), then calls with its token, renewed before it expires or after a
// 401, against a fake authorization server and a protected MCP server on
// loopback.

const session = (account: Account) => ({ headers: TestServer.bearer(account.token) })

const oauthTool = (url: string, settings: Record<string, unknown> = {}) => ({
  name: "shop",
  description: "The shop's MCP server.",
  parameters: { type: "object" },
  settings: { kind: "mcp", url, allowedHosts: ["127.0.0.1"], auth: "oauth", ...settings }
})

const request = (method: string, path: string, account: Account, body?: unknown) =>
  Effect.flatMap(TestClient, (client) =>
    client.request(method, path, { ...session(account), ...(body === undefined ? {} : { body }) })
  )

/** The fake MCP server behind the fake authorization server, and a tenant with the oauth tool `shop` of it. */
const setUp = (
  options: { readonly expiresIn?: number; readonly registration?: boolean; readonly hint?: boolean } = {}
) =>
  Effect.gen(function* () {
    const mcp = yield* FakeMcpServer.make
    const auth = yield* FakeAuthServer.make({ mcpUrl: mcp.url, ...options })
    const account = yield* TestServer.signUp()
    const created = yield* request("POST", "/api/tools", account, oauthTool(auth.url))
    assert.strictEqual(created.status, 201, created.text)
    return { mcp, auth, account, toolId: created.body.id as string, tool: created.body }
  })

/** What a browser does: open the authorization URL, follow its redirect to our callback, and where that leads. */
const approve = (authorizationUrl: string) =>
  Effect.gen(function* () {
    const client = yield* TestClient
    const approval = yield* Effect.promise(() => fetch(authorizationUrl, { redirect: "manual" }))
    assert.strictEqual(approval.status, 302)
    const callback = approval.headers.get("location")!
    assert.isTrue(callback.startsWith(`${client.baseUrl}/api/mcp/oauth/callback?`), callback)
    const back = yield* Effect.promise(() => fetch(callback, { redirect: "manual" }))
    assert.strictEqual(back.status, 302)
    return { callback, location: new URL(back.headers.get("location")!, client.baseUrl) }
  })

const connect = (account: Account, toolId: string) =>
  Effect.gen(function* () {
    const started = yield* request("POST", `/api/tools/${toolId}/oauth/start`, account, {})
    assert.strictEqual(started.status, 200, started.text)
    const approved = yield* approve(started.body.authorizationUrl)
    assert.strictEqual(approved.location.searchParams.get("oauth"), "connected", approved.location.href)
    return { authorizationUrl: new URL(started.body.authorizationUrl as string), ...approved }
  })

const testCall = (account: Account, toolId: string, text: string) =>
  Effect.map(
    request("POST", `/api/tools/${toolId}/test`, account, { arguments: { tool: "echo", arguments: { text } } }),
    (reply) => {
      assert.strictEqual(reply.status, 200, reply.text)
      return reply
    }
  )

const status = (account: Account, toolId: string) =>
  Effect.map(request("GET", `/api/tools/${toolId}/oauth`, account), (reply) => {
    assert.strictEqual(reply.status, 200, reply.text)
    return reply
  })

/** Runs a one-step orchestration of a local agent given the tool, prompting `prompt`; the execution and its calls. */
const execute = (account: Account, toolId: string, prompt: string) =>
  Effect.gen(function* () {
    const client = yield* TestClient
    const { key } = yield* TestServer.createKey(account, ["execute", "read"])
    const agent = yield* TestServer.createAgent(account, { model: "local", toolIds: [toolId] })
    const orchestration = yield* request("POST", "/api/orchestrations", account, {
      name: "MCP",
      steps: [{ id: "s", agentId: agent.id, prompt }]
    })
    assert.strictEqual(orchestration.status, 201, orchestration.text)
    const started = yield* client.request("POST", `/api/v1/orchestrations/${orchestration.body.id}/execute`, {
      headers: TestServer.bearer(key),
      body: { input: "hello" }
    })
    assert.strictEqual(started.status, 202, started.text)
    const id = started.body.executionId as string
    const execution = yield* TestServer.waitFor(
      "the execution to finish",
      Effect.map(client.request("GET", `/api/v1/executions/${id}`, { headers: TestServer.bearer(key) }), (reply) =>
        reply.body.status === "completed" || reply.body.status === "failed" ? reply.body : undefined
      )
    )
    const calls = yield* client.request("GET", `/api/v1/executions/${id}/tool-calls`, {
      headers: TestServer.bearer(key)
    })
    assert.strictEqual(calls.status, 200, calls.text)
    return { execution, calls }
  })

const assertNoToken = (
  text: string,
  auth: { issuedAccessTokens: () => Array<string>; issuedRefreshTokens: () => Array<string> }
) => {
  for (const token of [...auth.issuedAccessTokens(), ...auth.issuedRefreshTokens()]) assert.notInclude(text, token)
}

layer(TestServer.layer({ webhookAllowPrivate: true }), { excludeTestServices: true })("mcp tools with OAuth", (it) => {
  describe("connecting", () => {
    it.effect(
      "start, approval and callback connect the tool: a client registered, PKCE and the resource sent, tools listed",
      () =>
        Effect.scoped(
          Effect.gen(function* () {
            const client = yield* TestClient
            const { account, auth, mcp, tool, toolId } = yield* setUp()
            // Saved without listing: it is not connected yet.
            assert.deepStrictEqual(tool.settings.serverTools, [])
            assert.strictEqual(tool.settings.auth, "oauth")
            assert.deepStrictEqual(mcp.methods(), [])
            const before = yield* status(account, toolId)
            assert.deepStrictEqual(before.body, {
              status: "not_connected",
              authorizationServer: null,
              scope: null,
              expiresAt: null,
              connectedAt: null
            })

            const { authorizationUrl, callback, location } = yield* connect(account, toolId)
            const params = authorizationUrl.searchParams
            assert.strictEqual(authorizationUrl.origin + authorizationUrl.pathname, `${auth.issuer}/authorize`)
            assert.strictEqual(params.get("response_type"), "code")
            assert.strictEqual(params.get("code_challenge_method"), "S256")
            assert.match(params.get("code_challenge")!, /^[A-Za-z0-9_-]{43}$/)
            assert.strictEqual(params.get("redirect_uri"), `${client.baseUrl}/api/mcp/oauth/callback`)
            assert.strictEqual(params.get("resource"), auth.url)
            assert.strictEqual(params.get("scope"), "mcp:tools")
            assert.isAtLeast(params.get("state")!.length, 32)
            assert.deepInclude(auth.registrations()[0], {
              redirect_uris: [`${client.baseUrl}/api/mcp/oauth/callback`],
              grant_types: ["authorization_code", "refresh_token"],
              response_types: ["code"],
              token_endpoint_auth_method: "none"
            })
            assert.strictEqual(location.pathname, "/app/tools")
            assert.strictEqual(location.searchParams.get("tool"), toolId)
            assert.deepInclude(auth.tokenRequests()[0], {
              grantType: "authorization_code",
              resource: auth.url,
              status: 200
            })

            const read = yield* request("GET", `/api/tools/${toolId}`, account)
            assert.deepStrictEqual(
              (read.body.settings.serverTools as Array<{ name: string; exposedAs: string | null }>).map((one) => [
                one.name,
                one.exposedAs
              ]),
              [
                ["echo", "shop__echo"],
                ["fail", "shop__fail"],
                ["mixed", "shop__mixed"]
              ]
            )
            // Listed with the token the authorization server issued.
            const listing = mcp.received.find((one) => one.method === "tools/list")!
            assert.strictEqual(listing.headers.authorization, `Bearer ${auth.issuedAccessTokens()[0]}`)
            const after = yield* status(account, toolId)
            assert.strictEqual(after.body.status, "connected")
            assert.strictEqual(after.body.authorizationServer, auth.issuer)
            assert.strictEqual(after.body.scope, "mcp:tools")
            assert.isTrue(Date.parse(after.body.expiresAt) > Date.now() + 3_000_000)
            assert.isTrue(Date.parse(after.body.connectedAt) <= Date.now())
            assertNoToken(read.text + after.text, auth)

            // The state is good once.
            const again = yield* Effect.promise(() => fetch(callback, { redirect: "manual" }))
            assert.strictEqual(again.status, 302)
            const refused = new URL(again.headers.get("location")!, client.baseUrl)
            assert.strictEqual(refused.searchParams.get("oauth"), "error")
            assert.match(refused.searchParams.get("detail")!, /unknown or was already used/)
            assert.strictEqual(auth.tokenRequests().filter((one) => one.grantType === "authorization_code").length, 1)

            // Connecting again reuses the client registered.
            yield* connect(account, toolId)
            assert.strictEqual(auth.registrations().length, 1)
          })
        )
    )

    it.effect("without a resource_metadata hint, the metadata is found at its path-aware well-known URL", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const { account, auth, toolId } = yield* setUp({ hint: false })
          yield* connect(account, toolId)
          assert.deepStrictEqual(auth.resourceGets(), ["/.well-known/oauth-protected-resource/mcp"])
          assert.strictEqual((yield* status(account, toolId)).body.status, "connected")
        })
      )
    )

    it.effect("a refusal at the authorization server comes back as an error naming it, and nothing is stored", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const { account, auth, toolId } = yield* setUp()
          auth.deny(true)
          const started = yield* request("POST", `/api/tools/${toolId}/oauth/start`, account)
          assert.strictEqual(started.status, 200, started.text)
          const { location } = yield* approve(started.body.authorizationUrl)
          assert.strictEqual(location.searchParams.get("tool"), toolId)
          assert.strictEqual(location.searchParams.get("oauth"), "error")
          assert.match(location.searchParams.get("detail")!, /access_denied: The user refused/)
          assert.strictEqual(auth.tokenRequests().length, 0)
          assert.strictEqual((yield* status(account, toolId)).body.status, "not_connected")
        })
      )
    )

    it.effect("a state older than 10 minutes, or unknown, is refused and nothing is exchanged", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const client = yield* TestClient
          const sql = yield* SqlClient.SqlClient
          const { account, auth, toolId } = yield* setUp()
          const started = yield* request("POST", `/api/tools/${toolId}/oauth/start`, account)
          assert.strictEqual(started.status, 200, started.text)
          yield* sql`UPDATE mcp_oauth_pending SET created_at = now() - interval '11 minutes' WHERE tool_id = ${toolId}`
          const { location } = yield* approve(started.body.authorizationUrl)
          assert.strictEqual(location.searchParams.get("tool"), toolId)
          assert.strictEqual(location.searchParams.get("oauth"), "error")
          assert.match(location.searchParams.get("detail")!, /more than 10 minutes/)
          assert.strictEqual(auth.tokenRequests().length, 0)
          assert.strictEqual((yield* status(account, toolId)).body.status, "not_connected")

          const unknown = yield* Effect.promise(() =>
            fetch(`${client.baseUrl}/api/mcp/oauth/callback?code=x&state=made-up`, { redirect: "manual" })
          )
          assert.strictEqual(unknown.status, 302)
          const to = new URL(unknown.headers.get("location")!, client.baseUrl)
          assert.deepStrictEqual([to.searchParams.get("tool"), to.searchParams.get("oauth")], [null, "error"])
        })
      )
    )

    it.effect("settings and routes refuse what OAuth cannot do, each with a 400 naming why", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const mcp = yield* FakeMcpServer.make
          const account = yield* TestServer.signUp()
          const withAuthorization = yield* request(
            "POST",
            "/api/tools",
            account,
            oauthTool(mcp.url, { headers: { Authorization: "Bearer x" } })
          )
          assert.strictEqual(withAuthorization.status, 400, withAuthorization.text)
          assert.deepStrictEqual(withAuthorization.body.errors[0].path, [
            "payload",
            "settings",
            "headers",
            "Authorization"
          ])

          const headersTool = yield* request("POST", "/api/tools", account, {
            ...oauthTool(mcp.url),
            name: "plain",
            settings: { kind: "mcp", url: mcp.url, allowedHosts: ["127.0.0.1"] }
          })
          assert.strictEqual(headersTool.status, 201, headersTool.text)
          assert.isUndefined(headersTool.body.settings.auth)
          for (const [method, path] of [
            ["POST", "oauth/start"],
            ["GET", "oauth"],
            ["DELETE", "oauth"]
          ] as const) {
            const refused = yield* request(method, `/api/tools/${headersTool.body.id}/${path}`, account)
            assert.strictEqual(refused.status, 400, refused.text)
            assert.match(refused.body.detail, /auth to "oauth"/)
          }
        })
      )
    )

    it.effect("an authorization server without client registration: start is a 400 saying so", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const { account, toolId } = yield* setUp({ registration: false })
          const refused = yield* request("POST", `/api/tools/${toolId}/oauth/start`, account)
          assert.strictEqual(refused.status, 400, refused.text)
          assert.match(refused.body.detail, /offers no dynamic client registration/)
        })
      )
    )

    it.effect("another tenant can neither start, read nor delete the connection", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const { account, toolId } = yield* setUp()
          yield* connect(account, toolId)
          const other = yield* TestServer.signUp()
          for (const [method, path] of [
            ["POST", "oauth/start"],
            ["GET", "oauth"],
            ["DELETE", "oauth"]
          ] as const) {
            const refused = yield* request(method, `/api/tools/${toolId}/${path}`, other)
            assert.strictEqual(refused.status, 404, refused.text)
          }
          assert.strictEqual((yield* status(account, toolId)).body.status, "connected")
        })
      )
    )
  })

  describe("calls", () => {
    it.effect("a call in an execution sends the token; it is in no recorded request, answer or listing", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const { account, auth, mcp, toolId } = yield* setUp()
          yield* connect(account, toolId)
          const { calls, execution } = yield* execute(account, toolId, 'call shop__echo {"text": "{{input}}"}')
          assert.strictEqual(execution.status, "completed", JSON.stringify(execution))
          assert.include(execution.output, 'shop__echo answered: "echo: hello"')
          const sent = mcp.received.filter((one) => one.method === "tools/call")
          assert.strictEqual(sent.length, 1)
          assert.strictEqual(sent[0]!.headers.authorization, `Bearer ${auth.issuedAccessTokens()[0]}`)
          assertNoToken(calls.text, auth)

          const tested = yield* testCall(account, toolId, "via test")
          assert.deepInclude(tested.body, { ok: true, output: "echo: via test" })
          const requests = tested.body.exchange.requests as Array<{ request: { headers: Record<string, string> } }>
          assert.isAbove(requests.length, 0)
          for (const one of requests) {
            assert.strictEqual(one.request.headers.authorization, "Bearer [secret OAUTH_ACCESS_TOKEN]")
          }
          assertNoToken(tested.text, auth)
        })
      )
    )

    it.effect("a token expiring within a minute is renewed first, once when two calls race, with the resource", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const { account, auth, toolId } = yield* setUp({ expiresIn: 30 })
          yield* connect(account, toolId)
          // Listing the tools at the callback already found the 30-second token too close to its expiry.
          assert.strictEqual(auth.refreshes(), 1)
          auth.setExpiresIn(3600)
          const [one, two] = yield* Effect.all([testCall(account, toolId, "one"), testCall(account, toolId, "two")], {
            concurrency: 2
          })
          assert.deepInclude(one.body, { ok: true, output: "echo: one" })
          assert.deepInclude(two.body, { ok: true, output: "echo: two" })
          assert.strictEqual(auth.refreshes(), 2)
          const refreshes = auth.tokenRequests().filter((request) => request.grantType === "refresh_token")
          assert.deepStrictEqual(
            refreshes.map((request) => [request.resource, request.status]),
            [
              [auth.url, 200],
              [auth.url, 200]
            ]
          )
          // The renewed token lasts: no renewal now.
          yield* testCall(account, toolId, "three")
          assert.strictEqual(auth.refreshes(), 2)
          assert.isTrue(Date.parse((yield* status(account, toolId)).body.expiresAt) > Date.now() + 3_000_000)
        })
      )
    )

    it.effect("a token the server refuses mid-use (401) is renewed once and the call goes through", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const { account, auth, toolId } = yield* setUp()
          yield* connect(account, toolId)
          yield* testCall(account, toolId, "first")
          auth.revokeAccessTokens()
          const refusedBefore = auth.unauthorized()
          const tested = yield* testCall(account, toolId, "after revocation")
          assert.deepInclude(tested.body, { ok: true, output: "echo: after revocation" })
          assert.strictEqual(auth.refreshes(), 1)
          assert.strictEqual(auth.unauthorized(), refusedBefore + 1)
          const requests = tested.body.exchange.requests as Array<{
            request: { headers: Record<string, string> }
            response: { status: number } | null
          }>
          assert.strictEqual(requests[0]!.response!.status, 401)
          assert.strictEqual(requests[0]!.request.headers.authorization, "Bearer [secret OAUTH_ACCESS_TOKEN]")
          assert.strictEqual(
            requests.at(-1)!.request.headers.authorization,
            "Bearer [secret OAUTH_ACCESS_TOKEN_RENEWED]"
          )
          assertNoToken(tested.text, auth)
        })
      )
    )

    it.effect(
      "an expired connection whose renewal is refused: the call fails asking to connect again, nothing sent",
      () =>
        Effect.scoped(
          Effect.gen(function* () {
            const { account, auth, mcp, toolId } = yield* setUp({ expiresIn: 30 })
            yield* connect(account, toolId)
            auth.refuseRefresh(true)
            const calls = mcp.methods().filter((method) => method === "tools/call").length
            const tested = yield* testCall(account, toolId, "x")
            assert.deepInclude(tested.body, { ok: false, errorKind: "error" })
            assert.include(
              tested.body.output,
              `The MCP server of the tool "shop" (${auth.url}) needs to be connected again`
            )
            assert.include(tested.body.output, "refresh refused")
            assert.include(tested.body.output, "Tools → shop → Connect")
            assert.strictEqual(mcp.methods().filter((method) => method === "tools/call").length, calls)
            const after = yield* status(account, toolId)
            assert.strictEqual(after.body.status, "expired")
            assertNoToken(tested.text + after.text, auth)
          })
        )
    )

    it.effect("a tool not connected (or disconnected): the call fails asking to connect it, and refresh is a 400", () =>
      Effect.scoped(
        Effect.gen(function* () {
          const { account, auth, mcp, toolId } = yield* setUp()
          const refreshed = yield* request("POST", `/api/tools/${toolId}/refresh`, account)
          assert.strictEqual(refreshed.status, 400, refreshed.text)
          assert.match(refreshed.body.detail, /connect it first/)

          yield* connect(account, toolId)
          const removed = yield* request("DELETE", `/api/tools/${toolId}/oauth`, account)
          assert.strictEqual(removed.status, 204, removed.text)
          assert.strictEqual((yield* status(account, toolId)).body.status, "not_connected")
          const sentBefore = mcp.received.length
          const { calls, execution } = yield* execute(account, toolId, 'call shop__echo {"text": "{{input}}"}')
          assert.strictEqual(execution.status, "completed", JSON.stringify(execution))
          const [call] = calls.body.data as Array<Record<string, unknown>>
          assert.strictEqual(call!.status, "failed")
          assert.include(
            call!.error as string,
            `The MCP server of the tool "shop" (${auth.url}) is not connected: connect it in the dashboard ` +
              "(Tools → shop → Connect)"
          )
          assert.strictEqual(mcp.received.length, sentBefore)
        })
      )
    )
  })
})

layer(TestServer.layer({ webhookAllowPrivate: true, publicUrl: Option.some("https://agents.example.com/") }), {
  excludeTestServices: true
})("mcp tools with OAuth behind PUBLIC_URL", (it) => {
  it.effect("the redirect URI is PUBLIC_URL's, and the code is exchanged with it", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const client = yield* TestClient
        const { account, auth, toolId } = yield* setUp()
        const started = yield* request("POST", `/api/tools/${toolId}/oauth/start`, account)
        assert.strictEqual(started.status, 200, started.text)
        const redirectUri = "https://agents.example.com/api/mcp/oauth/callback"
        assert.strictEqual(new URL(started.body.authorizationUrl).searchParams.get("redirect_uri"), redirectUri)
        assert.deepStrictEqual(auth.registrations()[0]!.redirect_uris, [redirectUri])
        const approval = yield* Effect.promise(() => fetch(started.body.authorizationUrl, { redirect: "manual" }))
        const callback = new URL(approval.headers.get("location")!)
        assert.strictEqual(`${callback.origin}${callback.pathname}`, redirectUri)
        // The public name's proxy forwards it here.
        const back = yield* Effect.promise(() =>
          fetch(`${client.baseUrl}${callback.pathname}${callback.search}`, { redirect: "manual" })
        )
        assert.strictEqual(back.headers.get("location"), `/app/tools?tool=${toolId}&oauth=connected`)
      })
    )
  )
})
