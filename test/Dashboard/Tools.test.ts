import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import type { Browser, Page, Request } from "playwright-core"
import { launch, screenshot, seriousViolations, unreachableByKeyboard } from "../support/Browser.ts"
import { eventually } from "../support/Eventually.ts"
import * as FakeReceiver from "../support/FakeReceiver.ts"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"

// The tools and secrets screens in a real headless Chromium against the real
// service (as test/Dashboard/Dashboard.test.ts drives the others): a secret
// stored and rotated without its value ever reaching the page again, an HTTP
// tool defined with its JSON Schema and tested against a receiver on
// loopback, and given to an agent in the agent's form.

const withBrowser = <A>(run: (page: Page, requests: Array<Request>) => Promise<A>) =>
  Effect.acquireUseRelease(
    Effect.promise(() => launch()),
    (browser: Browser) =>
      Effect.promise(async () => {
        const context = await browser.newContext({ viewport: { width: 1280, height: 900 } })
        const page = await context.newPage()
        page.setDefaultTimeout(20_000)
        const requests: Array<Request> = []
        page.on("request", (request) => void requests.push(request))
        const errors: Array<string> = []
        page.on("pageerror", (error) => void errors.push(error.message))
        page.on("console", (message) => {
          if (message.type() === "error" && !/status of 4\d\d/.test(message.text())) errors.push(message.text())
        })
        // On a failure, the page as it was and what it logged.
        const result = await run(page, requests).catch(async (error: unknown) => {
          await screenshot(page, "tools-failure").catch(() => undefined)
          if (errors.length > 0 && error instanceof Error) error.message += `\nThe page logged: ${errors.join("\n")}`
          throw error
        })
        assert.deepStrictEqual(errors, [], "the page logged no errors")
        return result
      }),
    (browser) => Effect.promise(() => browser.close())
  )

const nav = async (page: Page, screen: string) => {
  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: screen, exact: true }).click()
  await page.getByRole("heading", { name: screen, level: 1 }).waitFor()
}

const accessible = async (page: Page, screen: string) => {
  assert.deepStrictEqual(await seriousViolations(page), [], `${screen}: serious accessibility violations`)
  assert.deepStrictEqual(await unreachableByKeyboard(page), [], `${screen}: controls Tab never reaches`)
  await screenshot(page, screen)
}

/** Everything the page holds: its HTML and the values of its form controls (which the HTML does not show). */
const pageText = (page: Page) =>
  page.evaluate(
    `document.documentElement.outerHTML + [...document.querySelectorAll("input, textarea")].map((e) => e.value).join("\\n")`
  ) as Promise<string>

const schema = {
  type: "object",
  properties: { id: { type: "string", description: "The order id, e.g. SO-1234", pattern: "^SO-[0-9]+$" } },
  required: ["id"]
}

