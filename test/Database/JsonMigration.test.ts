import { assert, describe, it } from "@effect/vitest"
import { PgClient } from "@effect/sql-pg"
import { Duration, Effect, Layer, Option, Redacted } from "effect"
import { Reactivity } from "effect/reactivity"
import { SqlClient } from "effect/sql"
import migration0009 from "../../src/Database/migrations/0009_json_keys_as_given.ts"
import { newId } from "../../src/Domain/Ids.ts"
import { Executions } from "../../src/Orchestrations/Executions.ts"
import { eventually } from "../support/Eventually.ts"
import { FakeOpenAi, openaiKey } from "../support/FakeOpenAi.ts"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"

// Before migration 0009 the SQL client stored JSON keys renamed to
// snake_case (and read them back camelCase). A deployment upgraded with such
// rows, including an execution still pending, keeps working.
describe("migration 0009: JSON stored with renamed keys", () => {
  it.live(
    "rewrites stored steps and variables so old definitions and pending runs work",
    () =>
      Effect.gen(function* () {
        const url = yield* TestServer.TestDatabaseUrl
        const fake = yield* FakeOpenAi.make({ apiKey: openaiKey })
        // The service with its sweeps, as `npm start` runs it.
        const server = Executions.sweeper.pipe(
          Layer.provide(Executions.layer),
          Layer.provideMerge(
            TestServer.layer({
              databaseUrl: Option.some(Redacted.make(url)),
              openaiBaseUrl: fake.url,
              openaiApiKey: Option.some(Redacted.make(openaiKey)),
              modelTimeout: Duration.seconds(20),
              modelMaxRetries: 0,
              enforceDailyLimits: false
            })
          )
        )
        const sql = yield* PgClient.make({ url: Redacted.make(url), maxConnections: 1 }).pipe(
          Effect.provide(Reactivity.layer)
        )

        // A first start: a tenant, a key, an agent and an orchestration.
        const setUp = yield* Effect.gen(function* () {
          const client = yield* TestClient
          const account = yield* TestServer.signUp()
          const key = yield* TestServer.createKey(account, ["execute", "read"])
          const agent = yield* TestServer.createAgent(account, { model: "openai/gpt-4o-mini" })
          const created = yield* client.request("POST", "/api/orchestrations", {
            headers: TestServer.bearer(account.token),
            body: {
              name: "Old",
              steps: [
                {
                  id: "a",
                  agentId: agent.id,
                  prompt: "Tell {{variables.my_var}} at {{variables.URL}} ({{variables.plainName}})"
                },
                { id: "b", agentId: agent.id, prompt: "Then {{steps.a.output}}", dependsOn: ["a"] }
              ]
            }
          })
          assert.strictEqual(created.status, 201, created.text)
          return { account, key: key.key, agentId: agent.id, orchestrationId: created.body.id as string }
        }).pipe(Effect.provide(server))

        // What the old client wrote: renamed keys in the definition and in a
        // pending execution, and the migration not yet applied.
        const oldSteps = JSON.stringify([
          {
            id: "a",
            agent_id: setUp.agentId,
            prompt: "Tell {{variables.my_var}} at {{variables.URL}} ({{variables.plainName}})"
          },
          { id: "b", agent_id: setUp.agentId, prompt: "Then {{steps.a.output}}", depends_on: ["a"] }
        ])
        yield* sql`UPDATE orchestrations SET steps = ${oldSteps}::jsonb WHERE id = ${setUp.orchestrationId}`
        const executionId = newId()
        yield* sql`INSERT INTO executions (id, tenant_id, orchestration_id, status, input, variables, steps, timeout_ms)
        VALUES (${executionId}, ${setUp.account.tenantId}, ${setUp.orchestrationId}, 'pending', 'go',
                ${JSON.stringify({ my_var: "otters", _u_r_l: "http://example.com", plain_name: "plain", other_key: "kept" })}::jsonb,
                ${oldSteps}::jsonb, 60000)`
        // The upgrade: migration 0009 runs over these rows (later migrations
        // are already applied, so the migrator would not run it again itself).
        yield* migration0009.pipe(Effect.provideService(SqlClient.SqlClient, sql))

        // The upgraded start: the sweep starts the pending run.
        fake.script({ text: "first" }, { text: "second" })
        yield* Effect.gen(function* () {
          const client = yield* TestClient
          const auth = TestServer.bearer(setUp.key)
          const execution = yield* eventually(
            Effect.map(client.request("GET", `/api/v1/executions/${executionId}`, { headers: auth }), (polled) => {
              assert.notInclude(["pending", "running"], polled.body.status, "the execution ended")
              return polled.body
            }),
            { timeoutMs: 80_000, intervalMs: 200 }
          )
          assert.strictEqual(execution.status, "completed", JSON.stringify(execution))
          assert.strictEqual(execution.output, "second")
          assert.deepStrictEqual(
            fake.requests.map((request) => request.body.messages.at(-1).content),
            ["Tell otters at http://example.com (plain)", "Then first"]
          )

          const read = yield* client.request("GET", `/api/orchestrations/${setUp.orchestrationId}`, {
            headers: TestServer.bearer(setUp.account.token)
          })
          assert.strictEqual(read.status, 200, read.text)
          assert.deepStrictEqual(
            read.body.steps.map((step: any) => [step.agentId, step.dependsOn]),
            [
              [setUp.agentId, undefined],
              [setUp.agentId, ["a"]]
            ]
          )
        }).pipe(Effect.provide(server))

        const [stored] = yield* sql<{ variables: string; steps: string }>`
        SELECT variables::text AS variables, steps::text AS steps FROM executions WHERE id = ${executionId}`
        assert.deepStrictEqual(JSON.parse(stored!.variables), {
          my_var: "otters",
          URL: "http://example.com",
          plainName: "plain",
          otherKey: "kept"
        })
        assert.notInclude(stored!.steps, "agent_id")
        assert.notInclude(stored!.steps, "depends_on")
      }).pipe(Effect.scoped),
    { timeout: 90_000 }
  )
})
