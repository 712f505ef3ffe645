import { PgClient } from "@effect/sql-pg"
import { Context, Duration, Effect, Layer, Logger, Option, Redacted } from "effect"
import { FetchHttpClient, HttpClient, HttpClientRequest, HttpServer } from "effect/http"
import { HttpApiClient } from "effect/http-api"
import { SqlClient } from "effect/sql"
import * as Crypto from "node:crypto"
import { inject } from "vitest"
import { Api } from "../../src/Api.ts"
import { AppConfig, type AppSettings } from "../../src/Config.ts"
import * as Sql from "../../src/Database/Sql.ts"
import * as Server from "../../src/Server.ts"
import { defined, eventually } from "./Eventually.ts"
import { FakeOpenAi } from "./FakeOpenAi.ts"

const databaseOfItsOwn = (template: string | undefined) =>
  Effect.gen(function* () {
    const adminUrl = inject("databaseUrl")
    const name = `test_${Crypto.randomBytes(6).toString("hex")}`
    const admin = PgClient.layer({ url: Redacted.make(adminUrl) })
    const run = (statement: string) =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        yield* sql.unsafe(statement)
      }).pipe(Effect.provide(admin), Effect.orDie)
    yield* Effect.acquireRelease(
      run(template === undefined ? `CREATE DATABASE ${name}` : `CREATE DATABASE ${name} TEMPLATE ${template}`),
      () => run(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
    )
    const url = new URL(adminUrl)
    url.pathname = `/${name}`
    return url.toString()
  })

/**
 * A migrated database of its own, dropped when the scope closes: a copy of
 * the run's template (test/support/globalSetup.ts), so the service finds
 * every migration applied, its own and effect's cluster storage's.
 */
export const TestDatabaseUrl = Effect.suspend(() => databaseOfItsOwn(inject("templateDatabase")))

/** An empty database of its own, for tests that migrate it themselves (from an earlier release's schema). */
export const EmptyDatabaseUrl = databaseOfItsOwn(undefined)

export interface TestResponse {
  readonly status: number
  readonly headers: Headers
  readonly text: string
  // Tests read whatever JSON the server sent; assertions check its shape.
  readonly body: any
}

export interface RequestOptions {
  readonly body?: unknown
  readonly rawBody?: string
  readonly headers?: Record<string, string>
}

/** Plain HTTP against the listening server, as any client would send it. */
export class TestClient extends Context.Service<
  TestClient,
  {
    readonly baseUrl: string
    readonly request: (method: string, path: string, options?: RequestOptions) => Effect.Effect<TestResponse>
  }
>()("test/TestClient") {}

const clientLayer = Layer.effect(
  TestClient,
  Effect.gen(function* () {
    const server = yield* HttpServer.HttpServer
    const address = server.address
    if (address._tag === "UnixPathAddress") return yield* Effect.die(new Error("Expected a TCP address"))
    const baseUrl = `http://127.0.0.1:${address.port}`
    const request = (method: string, path: string, options: RequestOptions = {}) =>
      Effect.promise(async () => {
        const headers: Record<string, string> = { ...options.headers }
        let body: string | undefined = options.rawBody
        if (options.body !== undefined) {
          body = JSON.stringify(options.body)
          headers["content-type"] ??= "application/json"
        }
        const response = await fetch(baseUrl + path, { method, headers, body: body ?? null })
        const text = await response.text()
        let parsed: unknown
        try {
          parsed = text === "" ? undefined : JSON.parse(text)
        } catch {
          parsed = undefined
        }
        return { status: response.status, headers: response.headers, text, body: parsed }
      })
    return TestClient.of({ baseUrl, request })
  })
)

/**
 * The typed client of the API's declaration (src/Api.ts) for the server under
 * test, sending `credential` (a session token or an API key) as a bearer token,
 * or, `via: "x-api-key"`, an API key in `X-API-Key` (the /api/public routes),
 * or, `via: "cookie"`, a session cookie (`Account.cookie`).
 * Requests and answers go through the same schemas as the service's, so a
 * renamed field is a compile error; an answer of 400 and over fails with the
 * endpoint's declared problem (`Effect.flip` it to assert on it), and
 * `responseMode: "decoded-and-response"` gives the raw response beside the
 * value. Hostile input, raw error bodies and fuzzing stay with `request`.
 */
export const apiClient = (credential?: string, via: "bearer" | "x-api-key" | "cookie" = "bearer") =>
  Effect.flatMap(TestClient, ({ baseUrl }) =>
    HttpApiClient.make(Api, {
      baseUrl,
      ...(credential === undefined
        ? {}
        : {
            transformClient: HttpClient.mapRequest(
              via === "bearer"
                ? HttpClientRequest.bearerToken(credential)
                : HttpClientRequest.setHeader(via, credential)
            )
          })
    })
  ).pipe(Effect.provide(FetchHttpClient.layer))

/** What `apiClient` gives, for helpers that take one. */
export type ApiClient = Effect.Success<ReturnType<typeof apiClient>>

