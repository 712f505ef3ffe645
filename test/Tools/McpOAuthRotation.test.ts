import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Option, Redacted } from "effect"
import * as SqlClient from "effect/sql/SqlClient"
import * as Crypto from "node:crypto"
import { defined, eventually } from "../support/Eventually.ts"
import * as FakeAuthServer from "../support/FakeAuthServer.ts"
import * as FakeMcpServer from "../support/FakeMcpServer.ts"
import * as TestServer from "../support/TestServer.ts"
import { type Account, TestClient } from "../support/TestServer.ts"

// Rotating SECRETS_KEY with `mcp` tools connected with OAuth
// (docs/secrets.md): the pass each node starts re-seals the connections' tokens
// and the authorizations in progress under the new key, so the old key can be
// dropped from SECRETS_PREVIOUS_KEYS without connecting the tools again.

const request = (method: string, path: string, account: Account, body?: unknown) =>
  Effect.flatMap(TestClient, (client) =>
    client.request(method, path, {
      headers: TestServer.bearer(account.token),
      ...(body === undefined ? {} : { body })
    })
  )

/** The service on an existing database with `overrides`, for as long as `body` runs, then stopped. */
const withServer = <A, E, R>(
  databaseUrl: string,
  overrides: Parameters<typeof TestServer.layer>[0],
  body: Effect.Effect<A, E, R>
) =>
  Effect.scoped(
    Effect.gen(function* () {
      const context = yield* Layer.build(
        TestServer.layer({
          webhookAllowPrivate: true,
          ...overrides,
          databaseUrl: Option.some(Redacted.make(databaseUrl))
        })
      )
      return yield* Effect.provideContext(body, context as any) as Effect.Effect<A, E>
    })
  )

const keyOf = () => Redacted.make(Crypto.randomBytes(32).toString("base64"))

const connectionRow = (toolId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<Record<string, unknown>>`SELECT * FROM mcp_oauth_connections WHERE tool_id = ${toolId}`.pipe(
      Effect.map((rows) => defined(`the connection of ${toolId}`, rows[0])),
      Effect.orDie
    )
  )

const pendingRow = (toolId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<Record<string, unknown>>`SELECT * FROM mcp_oauth_pending WHERE tool_id = ${toolId}`.pipe(
      Effect.map((rows) => defined(`the authorization in progress of ${toolId}`, rows[0])),
      Effect.orDie
    )
  )

/** Calls the server's `echo` through the tool's test route; the answer must be a success. */
const echo = (account: Account, toolId: string, text: string) =>
  Effect.map(
    request("POST", `/api/tools/${toolId}/test`, account, { arguments: { tool: "echo", arguments: { text } } }),
    (reply) => {
      assert.strictEqual(reply.status, 200, reply.text)
      assert.deepInclude(reply.body, { ok: true, output: `echo: ${text}` }, reply.text)
      return reply
    }
  )

/** The authorization server's approval, then our callback on the running server (its port changed since). */
const approve = (authorizationUrl: string) =>
  Effect.gen(function* () {
    const client = yield* TestClient
    const approval = yield* Effect.promise(() => fetch(authorizationUrl, { redirect: "manual" }))
    assert.strictEqual(approval.status, 302)
    const callback = new URL(approval.headers.get("location")!)
    const back = yield* Effect.promise(() =>
      fetch(`${client.baseUrl}${callback.pathname}${callback.search}`, { redirect: "manual" })
    )
    assert.strictEqual(back.status, 302)
    return new URL(back.headers.get("location")!, client.baseUrl)
  })