layer(TestServer.layer({ dashboardEnabled: true, webhookAllowPrivate: true }), { excludeTestServices: true })(
  "the dashboard's tools and secrets",
  (it) => {
    it.effect(
      "a secret stored and rotated shows its last four only; an HTTP tool made with its JSON Schema is listed, tested with its exchange shown, and given to an agent; a tool asking an agent made and tested",
      () =>
        Effect.gen(function* () {
          const client = yield* TestClient
          const base = client.baseUrl
          // The page once served (the dashboard is built when its sources changed), so the browser's bounds
          // count from there.
          const served = yield* client.request("GET", "/app/")
          assert.strictEqual(served.status, 200)
          const receiver = yield* FakeReceiver.make
          const account = yield* TestServer.signUp()
          const api = yield* TestServer.apiClient(account.token)
          const agent = yield* api.agents.create({ payload: { name: "Support" } })
          const firstValue = "sk_test_first_value_ABCD"
          const secondValue = "sk_test_second_value_WXYZ"

          yield* withBrowser(async (page, requests) => {
            await page.goto(`${base}/app/secrets`)
            await page.getByLabel("E-mail").fill(account.email)
            await page.getByLabel("Password").fill(account.password)
            await page.getByRole("button", { name: "Log in" }).click()
            await page.getByRole("heading", { name: "Getting started" }).waitFor()

            // Secrets: stored from a password field, then only the last four are shown.
            await nav(page, "Secrets")
            await page.getByText("No secrets yet.").waitFor()
            assert.strictEqual(await page.getByLabel("Value", { exact: true }).getAttribute("type"), "password")
            await page.getByLabel("Name", { exact: true }).fill("SHOP_TOKEN")
            await page.getByLabel("Value", { exact: true }).fill(firstValue)
            await page.getByRole("button", { name: "Store secret" }).click()
            const row = page.getByTestId("secrets").getByRole("row").filter({ hasText: "SHOP_TOKEN" })
            await row.getByText("…ABCD").waitFor()
            assert.strictEqual(
              await page.getByLabel("Value", { exact: true }).inputValue(),
              "",
              "the value is cleared once stored"
            )
            assert.notInclude(await pageText(page), firstValue, "the value is nowhere in the page")
            assert.notInclude(await pageText(page), "first_value", "nor any part of it but the last four")
            await accessible(page, "tools-01-secrets")

            // Rotated: the new last four, a rotation time, and neither value in the page.
            await page.getByRole("button", { name: "Rotate SHOP_TOKEN" }).click()
            await page.getByLabel("New value", { exact: true }).fill(secondValue)
            await page.getByRole("button", { name: "Rotate", exact: true }).click()
            await row.getByText("…WXYZ").waitFor()
            assert.notInclude(await row.textContent(), "never", "the rotation is dated")
            const afterRotation = await pageText(page)
            assert.notInclude(afterRotation, firstValue)
            assert.notInclude(afterRotation, secondValue)
            assert.strictEqual(
              await page.getByLabel("New value", { exact: true }).count(),
              0,
              "the rotate form is closed"
            )

            // A tool: a JSON Schema that is not JSON is named on its field and nothing is sent.
            await nav(page, "Tools")
            await page.getByText("No tools yet.").waitFor()
            await page.getByLabel("Name", { exact: true }).fill("lookup_order")
            await page.getByLabel("Description", { exact: true }).fill("Finds an order by its id and tells its status.")
            await page.getByLabel("Method", { exact: true }).selectOption("GET")
            await page.getByLabel("URL", { exact: true }).fill(receiver.url("/orders/{{args.id}}"))
            await page.getByRole("button", { name: "Add a header" }).click()
            await page.getByLabel("Header 1 name").fill("Authorization")
            await page.getByLabel("Header 1 value").fill("Bearer {{secrets.SHOP_TOKEN}}")
            await page.getByLabel("Allowed hosts", { exact: true }).fill("127.0.0.1")
            await page.getByLabel("Parameters (JSON Schema)", { exact: true }).fill('{ "type": "object", ')
            await page.getByRole("button", { name: "Create tool" }).click()
            await page.getByText(/^Not JSON/).waitFor()
            assert.strictEqual(
              await page.getByLabel("Parameters (JSON Schema)", { exact: true }).getAttribute("aria-invalid"),
              "true"
            )
            const toolWrites = () =>
              requests.filter((r) => r.method() !== "GET" && new URL(r.url()).pathname.startsWith("/api/tools"))
            assert.deepStrictEqual(toolWrites(), [], "nothing sent while the schema is not JSON")

            // The service's own check of the schema, named on the field: a misspelt keyword.
            await page
              .getByLabel("Parameters (JSON Schema)", { exact: true })
              .fill(JSON.stringify({ ...schema, requird: ["id"] }))
            await page.getByRole("button", { name: "Create tool" }).click()
            await page.getByRole("alert").filter({ hasText: "payload.parameters" }).waitFor()

            await page.getByLabel("Parameters (JSON Schema)", { exact: true }).fill(JSON.stringify(schema, null, 2))
            await page.getByRole("button", { name: "Create tool" }).click()
            await page.getByRole("heading", { name: "Edit lookup_order" }).waitFor()
            const toolId = new URL(page.url()).searchParams.get("tool")!
            assert.isString(toolId)
            await page
              .getByTestId("tools")
              .getByRole("link", { name: /lookup_order\s+http · active/ })
              .waitFor()
            // The form shows the tool as stored.
            assert.deepStrictEqual(
              JSON.parse(await page.getByLabel("Parameters (JSON Schema)", { exact: true }).inputValue()),
              schema
            )
            assert.strictEqual(await page.getByLabel("Timeout (ms)", { exact: true }).inputValue(), "10000")

            // Test: invalid arguments are an outcome, and nothing reaches the receiver.
            assert.deepStrictEqual(
              JSON.parse(await page.getByLabel("Arguments (JSON)", { exact: true }).inputValue()),
              { id: "" }
            )
            await page.getByLabel("Arguments (JSON)", { exact: true }).fill('{ "id": "nope" }')
            await page.getByRole("button", { name: "Run the test" }).click()
            await page.getByTestId("test-outcome").and(page.locator("[data-ok=false]")).waitFor()
            assert.include(await page.getByTestId("test-outcome").textContent(), "invalid_arguments")
            assert.strictEqual(receiver.requests.length, 0)

            // Then a call: what was sent (the secret masked) and what came back.
            receiver.script({ status: 200, body: '{"status":"shipped"}' })
            await page.getByLabel("Arguments (JSON)", { exact: true }).fill('{ "id": "SO-1" }')
            await page.getByRole("button", { name: "Run the test" }).click()
            const outcome = page.getByTestId("test-outcome").and(page.locator("[data-ok=true]"))
            await outcome.waitFor()
            assert.strictEqual(receiver.requests.length, 1)
            assert.strictEqual(receiver.requests[0]!.path, "/orders/SO-1")
            assert.strictEqual(receiver.requests[0]!.headers.authorization, `Bearer ${secondValue}`)
            const exchange = page.getByTestId("exchange")
            await exchange.getByText(`GET ${receiver.url("/orders/SO-1")}`).waitFor()
            await exchange.getByText("Status 200").waitFor()
            await exchange.getByText('{"status":"shipped"}').waitFor()
            await exchange.locator("summary", { hasText: "Request 1 headers" }).click()
            await exchange.getByText("Bearer [secret SHOP_TOKEN]").waitFor()
            assert.include(await page.getByTestId("test-output").textContent(), "shipped")
            assert.notInclude(await pageText(page), secondValue, "the secret stays out of the page")
            await accessible(page, "tools-02-tool-tested")

            // The agent's form: the tool picked among the tenant's.
            await nav(page, "Agents")
            await page.getByRole("link", { name: /Support/ }).click()
            await page.getByRole("heading", { name: "Edit Support" }).waitFor()
            await page
              .getByTestId("agent-tools")
              .getByRole("checkbox", { name: /lookup_order/ })
              .check()
            await page.getByRole("button", { name: "Save" }).click()
            await page.getByText("Saved Support.").waitFor()
            const given = await Effect.runPromise(api.agents.get({ params: { id: agent.id } }))
            assert.deepStrictEqual(given.toolIds, [toolId])
            await accessible(page, "tools-03-agent-tools")

            // A tool an agent has is not deleted: the 409 names the agent.
            await nav(page, "Tools")
            await page
              .getByTestId("tools")
              .getByRole("link", { name: /lookup_order/ })
              .click()
            await page.getByRole("heading", { name: "Edit lookup_order" }).waitFor()
            await page.getByRole("button", { name: "Delete" }).click()
            await page
              .getByRole("dialog", { name: "Delete “lookup_order”?" })
              .getByRole("button", { name: "Delete tool" })
              .click()
            await page.getByRole("alert").filter({ hasText: '"Support"' }).waitFor()

            // Deactivated: the agent keeps it, and the agent's form still saves.
            await page.getByRole("button", { name: "Deactivate" }).click()
            await page
              .getByTestId("tools")
              .getByRole("link", { name: /lookup_order\s+http · inactive/ })
              .waitFor()
            await nav(page, "Agents")
            await page.getByRole("link", { name: /Support/ }).click()
            const picked = page.getByTestId("agent-tools").getByRole("checkbox", { name: /lookup_order/ })
            await eventually(async () => assert.isTrue(await picked.isChecked(), "the agent still has it"))
            await page.getByLabel("Instructions", { exact: true }).fill("Look orders up.")
            await page.getByRole("button", { name: "Save" }).click()
            await page.getByText("Saved Support.").waitFor()
            const kept = await Effect.runPromise(api.agents.get({ params: { id: agent.id } }))
            assert.deepStrictEqual(kept.toolIds, [toolId])
            assert.strictEqual(kept.instructions, "Look orders up.")

            // Taken away, the tool can be deleted.
            await picked.uncheck()
            await page.getByRole("button", { name: "Save" }).click()
            await eventually(async () => {
              const agentNow = await Effect.runPromise(api.agents.get({ params: { id: agent.id } }))
              assert.deepStrictEqual(agentNow.toolIds, [], "the tool taken away")
            })
            await nav(page, "Tools")
            await page
              .getByTestId("tools")
              .getByRole("link", { name: /lookup_order/ })
              .click()
            await page.getByRole("button", { name: "Delete" }).click()
            await page
              .getByRole("dialog", { name: "Delete “lookup_order”?" })
              .getByRole("button", { name: "Delete tool" })
              .click()
            await page.getByText("No tools yet.").waitFor()

            // A tool of another kind: asking an agent, its starter schema the agent's `message`.
            await page.getByLabel("Name", { exact: true }).fill("ask_support")
            await page.getByLabel("Description", { exact: true }).fill("Asks the support agent.")
            await page.getByLabel("Kind", { exact: true }).selectOption({ label: "Ask another agent" })
            assert.deepStrictEqual(
              JSON.parse(await page.getByLabel("Parameters (JSON Schema)", { exact: true }).inputValue()).required,
              ["message"]
            )
            assert.strictEqual(await page.getByLabel("URL", { exact: true }).count(), 0, "no HTTP settings")
            await page.getByLabel("Agent asked", { exact: true }).selectOption({ label: "Support (local)" })
            await page.getByRole("button", { name: "Create tool" }).click()
            await page.getByRole("heading", { name: "Edit ask_support" }).waitFor()
            await page
              .getByTestId("tools")
              .getByRole("link", { name: /ask_support\s+agent · active/ })
              .waitFor()
            const asking = await Effect.runPromise(api.tools.list({ query: {} }))
            assert.deepStrictEqual(
              asking.data.map((t) => t.settings),
              [{ kind: "agent", agentId: agent.id }]
            )
            await page.getByLabel("Arguments (JSON)", { exact: true }).fill('{ "message": "Where is SO-1?" }')
            await page.getByRole("button", { name: "Run the test" }).click()
            await page.getByTestId("exchange").getByText("Where is SO-1?").waitFor()

            // And the secret too.
            await nav(page, "Secrets")
            await page.getByRole("button", { name: "Delete SHOP_TOKEN" }).click()
            await page
              .getByRole("dialog", { name: "Delete “SHOP_TOKEN”?" })
              .getByRole("button", { name: "Delete secret" })
              .click()
            await page.getByText("No secrets yet.").waitFor()
          })
        }),
      { timeout: 240_000 }
    )

    it.effect(
      "tool calls shown inline: in a chat reply, live while the call runs, and on an execution's step, a cut result read whole",
      () =>
        Effect.gen(function* () {
          const client = yield* TestClient
          const base = client.baseUrl
          const served = yield* client.request("GET", "/app/")
          assert.strictEqual(served.status, 200)
          const receiver = yield* FakeReceiver.make
          const account = yield* TestServer.signUp()
          const api = yield* TestServer.apiClient(account.token)
          const tool = yield* api.tools.create({
            payload: {
              name: "lookup_order",
              description: "Finds an order by its id and tells its status.",
              parameters: {
                type: "object",
                properties: { id: { type: "string" } },
                required: ["id"],
                additionalProperties: false
              },
              settings: {
                kind: "http",
                method: "GET",
                url: receiver.url("/orders/{{args.id}}"),
                allowedHosts: ["127.0.0.1"]
              },
              policy: { maxOutputBytes: 1_024 }
            }
          })
          const agent = yield* api.agents.create({ payload: { name: "Clerk", model: "local", toolIds: [tool.id] } })
          yield* api.orchestrations.create({
            payload: {
              name: "Lookup",
              steps: [{ id: "lookup", agentId: agent.id, prompt: 'call lookup_order {"id": "B-2"}' }]
            }
          })
          // The step's answer is longer than the model may see: its end is only in the whole result.
          const longBody = `{"status":"shipped","log":"${"x".repeat(2_000)}","end":"THE-END"}`

          yield* withBrowser(async (page) => {
            await page.goto(`${base}/app/chat`)
            await page.getByLabel("E-mail").fill(account.email)
            await page.getByLabel("Password").fill(account.password)
            await page.getByRole("button", { name: "Log in" }).click()
            await page.getByRole("heading", { name: "Getting started" }).waitFor()
            await nav(page, "Chat")

            // Chat: the call is shown running, with its arguments, while the receiver holds it; a call the
            // schema refuses is shown failed, with why.
            receiver.script({ hold: true, status: 200, body: '{"status":"shipped"}' })
            await page.getByLabel("Agent").selectOption({ label: "Clerk (local)" })
            await page.getByLabel("Message").fill('call lookup_order {"id": "A-1"} call lookup_order {"id": 7}')
            await page.getByRole("button", { name: "Send" }).click()
            const calls = page.getByTestId("messages").getByTestId("tool-call")
            // The other call may show running for a moment too, until its arguments are refused.
            const running = calls.and(page.locator("[data-status=running]")).filter({ hasText: '"A-1"' })
            await running.waitFor()
            assert.deepStrictEqual(
              JSON.parse((await running.getByTestId("tool-call-arguments").textContent()) ?? ""),
              { id: "A-1" },
              "the arguments as the model sent them"
            )
            await eventually(async () => assert.strictEqual(receiver.requests.length, 1, "the call is held"))
            assert.strictEqual(await calls.and(page.locator("[data-status=succeeded]")).count(), 0)
            await calls
              .and(page.locator("[data-status=failed]"))
              .getByText(/^invalid_arguments: /)
              .waitFor()
            receiver.releaseHeld()

            // Ended, and still shown once the reply is stored.
            await page.getByTestId("messages").getByText("local ·").waitFor()
            const succeeded = calls.and(page.locator("[data-status=succeeded]"))
            // An HTTP tool's result is its answer's status, content type and body.
            await succeeded
              .getByTestId("tool-call-result")
              .getByText(/"status":200.*shipped/)
              .waitFor()
            assert.match((await succeeded.getByTestId("tool-call-duration").textContent()) ?? "", /\d+ ms/)
            assert.strictEqual(await calls.count(), 2)
            assert.strictEqual(receiver.requests[0]!.path, "/orders/A-1")
            await page
              .getByTestId("messages")
              .getByText(/lookup_order answered/)
              .waitFor()
            await accessible(page, "tools-04-chat-calls")

            // An execution: the step's call, its result as the model saw it (cut), then whole.
            receiver.script({ status: 200, body: longBody })
            await nav(page, "Orchestrations")
            await page.getByRole("link", { name: /Lookup/ }).click()
            await page.getByRole("heading", { name: "Edit Lookup" }).waitFor()
            await page.getByRole("button", { name: "Execute", exact: true }).click()
            await page.getByTestId("execution").and(page.locator("[data-status=completed]")).waitFor()
            const stepCall = page.getByTestId("step-calls-lookup").getByTestId("tool-call")
            await stepCall.and(page.locator("[data-status=succeeded]")).waitFor()
            assert.strictEqual(await stepCall.count(), 1)
            assert.deepStrictEqual(
              JSON.parse((await stepCall.getByTestId("tool-call-arguments").textContent()) ?? ""),
              { id: "B-2" }
            )
            const result = stepCall.getByTestId("tool-call-result")
            await result.getByText(/\[cut: the first \d+ of \d+ bytes\]/).waitFor()
            assert.notInclude(await result.textContent(), "THE-END", "the model saw a cut")
            await accessible(page, "tools-05-step-calls")
            await stepCall.getByRole("button", { name: "Show whole result" }).click()
            await result.getByText(/THE-END/).waitFor()
            assert.notInclude(await result.textContent(), "[cut:", "the whole result, with no marker")
            assert.strictEqual(receiver.requests[1]!.path, "/orders/B-2")
          })
        }),
      { timeout: 240_000 }
    )
  }
)