/** The real service on an ephemeral port over a migrated database of its own, plus a client for it. */
export const layer = (overrides: Partial<AppSettings> = {}) =>
  Layer.unwrap(
    Effect.gen(function* () {
      const url = yield* TestDatabaseUrl
      const config = AppConfig.layerWith({
        port: 0,
        host: "127.0.0.1",
        databaseUrl: Option.some(Redacted.make(url)),
        // A fixed key: tests write no key file into the project, and servers over one database share it.
        webhookSecretKey: Option.some(Redacted.make("dGVzdC1vbmx5LXdlYmhvb2stc2VjcmV0LWtleS0zMmI=")),
        // The dashboard's tests turn it on; the others need no build.
        dashboardEnabled: false,
        ...overrides
      })
      // Request logs would drown the test output; the process test reads them instead.
      return clientLayer.pipe(
        Layer.provideMerge(Server.HttpLayer),
        Layer.provideMerge(Server.EntitiesLayer),
        Layer.provideMerge(Sql.layer),
        Layer.provideMerge(config),
        Layer.provide(Logger.layer([]))
      )
    })
  )

// ---------------------------------------------------------------------------
// Flows most tests start from
// ---------------------------------------------------------------------------

export interface Account {
  readonly email: string
  readonly password: string
  readonly token: string
  readonly cookie: string
  readonly tenantId: string
  readonly userId: string
}

/** Registers a new account and logs in. */
export const signUp = (name = "Test User") =>
  Effect.gen(function* () {
    const client = yield* TestClient
    const email = `user-${Crypto.randomBytes(6).toString("hex")}@example.com`
    const password = "correct horse battery staple"
    const registered = yield* client.request("POST", "/api/auth/register", { body: { email, password, name } })
    if (registered.status !== 201)
      return yield* Effect.die(new Error(`register: ${registered.status} ${registered.text}`))
    const login = yield* client.request("POST", "/api/auth/login", { body: { email, password } })
    if (login.status !== 200) return yield* Effect.die(new Error(`login: ${login.status} ${login.text}`))
    const setCookie = login.headers.get("set-cookie") ?? ""
    return {
      email,
      password,
      token: login.body.token as string,
      cookie: setCookie.split(";")[0]!,
      tenantId: registered.body.tenant.id as string,
      userId: registered.body.user.id as string
    } satisfies Account
  })

export const bearer = (token: string) => ({ authorization: `Bearer ${token}` })

/** `eventually` for a check that gives a value once there is one (every 50 ms, at most `timeoutMs`). */
export const waitFor = <A, E, R>(what: string, check: Effect.Effect<A | undefined, E, R>, timeoutMs = 15_000) =>
  eventually(
    Effect.map(check, (value) => defined(what, value)),
    { timeoutMs }
  )

/** Creates an API key for the account; returns its plaintext. */
export const createKey = (account: Account, scopes?: ReadonlyArray<string>) =>
  Effect.gen(function* () {
    const client = yield* TestClient
    const created = yield* client.request("POST", "/api/keys", {
      headers: bearer(account.token),
      body: scopes === undefined ? { name: "test key" } : { name: "test key", scopes }
    })
    if (created.status !== 201) return yield* Effect.die(new Error(`create key: ${created.status} ${created.text}`))
    return { id: created.body.id as string, key: created.body.key as string }
  })

/** A new tenant with an API key, an agent on `model`, and a one-step orchestration over it ("Say {{input}}"). */
export const oneStepOrchestration = (model: string) =>
  Effect.gen(function* () {
    const client = yield* TestClient
    const account = yield* signUp()
    const { key } = yield* createKey(account)
    const agent = yield* createAgent(account, { model })
    const created = yield* client.request("POST", "/api/orchestrations", {
      headers: bearer(account.token),
      body: { name: "One", steps: [{ id: "s", agentId: agent.id, prompt: "Say {{input}}" }] }
    })
    if (created.status !== 201)
      return yield* Effect.die(new Error(`create orchestration: ${created.status} ${created.text}`))
    return { account, key, agentId: agent.id, orchestrationId: created.body.id as string, steps: created.body.steps }
  })

/** Creates an agent through the management API. */
export const createAgent = (account: Account, body: Record<string, unknown> = {}) =>
  Effect.gen(function* () {
    const client = yield* TestClient
    const created = yield* client.request("POST", "/api/agents", {
      headers: bearer(account.token),
      body: { name: "Helper", ...body }
    })
    if (created.status !== 201) return yield* Effect.die(new Error(`create agent: ${created.status} ${created.text}`))
    return created.body as { id: string; name: string; status: string }
  })

/**
 * The service with its OpenAI provider on a fake at loopback that expects
 * `apiKey` (20 s per call, no retries), and the fake itself for the test.
 */
export const layerWithFakeOpenAi = (apiKey: string, overrides: Partial<AppSettings> = {}) =>
  Layer.unwrap(
    Effect.gen(function* () {
      const openai = yield* FakeOpenAi.make({ apiKey })
      return layer({
        openaiBaseUrl: openai.url,
        openaiApiKey: Option.some(Redacted.make(apiKey)),
        modelTimeout: Duration.seconds(20),
        modelMaxRetries: 0,
        ...overrides
      }).pipe(Layer.merge(Layer.succeed(FakeOpenAi, openai)))
    })
  )
