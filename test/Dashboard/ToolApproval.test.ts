import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import type { Browser, Page, Request } from "playwright-core"
import { launch, screenshot, seriousViolations, unreachableByKeyboard } from "../support/Browser.ts"
import { eventually } from "../support/Eventually.ts"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"

// The tool form's approval fields in a real headless Chromium against the
// real service: each offers the tenant's default, named with the tenant's
// value; a tool made with a rule and "approve" on expiry keeps the timeout
// out of its policy; an edit putting approval back to the tenant's removes it.

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
        const result = await run(page, requests).catch(async (error: unknown) => {
          await screenshot(page, "tool-approval-failure").catch(() => undefined)
          if (errors.length > 0 && error instanceof Error) error.message += `\nThe page logged: ${errors.join("\n")}`
          throw error
        })
        assert.deepStrictEqual(errors, [], "the page logged no errors")
        return result
      }),
    (browser) => Effect.promise(() => browser.close())
  )

const rule = 'id starts_with "A"'

/** Logs `account` in, then opens `path` (the session's cookie kept). */
const logIn = async (page: Page, baseUrl: string, account: { email: string; password: string }, path: string) => {
  await page.goto(`${baseUrl}/app/`)
  await page.getByLabel("E-mail").fill(account.email)
  await page.getByLabel("Password").fill(account.password)
  await page.getByRole("button", { name: "Log in" }).click()
  await page.getByRole("heading", { name: "Getting started" }).waitFor()
  await page.goto(`${baseUrl}${path}`)
}

layer(TestServer.layer({ dashboardEnabled: true, webhookAllowPrivate: true }), { excludeTestServices: true })(
  "the tool form's approvals",
  (it) => {
    it.effect(
      "makes a tool asking approval when a rule holds, approving on expiry, the timeout the tenant's; puts approval back to the tenant's",
      () =>
        Effect.gen(function* () {
          const client = yield* TestClient
          // The page once served (the dashboard is built when its sources changed), so the browser's bounds count
          // from there.
          const served = yield* client.request("GET", "/app/")
          assert.strictEqual(served.status, 200)
          const account = yield* TestServer.signUp()
          const session = { headers: TestServer.bearer(account.token) }
          // The tenant's own defaults, so the form shows what it read rather than the service's.
          const defaults = yield* client.request("PUT", "/api/settings/approvals", {
            ...session,
            body: { approval: "always", approvalTimeoutMs: 5_400_000 }
          })
          assert.strictEqual(defaults.status, 200, defaults.text)
          const getTool = (id: string) =>
            Effect.map(client.request("GET", `/api/tools/${id}`, session), (response) => {
              assert.strictEqual(response.status, 200, response.text)
              return response.body.policy as Record<string, unknown>
            })

          const toolId = yield* withBrowser(async (page, requests) => {
            await logIn(page, client.baseUrl, account, "/app/tools")
            await page.getByText("No tools yet.").waitFor()

            // A new tool: every approval field on the tenant's default, named with its value.
            const approval = page.getByLabel("Approval", { exact: true })
            const onExpiry = page.getByLabel("On expiry", { exact: true })
            await approval.getByRole("option", { name: "Tenant default (always)" }).waitFor({ state: "attached" })
            assert.strictEqual(await approval.inputValue(), "default")
            assert.strictEqual(await onExpiry.inputValue(), "default")
            assert.strictEqual(
              await onExpiry.locator("option:checked").textContent(),
              "Tenant default (reject)",
              "the service's, which the tenant left"
            )
            assert.strictEqual(await page.getByLabel("Timeout", { exact: true }).inputValue(), "")
            await page.getByText("Empty: the tenant's default, 90 minutes.").waitFor()

            await page.getByLabel("Name", { exact: true }).fill("refund_order")
            await page.getByLabel("Description", { exact: true }).fill("Refunds an order by its id.")
            await page.getByLabel("Method", { exact: true }).selectOption("POST")
            await page.getByLabel("URL", { exact: true }).fill("http://127.0.0.1:9/refunds")
            await page.getByLabel("Allowed hosts", { exact: true }).fill("127.0.0.1")

            // A rule that does not parse: named on its field by the API's own schema, and nothing is sent.
            await approval.selectOption("when")
            await page.getByLabel("Rule", { exact: true }).fill("id starts_with")
            await page.getByRole("button", { name: "Create tool" }).click()
            await page.getByLabel("Rule", { exact: true }).and(page.locator('[aria-invalid="true"]')).waitFor()
            const toolWrites = () =>
              requests.filter((r) => r.method() !== "GET" && new URL(r.url()).pathname.startsWith("/api/tools"))
            assert.deepStrictEqual(toolWrites(), [], "nothing sent while the rule does not parse")

            await page.getByLabel("Rule", { exact: true }).fill(rule)
            await onExpiry.selectOption("approve")
            assert.deepStrictEqual(await seriousViolations(page), [], "no serious accessibility violations")
            assert.deepStrictEqual(await unreachableByKeyboard(page), [], "every control reachable by keyboard")
            await screenshot(page, "tool-approval")
            await page.getByRole("button", { name: "Create tool" }).click()
            await page.getByRole("heading", { name: "Edit refund_order" }).waitFor()
            const id = new URL(page.url()).searchParams.get("tool")!
            assert.isString(id)
            // The form shows the tool as stored: the timeout still the tenant's.
            await eventually(async () => assert.strictEqual(await approval.inputValue(), "when"))
            assert.strictEqual(await page.getByLabel("Rule", { exact: true }).inputValue(), rule)
            assert.strictEqual(await onExpiry.inputValue(), "approve")
            assert.strictEqual(await page.getByLabel("Timeout", { exact: true }).inputValue(), "")
            return id
          })

          const made = yield* eventually(getTool(toolId))
          assert.deepStrictEqual(made.approval, { when: rule })
          assert.strictEqual(made.approvalOnExpiry, "approve")
          assert.notProperty(made, "approvalTimeoutMs", "left to the tenant's")

          yield* withBrowser(async (page, requests) => {
            await logIn(page, client.baseUrl, account, `/app/tools?tool=${toolId}`)
            await page.getByRole("heading", { name: "Edit refund_order" }).waitFor()
            const approval = page.getByLabel("Approval", { exact: true })
            await eventually(async () => assert.strictEqual(await approval.inputValue(), "when"))
            await approval.selectOption("default")
            await page.getByRole("button", { name: "Save", exact: true }).click()
            await page.getByText("Saved refund_order.").waitFor()
            // Sent as null, which removes it; the fields left on the tenant's all along are not sent.
            const put = requests.find(
              (r) => r.method() === "PUT" && new URL(r.url()).pathname === `/api/tools/${toolId}`
            )
            const policy = (put?.postDataJSON() as { policy: Record<string, unknown> } | undefined)?.policy
            assert.isDefined(policy, "the tool was saved with a PUT")
            assert.strictEqual(policy!.approval, null)
            assert.notProperty(policy, "approvalTimeoutMs")
            assert.strictEqual(policy!.approvalOnExpiry, "approve")
          })

          yield* eventually(
            Effect.map(getTool(toolId), (policy) => {
              assert.notProperty(policy, "approval", "the tenant's applies")
              assert.notProperty(policy, "approvalTimeoutMs")
              assert.strictEqual(policy.approvalOnExpiry, "approve", "kept")
            })
          )
        }),
      { timeout: 180_000 }
    )
  }
)