describe("key rotation of mcp tools' OAuth connections", () => {
  it.live(
    "a connection and an authorization in progress sealed under version 1 are re-sealed under version 2, and work once the old key is dropped",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          const databaseUrl = yield* TestServer.TestDatabaseUrl
          const mcp = yield* FakeMcpServer.make
          const auth = yield* FakeAuthServer.make({ mcpUrl: mcp.url })
          const first = keyOf()
          const second = keyOf()
          const sentTokens = () =>
            mcp.received.filter((one) => one.method === "tools/call").map((one) => one.headers.authorization)

          // Connected under the key of version 1, and a second authorization started and not yet approved.
          const made = yield* withServer(
            databaseUrl,
            { secretsKey: Option.some(first) },
            Effect.gen(function* () {
              const account = yield* TestServer.signUp()
              const created = yield* request("POST", "/api/tools", account, {
                name: "shop",
                description: "The shop's MCP server.",
                parameters: { type: "object" },
                settings: { kind: "mcp", url: auth.url, allowedHosts: ["127.0.0.1"], auth: "oauth" }
              })
              assert.strictEqual(created.status, 201, created.text)
              const toolId = created.body.id as string
              const started = yield* request("POST", `/api/tools/${toolId}/oauth/start`, account, {})
              assert.strictEqual(started.status, 200, started.text)
              assert.strictEqual((yield* approve(started.body.authorizationUrl)).searchParams.get("oauth"), "connected")
              yield* echo(account, toolId, "under version 1")
              const again = yield* request("POST", `/api/tools/${toolId}/oauth/start`, account, {})
              assert.strictEqual(again.status, 200, again.text)
              return {
                account,
                toolId,
                pendingUrl: again.body.authorizationUrl as string,
                connection: yield* connectionRow(toolId),
                pending: yield* pendingRow(toolId)
              }
            })
          )
          assert.strictEqual(made.connection.keyVersion, 1)
          assert.strictEqual(made.pending.keyVersion, 1)
          assert.isNotNull(made.connection.accessToken)
          assert.isNotNull(made.connection.refreshToken)
          const token = `Bearer ${auth.issuedAccessTokens()[0]}`
          assert.deepStrictEqual(sentTokens(), [token])

          // The new key with the old one as version 1: the pass at start re-seals both rows under version 2.
          yield* withServer(
            databaseUrl,
            {
              secretsKey: Option.some(second),
              secretsKeyVersion: 2,
              secretsPreviousKeys: [{ version: 1, key: first }]
            },
            Effect.gen(function* () {
              const connection = yield* eventually(
                Effect.map(connectionRow(made.toolId), (row) => {
                  assert.strictEqual(row.keyVersion, 2)
                  return row
                })
              )
              for (const column of ["accessToken", "refreshToken"]) {
                assert.notStrictEqual(connection[column], made.connection[column], column)
                assert.match(String(connection[column]), /^s1\./, column)
              }
              assert.isNull(connection.clientSecret)
              assert.deepStrictEqual(connection.updatedAt, made.connection.updatedAt)
              const pending = yield* eventually(
                Effect.map(pendingRow(made.toolId), (row) => {
                  assert.strictEqual(row.keyVersion, 2)
                  return row
                })
              )
              assert.notStrictEqual(pending.verifier, made.pending.verifier)
              assert.strictEqual(pending.stateHash, made.pending.stateHash)
              for (const token of auth.issuedAccessTokens()) {
                assert.notInclude(JSON.stringify([connection, pending]), token)
              }
              yield* echo(made.account, made.toolId, "under version 2")
            })
          )
          // The same token, opened from its re-sealed value: nothing was renewed.
          assert.deepStrictEqual(sentTokens(), [token, token])
          assert.strictEqual(auth.refreshes(), 0)

          // The old key is no longer needed: the connection works, and the authorization in progress completes.
          yield* withServer(
            databaseUrl,
            { secretsKey: Option.some(second), secretsKeyVersion: 2 },
            Effect.gen(function* () {
              yield* echo(made.account, made.toolId, "old key dropped")
              assert.deepStrictEqual(sentTokens(), [token, token, token])
              assert.strictEqual(auth.refreshes(), 0)
              const back = yield* approve(made.pendingUrl)
              assert.strictEqual(back.searchParams.get("oauth"), "connected", back.href)
              assert.strictEqual(
                auth.tokenRequests().filter((one) => one.grantType === "authorization_code" && one.status === 200)
                  .length,
                2
              )
              yield* echo(made.account, made.toolId, "connected again")
              assert.strictEqual(sentTokens().at(-1), `Bearer ${auth.issuedAccessTokens().at(-1)}`)
            })
          )
        })
      ),
    60_000
  )
})
