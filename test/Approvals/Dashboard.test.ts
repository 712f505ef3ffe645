import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import type { Browser, Page } from "playwright-core"
import { launch, screenshot, seriousViolations, unreachableByKeyboard } from "../support/Browser.ts"
import { eventually } from "../support/Eventually.ts"
import * as FakeReceiver from "../support/FakeReceiver.ts"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"
import { awaitRun, createTeam, startRun } from "../support/Teams.ts"
import { lookupTool } from "../support/Tools.ts"

// The dashboard's inbox of approvals in a real headless Chromium, against the
// real service: a waiting execution's call approved with edited arguments; the
// tenant's approval defaults set in its panel; a team's result approved edited.

/** Logs `account` in and opens the approvals screen from the navigation. */
const openApprovals = async (page: Page, baseUrl: string, account: { email: string; password: string }) => {
  // The first request may wait for the dashboard's build (its sources changed since the last one).
  await page.goto(`${baseUrl}/app/approvals`, { timeout: 120_000 })
  await page.getByLabel("E-mail").fill(account.email)
  await page.getByLabel("Password").fill(account.password)
  await page.getByRole("button", { name: "Log in" }).click()
  await page.getByRole("heading", { name: "Getting started" }).waitFor()
  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Approvals" }).click()
  await page.getByRole("heading", { name: "Approvals", level: 1 }).waitFor()
}

const withBrowser = <A>(run: (page: Page) => Promise<A>) =>
  Effect.acquireUseRelease(
    Effect.promise(() => launch()),
    (browser: Browser) =>
      Effect.promise(async () => {
        const context = await browser.newContext({ viewport: { width: 1280, height: 900 } })
        const page = await context.newPage()
        page.setDefaultTimeout(20_000)
        const errors: Array<string> = []
        page.on("pageerror", (error) => void errors.push(error.message))
        page.on("console", (message) => {
          if (message.type() === "error" && !/status of 4\d\d/.test(message.text())) errors.push(message.text())
        })
        const result = await run(page).catch(async (error: unknown) => {
          await screenshot(page, "approvals-failure").catch(() => undefined)
          console.log("failed at", page.url())
          throw error
        })
        assert.deepStrictEqual(errors, [], "the page logged no errors")
        return result
      }),
    (browser) => Effect.promise(() => browser.close())
  )

