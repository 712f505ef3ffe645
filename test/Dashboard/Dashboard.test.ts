import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import type { Browser, Page } from "playwright-core"
import { defaultPlanQuotas } from "../../src/Config.ts"
import { launch, resetScreenshots, screenshot, seriousViolations, unreachableByKeyboard } from "../support/Browser.ts"
import { eventually } from "../support/Eventually.ts"
import { FakeOpenAi, openaiKey } from "../support/FakeOpenAi.ts"
import * as FakeReceiver from "../support/FakeReceiver.ts"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"

// The dashboard in a real headless Chromium, driven like a newcomer would use
// it, against the real service. Every screen is checked with axe-core and
// photographed (test-results/dashboard).

const withBrowser = <A>(run: (page: Page, requests: Array<string>) => Promise<A>) =>
  Effect.acquireUseRelease(
    Effect.promise(() => launch()),
    (browser: Browser) =>
      Effect.promise(async () => {
        const context = await browser.newContext({ viewport: { width: 1280, height: 900 } })
        const page = await context.newPage()
        page.setDefaultTimeout(20_000)
        // Every request the page makes, to check that none leaves the service.
        const requests: Array<string> = []
        page.on("request", (request) => void requests.push(request.url()))
        const errors: Array<string> = []
        page.on("pageerror", (error) => void errors.push(error.message))
        page.on("console", (message) => {
          if (message.type() === "error" && !/status of 4\d\d/.test(message.text())) errors.push(message.text())
        })
        // On a failure, the page as it was, beside the screens' pictures.
        const result = await run(page, requests).catch(async (error: unknown) => {
          await screenshot(page, "failure").catch(() => undefined)
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
  const violations = await seriousViolations(page)
  assert.deepStrictEqual(violations, [], `${screen}: serious accessibility violations`)
  // Every control can be reached with the keyboard alone.
  assert.deepStrictEqual(await unreachableByKeyboard(page), [], `${screen}: controls Tab never reaches`)
  await screenshot(page, screen)
}

layer(TestServer.layerWithFakeOpenAi(openaiKey, { dashboardEnabled: true, webhookAllowPrivate: true }), {
  excludeTestServices: true
})("the dashboard", (it) => {
  it.effect(
    "serves the single page at /app with cached hashed assets, and / redirects there",
    () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const root = yield* Effect.promise(() => fetch(`${client.baseUrl}/`, { redirect: "manual" }))
        assert.strictEqual(root.status, 302)
        assert.strictEqual(root.headers.get("location"), "/app/")
        const page = yield* client.request("GET", "/app/agents?status=active")
        assert.strictEqual(page.status, 200)
        assert.match(page.headers.get("content-type") ?? "", /^text\/html/)
        assert.strictEqual(page.headers.get("cache-control"), "no-cache")
        assert.match(page.headers.get("content-security-policy") ?? "", /default-src 'self'/)
        const script = /src="(\/app\/assets\/[^"]+\.js)"/.exec(page.text)?.[1]
        assert.isDefined(script, page.text)
        const asset = yield* client.request("GET", script!)
        assert.strictEqual(asset.status, 200)
        assert.strictEqual(asset.headers.get("cache-control"), "public, max-age=31536000, immutable")
        assert.match(asset.headers.get("content-type") ?? "", /^text\/javascript/)
        // React's production build, although the test runner sets NODE_ENV=test.
        assert.notInclude(asset.text, "jsxDEV", "the dashboard is a production build")
        // A missing asset is a 404 problem, not the page.
        const missing = yield* client.request("GET", "/app/assets/missing-0000.js")
        assert.strictEqual(missing.status, 404)
        assert.strictEqual(missing.headers.get("content-type"), "application/problem+json")
        const wrongMethod = yield* client.request("POST", "/app/keys")
        assert.strictEqual(wrongMethod.status, 405)
      }),
    { timeout: 120_000 }
  )

  it.effect(
    "a newcomer's path: register, a key used over HTTP, an agent, a streamed chat, an orchestration run, a document, a team run and its webhook delivery, usage",
    () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const base = client.baseUrl
        const receiver = yield* FakeReceiver.make
        const openai = yield* FakeOpenAi
        yield* Effect.promise(resetScreenshots)
        yield* withBrowser(async (page, requests) => {
          await page.goto(`${base}/`)
          await page.waitForURL(`${base}/app/`)
          await page.getByRole("heading", { name: "Log in to Agent Host" }).waitFor()
          await accessible(page, "01-login")

          // Register.
          await page.getByRole("link", { name: "Create an account" }).click()
          await page.getByRole("heading", { name: "Create your account" }).waitFor()
          assert.strictEqual(new URL(page.url()).pathname, "/app/register")
          await page.getByLabel("E-mail").fill("not-an-address")
          await page.getByLabel("Password").fill("short")
          await page.getByRole("button", { name: "Create account" }).click()
          // The service's own validation, shown as it names the fields.
          await page.getByRole("alert").filter({ hasText: "payload.email" }).waitFor()
          await accessible(page, "02-register-errors")
          const email = `newcomer-${Date.now()}@example.com`
          await page.getByLabel("E-mail").fill(email)
          await page.getByLabel("Password").fill("a-long-enough-password")
          await page.getByRole("button", { name: "Create account" }).click()
          await page.getByRole("heading", { name: "Getting started" }).waitFor()
          assert.strictEqual(await page.getByTestId("step-keys").getAttribute("data-done"), "false")
          // The skip link is the first stop of the keyboard.
          await page.keyboard.press("Tab")
          assert.strictEqual(await page.evaluate("document.activeElement?.textContent"), "Skip to content")
          await accessible(page, "03-getting-started")

          // Make a key, with an expiry preset that shows its date.
          await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "API keys" }).click()
          await page.getByRole("heading", { name: "API keys", level: 1 }).waitFor()
          await page.getByLabel("Name").fill("ci")
          await page.getByLabel("Expires").selectOption("30")
          const expiryHint = await page.getByText(/^On .* UTC\.$/).textContent()
          assert.match(expiryHint ?? "", /^On \d{1,2} \w{3} \d{4}/)
          await page.getByRole("button", { name: "Create key" }).click()
          const key = (await page.getByTestId("new-key").textContent()) ?? ""
          assert.match(key, /^\S{20,}$/)
          await accessible(page, "04-key-created")

          // The key works with a plain HTTP call, outside the browser.
          const agentsByKey = await fetch(`${base}/api/v1/agents`, { headers: { authorization: `Bearer ${key}` } })
          assert.strictEqual(agentsByKey.status, 200)
          await page.getByRole("button", { name: "I have stored it" }).click()
          assert.strictEqual(await page.getByTestId("new-key").count(), 0, "the secret is gone once dismissed")
          const row = page.getByRole("row").filter({ hasText: "ci" })
          assert.include(await row.textContent(), "read, chat, execute, teams")

          // Make an agent: first with a mistake the API names on its field, then right.
          await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Agents" }).click()
          await page.getByRole("heading", { name: "New agent" }).waitFor()
          await page.getByLabel("Name").fill("Helper")
          await page.getByLabel("Model").fill("unknown-model")
          await page.getByRole("button", { name: "Create agent" }).click()
          await page.getByText("Expected `local`, `openai/<model>` or `anthropic/<model>`").first().waitFor()
          assert.strictEqual(await page.getByLabel("Model").getAttribute("aria-invalid"), "true")
          await page.getByLabel("Model").fill("local")
          await page.getByLabel("Instructions").fill("Answer briefly.")
          await page.getByRole("button", { name: "Create agent" }).click()
          await page.getByRole("heading", { name: "Edit Helper" }).waitFor()
          const agentId = new URL(page.url()).searchParams.get("agent")
          assert.isString(agentId)
          await accessible(page, "05-agents")

          // The selection lives in the URL: a reload shows the same agent.
          await page.reload()
          await page.getByRole("heading", { name: "Edit Helper" }).waitFor()
          assert.strictEqual(await page.getByLabel("Instructions").inputValue(), "Answer briefly.")
          // And the key sees it too.
          const listed: any = await (
            await fetch(`${base}/api/v1/agents`, { headers: { authorization: `Bearer ${key}` } })
          ).json()
          assert.deepStrictEqual(
            listed.data.map((agent: { id: string }) => agent.id),
            [agentId]
          )
          // A filter in the URL.
          await page.getByLabel("Status").first().selectOption("inactive")
          await page.getByText("No agents inactive.").waitFor()
          assert.strictEqual(new URL(page.url()).searchParams.get("status"), "inactive")

          await page.getByLabel("Status").first().selectOption("all")

          // Chat, streamed: the reply, its model and tokens.
          await nav(page, "Chat")
          await page.getByLabel("Agent").selectOption({ label: "Helper (local)" })
          await page.getByLabel("Message").fill("What is a durable execution?")
          await page.getByRole("button", { name: "Send" }).click()
          await page.getByTestId("messages").getByText("local ·").first().waitFor()
          const conversation = new URL(page.url()).searchParams.get("conversation")
          assert.isString(conversation, "the conversation is in the URL")
          await page.getByLabel("Message").fill("And again?")
          await page.getByRole("button", { name: "Send" }).click()
          await page.getByTestId("messages").getByRole("listitem").nth(1).getByText("local ·").waitFor()
          await page.getByRole("link", { name: /2 turns/ }).waitFor()
          await accessible(page, "06-chat")

          // A reply that stalls midway is stopped from the page: its text so far stays, no turn is stored,
          // and the next message is answered.
          await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Agents" }).click()
          await page.getByRole("button", { name: "New agent" }).click()
          await page.getByLabel("Name").fill("Streamer")
          await page.getByLabel("Model").fill("openai/gpt-4o-mini")
          await page.getByRole("button", { name: "Create agent" }).click()
          await page.getByRole("heading", { name: "Edit Streamer" }).waitFor()
          const streamerId = new URL(page.url()).searchParams.get("agent")!
          openai.script({ text: "first second third fourth fifth", stallAfter: 2 })
          await nav(page, "Chat")
          await page.getByLabel("Agent").selectOption({ label: "Streamer (openai/gpt-4o-mini)" })
          await page.getByLabel("Message").fill("Tell me a long story")
          await page.getByRole("button", { name: "Send" }).click()
          await page.getByTestId("live-turn").getByText("first second").waitFor()
          await page.getByRole("button", { name: "Stop" }).click()
          await page.getByTestId("live-turn").getByText("Stopped.").waitFor()
          const stored = (await page.evaluate(
            `fetch("/api/agents/${streamerId}/conversations").then((r) => r.json())`
          )) as {
            data: Array<{ turns: number }>
          }
          assert.strictEqual(
            stored.data.reduce((sum, c) => sum + c.turns, 0),
            0,
            "a stopped reply is not stored"
          )
          await page.getByLabel("Message").fill("A short one, then")
          await page.getByRole("button", { name: "Send" }).click()
          // (The reply's model and tokens: on the live turn, then on the stored one that replaces it.)
          await page
            .getByTestId("messages")
            .getByText(/gpt-4o-mini · \d+ tokens/)
            .first()
            .waitFor()

          // An orchestration: a step that refers to a step it does not wait for is refused, on that step.
          // The list of agents is held back until the form is filled in: its
          // arrival gives the steps their default agent and keeps what was typed.
          let releaseAgents = () => {}
          const agentsHeld = new Promise<void>((resolve) => (releaseAgents = resolve))
          const isAgentList = (url: URL) => url.pathname === "/api/agents"
          await page.route(isAgentList, async (route) => {
            await agentsHeld
            await route.fallback()
          })
          await nav(page, "Orchestrations")
          await page.getByLabel("Name").fill("Summarise")
          await page.getByLabel("Step 1 prompt").fill("Summarise {{input}}")
          await page.getByRole("button", { name: "Add a step" }).click()
          await page.getByLabel("Step 2 prompt").fill("Shorten {{steps.step1.output}}")
          assert.strictEqual(await page.getByLabel("Step 2 agent").inputValue(), "", "no agent to choose yet")
          releaseAgents()
          const stepAgents = () => Promise.all([1, 2].map((n) => page.getByLabel(`Step ${n} agent`).inputValue()))
          const [firstAgent, secondAgent] = await eventually(async () => {
            const agents = await stepAgents()
            assert.notInclude(agents, "", "the steps' default agent")
            return agents
          })
          assert.strictEqual(secondAgent, firstAgent, "both steps get the default agent")
          assert.strictEqual(await page.getByLabel("Name").inputValue(), "Summarise", "the name typed is kept")
          assert.strictEqual(await page.getByLabel("Step 2 prompt").inputValue(), "Shorten {{steps.step1.output}}")
          await page.getByRole("button", { name: "Create orchestration" }).click()
          const stepError = page.getByTestId("step-1").getByRole("alert")
          await stepError.waitFor()
          assert.match((await stepError.textContent()) ?? "", /step1/)
          assert.strictEqual(
            await page.getByTestId("step-0").getByRole("alert").count(),
            0,
            "the error is on the step that has it"
          )
          await accessible(page, "07-orchestration-errors")
          await page.getByRole("group", { name: "Step 2 waits for" }).getByLabel("step1").check()
          await page.getByRole("button", { name: "Create orchestration" }).click()
          await page.getByRole("heading", { name: "Edit Summarise" }).waitFor()
          await page.getByLabel("Input").fill("the dashboard")
          await page.getByRole("button", { name: "Execute" }).click()
          await page.getByTestId("execution").and(page.locator("[data-status=completed]")).waitFor()
          assert.include(await page.getByTestId("execution-output").textContent(), "the dashboard")
          await accessible(page, "08-orchestrations")

          // A failed execution retried: the completed step carried over, only the failed one asked again.
          await page.getByLabel("Step 1 agent").selectOption({ label: "Helper" })
          await page.getByLabel("Step 2 agent").selectOption({ label: "Streamer" })
          await page.getByRole("button", { name: "Save", exact: true }).click()
          await page.getByText("Saved.").waitFor()
          openai.script({ status: 500 })
          await page.getByRole("button", { name: "Execute" }).click()
          await page.getByTestId("execution").and(page.locator("[data-status=failed]")).waitFor()
          const askedBefore = openai.requests.length
          await page.getByRole("button", { name: "Retry", exact: true }).click()
          await page
            .getByTestId("execution")
            .and(page.locator("[data-status=completed]"))
            .filter({ has: page.getByTestId("execution-retry-of") })
            .waitFor()
          assert.include(await page.getByTestId("execution-retry-of").textContent(), "step1")
          assert.strictEqual(openai.requests.length - askedBefore, 1, "only the failed step asked its model again")

          // Knowledge: a base, a file uploaded, its chunks, a search.
          await nav(page, "Knowledge")
          await page.getByLabel("New base name").fill("Handbook")
          await page.getByRole("button", { name: "Create base" }).click()
          await page.getByRole("heading", { name: "Handbook" }).waitFor()
          await page.getByLabel("Choose files").setInputFiles({
            name: "refunds.md",
            mimeType: "text/markdown",
            buffer: Buffer.from(
              "# Refunds\n\nRefunds are paid back within five working days.\n\n# Shipping\n\nParcels leave the warehouse every morning.\n"
            )
          })
          await page.getByTestId("documents").getByText("ready").waitFor()
          await page.getByRole("link", { name: "refunds.md" }).click()
          await page.getByTestId("chunks").getByText("Parcels leave the warehouse").waitFor()
          await page.getByLabel("Search this base").fill("when are refunds paid")
          await page.getByRole("button", { name: "Search", exact: true }).click()
          await page.getByTestId("search-hits").getByText("five working days").waitFor()
          await accessible(page, "09-knowledge")

          // A team whose webhook goes to a receiver on loopback: its secret shown once, a run, the delivery logged.
          await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Agents" }).click()
          await page.getByRole("button", { name: "New agent" }).click()
          await page.getByLabel("Name").fill("Critic")
          await page.getByRole("button", { name: "Create agent" }).click()
          await page.getByRole("heading", { name: "Edit Critic" }).waitFor()
          await nav(page, "Teams")
          await page.getByLabel("Name").fill("Review board")
          await page.getByRole("checkbox", { name: "Helper" }).check()
          await page.getByLabel("Role of Helper").fill("writer")
          await page.getByRole("checkbox", { name: "Critic" }).check()
          await page.getByLabel("Role of Critic").fill("reviewer")
          await page.getByLabel("Output webhook URL").fill(receiver.url("/hook"))
          await page.getByRole("button", { name: "Create team" }).click()
          const signingSecret = (await page.getByTestId("signing-secret").textContent()) ?? ""
          assert.match(signingSecret, /^whsec_/)
          await page.getByLabel("Mission").fill("Write a two-line welcome note")
          await page.getByRole("button", { name: "Start the run" }).click()
          await page.getByTestId("run-detail").and(page.locator("[data-status=completed]")).waitFor()
          assert.isAbove((await page.getByTestId("run-result").textContent())?.length ?? 0, 0)
          await page.getByTestId("deliveries").getByText("team.run.completed").waitFor()
          assert.strictEqual(receiver.requests.filter((r) => r.path === "/hook").length, 1)
          await accessible(page, "10-teams")
          // Redelivered from the log: the same event id again, logged as a redelivery.
          await page
            .getByTestId("deliveries")
            .getByRole("button", { name: /^Redeliver / })
            .click()
          await eventually(() =>
            assert.strictEqual(receiver.requests.filter((r) => r.path === "/hook").length, 2, "the redelivery")
          )
          const [first, second] = receiver.requests.filter((r) => r.path === "/hook")
          assert.strictEqual(second!.headers["webhook-id"], first!.headers["webhook-id"])
          await page.getByRole("button", { name: "Refresh" }).click()
          await page.getByTestId("deliveries").getByText("(redelivery 1)").waitFor()

          // Usage: counted today, in the chart's table: the key's two requests and the
          // dashboard's model work and knowledge requests (four chats, two executes, a
          // retry, an upload, a search and a team run), which count like their key twins.
          await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Usage and plan" }).click()
          await page.getByTestId("usage-table").waitFor()
          assert.strictEqual(await page.getByTestId("plan").textContent(), "free")
          const today = new Date().toISOString().slice(0, 10)
          const todayRow = await page
            .getByTestId("usage-table")
            .getByRole("row")
            .filter({ hasText: today })
            .textContent()
          assert.match(
            todayRow ?? "",
            new RegExp(`^${today}12[1-9]`),
            "twelve requests, and the chats' and runs' tokens"
          )
          await accessible(page, "11-usage")

          // The checklist shows what was done.
          await nav(page, "Getting started")
          await page.getByTestId("step-keys").and(page.locator("[data-done=true]")).waitFor()
          for (const step of ["agents", "chat", "orchestrations"]) {
            assert.strictEqual(await page.getByTestId(`step-${step}`).getAttribute("data-done"), "true", step)
          }

          // Revoke the key, confirming in a dialog; it is refused from then on.
          await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "API keys" }).click()
          await page.getByRole("button", { name: "Revoke ci" }).click()
          const dialog = page.getByRole("dialog", { name: "Revoke “ci”?" })
          await dialog.waitFor()
          await accessible(page, "12-revoke-dialog")
          await dialog.getByRole("button", { name: "Revoke key" }).click()
          await page.getByText("No keys yet.").waitFor()
          const refused = await fetch(`${base}/api/v1/agents`, { headers: { authorization: `Bearer ${key}` } })
          assert.strictEqual(refused.status, 401)

          // Log out: the session is gone, and so is the dashboard.
          await page.getByRole("button", { name: "Log out" }).click()
          await page.getByRole("heading", { name: "Log in to Agent Host" }).waitFor()
          const cookies = await page.context().cookies()
          const me = await page.evaluate(async () => (await fetch("/api/auth/me")).status)
          assert.strictEqual(me, 401, `cookies left: ${JSON.stringify(cookies.map((c) => c.name))}`)

          // Log in again from a link straight to a screen.
          await page.goto(`${base}/app/keys`)
          await page.getByLabel("E-mail").fill(email)
          await page.getByLabel("Password").fill("a-long-enough-password")
          await page.getByRole("button", { name: "Log in" }).click()
          await page.getByRole("heading", { name: "Getting started" }).waitFor()

          // Nothing was fetched from anywhere but the service.
          const foreign = requests.filter((url) => !url.startsWith(`${base}/`))
          assert.deepStrictEqual(foreign, [])
        })
      }),
    { timeout: 240_000 }
  )
})

