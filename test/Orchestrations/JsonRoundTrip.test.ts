import { assert, describe, layer } from "@effect/vitest"
import { PgClient } from "@effect/sql-pg"
import { Duration, Effect, Option } from "effect"
import { Reactivity } from "effect/reactivity"
import { AppConfig } from "../../src/Config.ts"
import { eventually } from "../support/Eventually.ts"
import { FakeOpenAi, openaiKey } from "../support/FakeOpenAi.ts"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"

const withFake = TestServer.layerWithFakeOpenAi(openaiKey)

// The service's own database, read as stored: no renaming of anything.
const rawSql = Effect.gen(function* () {
  const config = yield* AppConfig
  return yield* PgClient.make({ url: Option.getOrThrow(config.databaseUrl), maxConnections: 1 })
}).pipe(Effect.provide(Reactivity.layer))

/**
 * Defines a two-step orchestration whose first prompt renders `names` joined
 * by `|`, executes it with `variablesJson` (sent as raw JSON: an object
 * literal would turn "__proto__" into a prototype), and checks what the model
 * was asked and what is stored.
 */
const roundTrip = (names: ReadonlyArray<string>, variablesJson: string, expectedPrompt: string) =>
  Effect.gen(function* () {
    const client = yield* TestClient
    const fake = yield* FakeOpenAi
    const account = yield* TestServer.signUp()
    const key = yield* TestServer.createKey(account, ["execute", "read"])
    const agent = yield* TestServer.createAgent(account, { model: "openai/gpt-4o-mini" })
    const steps = [
      { id: "first_step", agentId: agent.id, prompt: names.map((name) => `{{variables.${name}}}`).join("|") },
      { id: "Second-Step", agentId: agent.id, prompt: "after {{steps.first_step.output}}", dependsOn: ["first_step"] }
    ]
    const created = yield* client.request("POST", "/api/orchestrations", {
      headers: TestServer.bearer(account.token),
      body: { name: "Keys", steps }
    })
    assert.strictEqual(created.status, 201, created.text)
    assert.deepStrictEqual(created.body.steps, steps)
    const read = yield* client.request("GET", `/api/orchestrations/${created.body.id}`, {
      headers: TestServer.bearer(account.token)
    })
    assert.deepStrictEqual(read.body.steps, steps)

    fake.reset()
    fake.script({ text: "first reply" }, { text: "second reply" })
    const auth = TestServer.bearer(key.key)
    const started = yield* client.request("POST", `/api/v1/orchestrations/${created.body.id}/execute`, {
      headers: { ...auth, "content-type": "application/json" },
      rawBody: `{"input":"go","variables":${variablesJson}}`
    })
    assert.strictEqual(started.status, 202, started.text)
    const execution = yield* eventually(
      Effect.map(
        client.request("GET", `/api/v1/executions/${started.body.executionId}`, { headers: auth }),
        (polled) => {
          assert.notInclude(["pending", "running"], polled.body.status, "the execution ended")
          return polled.body
        }
      ),
      { timeoutMs: 20_000 }
    )
    assert.strictEqual(execution.status, "completed", JSON.stringify(execution))
    assert.strictEqual(execution.output, "second reply")

    const prompts = fake.requests.map((request) => request.body.messages.at(-1).content)
    assert.deepStrictEqual(prompts, [expectedPrompt, "after first reply"])

    const sql = yield* rawSql
    const [stored] = yield* sql<{ variables: string; steps: string; definition: string }>`
      SELECT e.variables::text AS variables, e.steps::text AS steps, o.steps::text AS definition
      FROM executions e JOIN orchestrations o ON o.id = e.orchestration_id WHERE e.id = ${started.body.executionId}`
    assert.deepStrictEqual(JSON.parse(stored!.variables), JSON.parse(variablesJson))
    assert.deepStrictEqual(JSON.parse(stored!.steps), steps)
    assert.deepStrictEqual(JSON.parse(stored!.definition), steps)

    const events = yield* client.request("GET", `/api/v1/executions/${started.body.executionId}/events`, {
      headers: auth
    })
    assert.include(events.text, `"output":"first reply"`)
  })

describe("user JSON round-trips exactly", () => {
  layer(withFake, { timeout: Duration.seconds(60), excludeTestServices: true })((it) => {
    it.effect("variables named with _ and capitals render and are stored as given", () =>
      roundTrip(
        ["my_var", "myVar", "MY_VAR", "URL", "a_b_c"],
        `{"my_var":"snake","myVar":"camel","MY_VAR":"shout","URL":"http://example.com/x","a_b_c":"abc","ünï_çødé":"u"}`,
        "snake|camel|shout|http://example.com/x|abc"
      )
    )

    it.effect("__proto__, constructor and unicode keys are plain data", () =>
      roundTrip(
        ["__proto__", "constructor", "my_var"],
        `{"__proto__":"proto","constructor":"ctor","my_var":"snake","κλειδί_Κ":"greek","ünï_çødé":"unicode"}`,
        "proto|ctor|snake"
      )
    )
  })
})