layer(TestServer.layer({ dashboardEnabled: true, webhookAllowPrivate: true }), { excludeTestServices: true })(
  "the approvals inbox",
  (it) => {
    it.effect(
      "shows a waiting call; edit its arguments and approve: the run completes with them",
      () =>
        Effect.scoped(
          Effect.gen(function* () {
            const client = yield* TestClient
            const target = yield* FakeReceiver.make
            target.script({ body: JSON.stringify({ id: "A-9", status: "delivered" }) })
            const account = yield* TestServer.signUp()
            const session = { headers: TestServer.bearer(account.token) }
            const { key } = yield* TestServer.createKey(account, ["execute", "read"])
            const tool = yield* client.request("POST", "/api/tools", {
              ...session,
              body: { ...lookupTool(target.url("/orders/{{args.id}}")), policy: { approval: "always" } }
            })
            assert.strictEqual(tool.status, 201, tool.text)
            const agent = yield* TestServer.createAgent(account, { model: "local", toolIds: [tool.body.id] })
            const created = yield* client.request("POST", "/api/orchestrations", {
              ...session,
              body: {
                name: "Look",
                steps: [{ id: "s", agentId: agent.id, prompt: 'call lookup_order {"id": "{{input}}"}' }]
              }
            })
            assert.strictEqual(created.status, 201, created.text)
            const auth = { headers: TestServer.bearer(key) }
            const started = yield* client.request("POST", `/api/v1/orchestrations/${created.body.id}/execute`, {
              ...auth,
              body: { input: "A-1" }
            })
            const executionId = started.body.executionId as string
            const status = Effect.map(
              client.request("GET", `/api/v1/executions/${executionId}`, auth),
              (response) => response.body.status as string
            )
            yield* eventually(
              Effect.map(status, (s) => assert.strictEqual(s, "waiting")),
              { timeoutMs: 30_000 }
            )

            yield* withBrowser(async (page) => {
              await openApprovals(page, client.baseUrl, account)
              const card = page.getByTestId("approval")
              await card.waitFor()
              assert.include(await card.textContent(), "lookup_order")
              assert.include(await card.textContent(), "A-1")
              assert.deepStrictEqual(await seriousViolations(page), [], "no serious accessibility violations")
              assert.deepStrictEqual(await unreachableByKeyboard(page), [], "every control reachable by keyboard")
              await screenshot(page, "approvals-inbox")

              await card.getByRole("button", { name: "Edit arguments" }).click()
              const args = card.getByLabel("Arguments")
              // Not matching the tool's parameters: the field says so, nothing is decided.
              await args.fill('{ "id": 9 }')
              await card.getByRole("button", { name: "Approve with these arguments" }).click()
              await card.locator(".field-error").waitFor()
              await args.fill('{ "id": "A-9" }')
              await card.getByRole("button", { name: "Approve with these arguments" }).click()
              await page.getByText("Nothing is waiting.").waitFor()
              await page.getByText("Approved the call of lookup_order.").waitFor()
            })
            yield* eventually(
              Effect.map(status, (s) => assert.strictEqual(s, "completed")),
              { timeoutMs: 30_000 }
            )
            assert.deepStrictEqual(
              target.requests.map((request) => request.path),
              ["/orders/A-9"]
            )
          })
        ),
      { timeout: 180_000 }
    )

    it.effect(
      "sets the tenant's defaults in their panel, names a bad rule; shows a team's result and approves it edited",
      () =>
        Effect.scoped(
          Effect.gen(function* () {
            const client = yield* TestClient
            const account = yield* TestServer.signUp()
            const session = { headers: TestServer.bearer(account.token) }
            const { key } = yield* TestServer.createKey(account, ["teams"])
            const agent = yield* TestServer.createAgent(account, { name: "Writer", model: "local" })
            const team = yield* createTeam(account, {
              name: "Reviewed",
              members: [{ agentId: agent.id, role: "writes" }],
              resultApproval: { required: true }
            })
            const runId = yield* startRun(key, team.id, "Write one line about the sea")
            const pending = yield* eventually(
              Effect.map(client.request("GET", `/api/approvals?status=pending&runId=${runId}`, session), (response) => {
                assert.strictEqual(response.status, 200, response.text)
                assert.strictEqual(response.body.data.length, 1, response.text)
                return response.body.data[0] as { kind: string; arguments: { result: string } }
              }),
              { timeoutMs: 30_000 }
            )
            assert.strictEqual(pending.kind, "result")
            const edited = "The sea, as a person would put it."

            yield* withBrowser(async (page) => {
              await openApprovals(page, client.baseUrl, account)
              const panel = page.getByRole("form", { name: "Defaults for tools" })
              await panel.waitFor()
              // The service's defaults, never set by this tenant.
              assert.strictEqual(await panel.getByLabel("Approval", { exact: true }).inputValue(), "never")
              assert.strictEqual(await panel.getByLabel("On expiry").inputValue(), "reject")
              assert.strictEqual(await panel.getByLabel("Timeout", { exact: true }).inputValue(), "24")
              assert.strictEqual(await panel.getByLabel("Timeout unit").inputValue(), "hours")
              await panel.getByLabel("Approval", { exact: true }).selectOption("always")
              await panel.getByLabel("Timeout", { exact: true }).fill("90")
              await panel.getByLabel("Timeout unit").selectOption("minutes")
              await panel.getByLabel("On expiry").selectOption("approve")
              await panel.getByRole("button", { name: "Save defaults" }).click()
              await panel.getByText("Defaults saved.").waitFor()
              await page.getByText(/Last set /).waitFor()

              // A rule that does not parse: the panel names it, and nothing is saved.
              await panel.getByLabel("Approval", { exact: true }).selectOption("when")
              await panel.getByLabel("Rule").fill("amount >")
              await panel.getByRole("button", { name: "Save defaults" }).click()
              const ruleError = panel.locator(".field-error")
              await ruleError.waitFor()
              assert.include(await ruleError.textContent(), "end of the rule")
              assert.strictEqual(await panel.getByLabel("Rule").getAttribute("aria-invalid"), "true")
              assert.strictEqual(await panel.getByText("Defaults saved.").count(), 0)

              // The team's result: named as such, its text shown, edited as text.
              const card = page.getByTestId("approval")
              await card.waitFor()
              assert.include(await card.textContent(), "Team result")
              assert.include(await card.textContent(), pending.arguments.result)
              assert.notInclude(await card.textContent(), '"result"')
              assert.deepStrictEqual(await seriousViolations(page), [], "no serious accessibility violations")
              assert.deepStrictEqual(await unreachableByKeyboard(page), [], "every control reachable by keyboard")
              await screenshot(page, "approvals-defaults-and-result")
              await card.getByRole("button", { name: "Edit result" }).click()
              const result = card.getByLabel("Result", { exact: true })
              assert.strictEqual(await result.inputValue(), pending.arguments.result)
              await result.fill(edited)
              await card.getByRole("button", { name: "Approve this result" }).click()
              await page.getByText("Approved the team's result.").waitFor()
              await page.getByText("Nothing is waiting.").waitFor()
            })

            // The first PUT landed, the bad rule's did not.
            const defaults = yield* client.request("GET", "/api/settings/approvals", session)
            assert.strictEqual(defaults.status, 200, defaults.text)
            assert.deepInclude(defaults.body, {
              approval: "always",
              approvalTimeoutMs: 5_400_000,
              approvalOnExpiry: "approve"
            })
            assert.isString(defaults.body.updatedAt)
            const done = yield* awaitRun(account, team.id, runId)
            assert.strictEqual(done.status, "completed", JSON.stringify(done))
            assert.strictEqual(done.result, edited)
          })
        ),
      { timeout: 180_000 }
    )
  }
)
