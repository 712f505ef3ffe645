import { assert, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import type { Browser, Page } from "playwright-core"
import { Schedules } from "../../src/Schedules/Schedules.ts"
import { eventually } from "../support/Eventually.ts"
import { launch, screenshot, seriousViolations, unreachableByKeyboard } from "../support/Browser.ts"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"

// The schedules screen in a real headless Chromium against the real service,
// its ticker running: a bad cron named on its field, a schedule created on an
// interval and listed with its next run, its slots' runs shown, paused and
// resumed.

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
          await screenshot(page, "schedules-failure").catch(() => undefined)
          if (errors.length > 0 && error instanceof Error) error.message += `\nThe page logged: ${errors.join("\n")}`
          throw error
        })
        assert.deepStrictEqual(errors, [], "the page logged no errors")
        return result
      }),
    (browser) => Effect.promise(() => browser.close())
  )

const ServerLayer = Schedules.ticker.pipe(
  Layer.provide(Schedules.layer),
  Layer.provideMerge(TestServer.layer({ dashboardEnabled: true }))
)

layer(ServerLayer, { excludeTestServices: true })("the dashboard's schedules", (it) => {
  it.effect(
    "a bad cron is named on its field; a schedule is created, listed with its next run, shows its slots' runs, pauses and resumes",
    () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const base = client.baseUrl
        const served = yield* client.request("GET", "/app/")
        assert.strictEqual(served.status, 200)
        const account = yield* TestServer.signUp()
        const agent = yield* TestServer.createAgent(account, { model: "local" })
        const orchestration = yield* client.request("POST", "/api/orchestrations", {
          headers: TestServer.bearer(account.token),
          body: { name: "Digest", steps: [{ id: "s", agentId: agent.id, prompt: "Say {{input}}" }] }
        })
        assert.strictEqual(orchestration.status, 201, orchestration.text)

        yield* withBrowser(async (page) => {
          await page.goto(`${base}/app/schedules`)
          await page.getByLabel("E-mail").fill(account.email)
          await page.getByLabel("Password").fill(account.password)
          await page.getByRole("button", { name: "Log in" }).click()
          await page.getByRole("heading", { name: "Getting started" }).waitFor()
          await page
            .getByRole("navigation", { name: "Main" })
            .getByRole("link", { name: "Schedules", exact: true })
            .click()
          await page.getByRole("heading", { name: "Schedules", level: 1 }).waitFor()
          await page.getByText("No schedules yet.").waitFor()

          await page.getByLabel("Name", { exact: true }).fill("Digest every second")
          await page.getByLabel("Orchestration", { exact: true }).selectOption({ label: "Digest" })
          await page.getByLabel("Input", { exact: true }).fill("the news")
          await page.getByLabel("Cron", { exact: true }).fill("0 0 9 * * *")
          await page.getByRole("button", { name: "Create schedule" }).click()
          await page
            .getByText(/Expected 5 fields/)
            .first()
            .waitFor()
          assert.strictEqual(await page.getByLabel("Cron", { exact: true }).getAttribute("aria-invalid"), "true")

          await page.getByLabel("Timing", { exact: true }).selectOption("interval")
          await page.getByLabel("Every (seconds)", { exact: true }).fill("1")
          await page.getByRole("button", { name: "Create schedule" }).click()
          await page.getByText("Schedule created.").waitFor()
          const row = page.getByTestId("schedules").getByRole("row").filter({ hasText: "Digest every second" })
          await row.getByText("every 1 s").waitFor()
          assert.include(await row.textContent(), "active")
          assert.include(await row.textContent(), "UTC", "the next run is dated")

          // Once a slot has started its run, the schedule's slots show it.
          await eventually(async () => {
            const listed = await fetch(`${base}/api/schedules`, { headers: TestServer.bearer(account.token) })
            const [schedule] = ((await listed.json()) as any).data
            const runs = await fetch(`${base}/api/schedules/${schedule.id}/runs`, {
              headers: TestServer.bearer(account.token)
            })
            const slots = ((await runs.json()) as any).data as Array<{ status: string }>
            if (!slots.some((slot) => slot.status === "started")) throw new Error("no slot started yet")
          })
          await row.getByRole("button", { name: "Slots" }).click()
          await page.getByRole("heading", { name: /Recent slots of Digest every second/ }).waitFor()
          await page.getByTestId("schedule-runs").getByText("started").first().waitFor()
          await row.getByRole("button", { name: "Pause" }).click()
          await page.getByText("Schedule paused.").waitFor()
          // The message comes with the answer; the list is read again after it.
          await row.getByRole("button", { name: "Resume" }).waitFor()
          assert.include(await row.textContent(), "paused")
          await page.getByText(/^Next five:.*none while paused/).waitFor()
          assert.deepStrictEqual(await seriousViolations(page), [], "schedules: serious accessibility violations")
          assert.deepStrictEqual(await unreachableByKeyboard(page), [], "schedules: controls Tab never reaches")
          await screenshot(page, "schedules")

          await row.getByRole("button", { name: "Resume" }).click()
          await page.getByText("Schedule resumed.").waitFor()
          await row.getByRole("button", { name: "Pause" }).waitFor()
          assert.include(await row.textContent(), "active")
          await row.getByRole("button", { name: "Pause" }).click()
          await page.getByText("Schedule paused.").waitFor()
        })
      }),
    120_000
  )
})