// One agent (and one key) more than the dashboard's page of 50 (the free plan
// keeps 50 agents and 10 keys, so this server lets it keep more).
const pagedAgents = 51
const pagedKeys = 51

layer(
  TestServer.layer({
    dashboardEnabled: true,
    planQuotas: {
      ...defaultPlanQuotas,
      free: { ...defaultPlanQuotas.free, agents: pagedAgents, apiKeys: pagedKeys }
    }
  }),
  { excludeTestServices: true }
)("the dashboard's lists", (it) => {
  it.effect(
    "a list longer than a page shows its later items after “Load more”, and an item on a later page opens from its link",
    () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const base = client.baseUrl
        const account = yield* TestServer.signUp()
        const names = Array.from({ length: pagedAgents }, (_, i) => `Agent ${String(i + 1).padStart(2, "0")}`)
        const ids = new Map<string, string>()
        for (const name of names) ids.set(name, (yield* TestServer.createAgent(account, { name })).id)
        yield* withBrowser(async (page) => {
          await page.goto(`${base}/app/agents`)
          await page.getByLabel("E-mail").fill(account.email)
          await page.getByLabel("Password").fill(account.password)
          await page.getByRole("button", { name: "Log in" }).click()
          await page.getByRole("heading", { name: "Getting started" }).waitFor()
          await nav(page, "Agents")
          const list = page.getByRole("region", { name: "Your agents" }).getByRole("listitem")
          const shown = async () => (await list.locator("strong").allTextContents()).sort()
          const more = page.getByRole("button", { name: "Load more agents" })
          await more.waitFor()
          const firstPage = await shown()
          assert.strictEqual(firstPage.length, 50, "one page of agents at first")
          const later = names.filter((name) => !firstPage.includes(name))
          assert.strictEqual(later.length, 1)
          await page.getByText(`50 of ${pagedAgents} shown`).waitFor()
          await accessible(page, "13-agents-paged")

          await more.click()
          await list.filter({ hasText: later[0]! }).waitFor()
          assert.deepStrictEqual(await shown(), names, "every agent, once, after the next page")
          assert.strictEqual(await more.count(), 0, "nothing left to load")

          // A link to an agent of the second page opens it from the first page.
          await page.goto(`${base}/app/agents?agent=${ids.get(later[0]!)}`)
          await page.getByRole("heading", { name: `Edit ${later[0]}` }).waitFor()
          assert.strictEqual(await list.count(), 50)
          // A choice of agents offers every one of them.
          await nav(page, "Chat")
          await page.getByLabel("Agent").locator("option", { hasText: later[0]! }).waitFor({ state: "attached" })
        })
      }),
    { timeout: 180_000 }
  )

  it.effect(
    "the keys screen shows a page of keys, and the next after “Load more”",
    () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const base = client.baseUrl
        const account = yield* TestServer.signUp()
        const api = yield* TestServer.apiClient(account.token)
        const names = Array.from({ length: pagedKeys }, (_, i) => `Key ${String(i + 1).padStart(2, "0")}`)
        for (const name of names) yield* api.keys.create({ payload: { name } })
        yield* withBrowser(async (page) => {
          await page.goto(`${base}/app/keys`)
          await page.getByLabel("E-mail").fill(account.email)
          await page.getByLabel("Password").fill(account.password)
          await page.getByRole("button", { name: "Log in" }).click()
          await page.getByRole("heading", { name: "Getting started" }).waitFor()
          await nav(page, "API keys")
          const rows = page.getByRole("region", { name: "Your keys" }).locator("tbody tr")
          const more = page.getByRole("button", { name: "Load more keys" })
          await more.waitFor()
          assert.strictEqual(await rows.count(), 50, "one page of keys at first")
          await page.getByText(`50 of ${pagedKeys} shown`).waitFor()

          await more.click()
          await rows.filter({ hasText: names[pagedKeys - 1]! }).waitFor()
          assert.deepStrictEqual((await rows.locator("th").allTextContents()).sort(), names, "every key, once")
          assert.strictEqual(await more.count(), 0, "nothing left to load")
        })
      }),
    { timeout: 180_000 }
  )
})
