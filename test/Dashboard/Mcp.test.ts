import { assert, layer } from "@effect/vitest"
import { Effect, Option } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as NodePath from "node:path"
import type { Browser, Page } from "playwright-core"
import { launch, screenshot, seriousViolations, unreachableByKeyboard } from "../support/Browser.ts"
import { eventually } from "../support/Eventually.ts"
import * as FakeAuthServer from "../support/FakeAuthServer.ts"
import * as FakeMcpServer from "../support/FakeMcpServer.ts"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"

// An MCP server's tools on the dashboard, in a real headless Chromium against
// the real service and a fake MCP server (the official SDK) on loopback: the
// tool defined through the form, its server's tools listed with the names the
// model calls them by, one taken out and shown not exposed, listed again
// after the server adds one, and the tool given to an agent, whose form shows
// the server tools the agent gets; and a server behind OAuth, connected by
// following a fake authorization server's approval in the browser and back;
// and a server the operator runs (stdio), named in the form.

/** The operator's stdio servers: `files`, the SDK-built fake started by `node`. */
const serversFile = (() => {
  const dir = Fs.mkdtempSync(NodePath.join(Os.tmpdir(), "dashboard-mcp-"))
  const file = NodePath.join(dir, "servers.json")
  const fake = NodePath.resolve(import.meta.dirname, "../support/fake-stdio-mcp.ts")
  Fs.writeFileSync(file, JSON.stringify({ servers: { files: { command: process.execPath, args: [fake] } } }))
  return file
})()

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
          await screenshot(page, "mcp-failure").catch(() => undefined)
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

/** The server tools table as shown: each row's name and what the model calls it (or why not). */
const listedRows = (page: Page) =>
  page
    .getByTestId("server-tools")
    .locator("tbody tr")
    .evaluateAll((rows) =>
      rows.map((row) => [
        row.querySelector("th")?.textContent?.trim() ?? "",
        row.querySelector("td:last-child")?.textContent?.trim() ?? ""
      ])
    )

layer(
  TestServer.layer({
    dashboardEnabled: true,
    webhookAllowPrivate: true,
    mcpStdioServersFile: Option.some(serversFile)
  }),
  { excludeTestServices: true }
)("the dashboard's MCP server tools", (it) => {
  it.effect(
    "an mcp tool made in the form lists its server's tools; one unticked is not exposed; listed again; given to an agent, whose picker shows the server tools it gets",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          const client = yield* TestClient
          const base = client.baseUrl
          // The page once served (the dashboard is built when its sources changed), so the browser's bounds
          // count from there.
          const served = yield* client.request("GET", "/app/")
          assert.strictEqual(served.status, 200)
          const fake = yield* FakeMcpServer.make
          const account = yield* TestServer.signUp()
          const api = yield* TestServer.apiClient(account.token)
          const agent = yield* api.agents.create({ payload: { name: "Support" } })
          /** The tenant's one tool, as the API gives it. */
          const stored = async () => {
            const page = await Effect.runPromise(api.tools.list({ query: {} }))
            assert.strictEqual(page.data.length, 1)
            return page.data[0]!
          }
          const listings = () => fake.methods().filter((method) => method === "tools/list").length

          yield* withBrowser(async (page) => {
            await page.goto(`${base}/app/tools`)
            await page.getByLabel("E-mail").fill(account.email)
            await page.getByLabel("Password").fill(account.password)
            await page.getByRole("button", { name: "Log in" }).click()
            await page.getByRole("heading", { name: "Getting started" }).waitFor()
            await nav(page, "Tools")
            await page.getByText("No tools yet.").waitFor()

            // The form: an MCP server's tools, with headers (the default) and all of its tools.
            await page.getByLabel("Name", { exact: true }).fill("shop")
            await page.getByLabel("Description", { exact: true }).fill("The shop's MCP server.")
            await page.getByLabel("Kind", { exact: true }).selectOption({ label: "MCP server's tools" })
            assert.strictEqual(await page.getByLabel("Authentication", { exact: true }).inputValue(), "headers")
            await page.getByRole("button", { name: "Add a header" }).waitFor()
            await page.getByLabel("URL", { exact: true }).fill(fake.url)
            await page.getByLabel("Allowed hosts", { exact: true }).fill("127.0.0.1")
            await page.getByText("The server's tools are listed when the tool is saved.").waitFor()
            await page.getByRole("button", { name: "Create tool" }).click()
            await page.getByRole("heading", { name: "Edit shop" }).waitFor()
            const toolId = new URL(page.url()).searchParams.get("tool")!
            assert.isString(toolId)

            // Listed when saved: every tool exposed, under the tool's name.
            await page.getByTestId("server-tools").waitFor()
            assert.deepStrictEqual(await listedRows(page), [
              ["echo", "shop__echo"],
              ["fail", "shop__fail"],
              ["mixed", "shop__mixed"]
            ])
            await page.getByTestId("server-tools").getByText("Echoes the text it is given.").waitFor()
            await page
              .getByTestId("server-tools")
              .getByText(/^Listed \d/)
              .waitFor()
            assert.strictEqual(listings(), 1)
            await accessible(page, "mcp-01-listed")

            // A selection starts from every tool listed; none ticked is named on the field, nothing saved.
            await page
              .getByLabel("Server tools the model sees", { exact: true })
              .selectOption({ label: "Only those ticked" })
            for (const name of ["echo", "fail", "mixed"]) {
              assert.isTrue(await page.getByRole("checkbox", { name: `Expose ${name}` }).isChecked(), name)
            }
            for (const name of ["echo", "fail", "mixed"]) {
              await page.getByRole("checkbox", { name: `Expose ${name}` }).uncheck()
            }
            await page.getByRole("button", { name: "Save" }).click()
            await page.getByText("Expected at least one tool name").first().waitFor()
            const unchanged = await stored()
            assert.strictEqual(unchanged.settings.kind === "mcp" && unchanged.settings.tools, "all")

            // `fail` unticked and saved: stored as the names ticked, and shown not exposed, with why.
            await page.getByRole("checkbox", { name: "Expose echo" }).check()
            await page.getByRole("checkbox", { name: "Expose mixed" }).check()
            await page.getByRole("button", { name: "Save" }).click()
            await page.getByText("Saved shop.").waitFor()
            await eventually(async () => {
              const rows = await listedRows(page)
              assert.deepStrictEqual(rows[0], ["echo", "shop__echo"])
              assert.strictEqual(rows[1]![0], "fail")
              assert.match(rows[1]![1], /^not exposed: .+/)
              assert.deepStrictEqual(rows[2], ["mixed", "shop__mixed"])
            })
            const saved = await stored()
            assert.deepStrictEqual(saved.settings.kind === "mcp" && saved.settings.tools, ["echo", "mixed"])
            assert.isFalse(await page.getByRole("checkbox", { name: "Expose fail" }).isChecked())

            // The server adds a tool: it shows once listed again, not exposed (not among those named).
            fake.addTool("weather", "sunny")
            const before = listings()
            await page.getByRole("button", { name: "List again" }).click()
            await page.getByText("Listed 4 tools of shop's server.").waitFor()
            assert.strictEqual(listings(), before + 1)
            await eventually(async () => {
              const rows = await listedRows(page)
              assert.deepStrictEqual(
                rows.map(([name]) => name),
                ["echo", "fail", "mixed", "weather"]
              )
              assert.match(rows[3]![1], /^not exposed: /)
            })
            assert.isFalse(await page.getByRole("checkbox", { name: "Expose weather" }).isChecked())
            await accessible(page, "mcp-02-selection")

            // The agent's form: the mcp tool picked like any other, its server tools shown by the names the
            // agent's model calls.
            await nav(page, "Agents")
            await page.getByRole("link", { name: /Support/ }).click()
            await page.getByRole("heading", { name: "Edit Support" }).waitFor()
            const picker = page.getByTestId("agent-tools")
            const serverTools = picker.getByRole("list", { name: "shop's server tools" })
            assert.deepStrictEqual(await serverTools.getByRole("listitem").allTextContents(), [
              "shop__echo",
              "shop__mixed"
            ])
            await picker.getByRole("checkbox", { name: /shop/ }).check()
            await page.getByRole("button", { name: "Save" }).click()
            await page.getByText("Saved Support.").waitFor()
            const given = await Effect.runPromise(api.agents.get({ params: { id: agent.id } }))
            assert.deepStrictEqual(given.toolIds, [toolId])
            await accessible(page, "mcp-03-agent-tools")
          })
        })
      ),
    { timeout: 240_000 }
  )

  it.effect(
    "an mcp tool with OAuth: not connected, it asks to connect; Connect goes through the authorization server and back, connected with its tools listed; Disconnect; an error coming back is shown",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          const client = yield* TestClient
          const base = client.baseUrl
          const served = yield* client.request("GET", "/app/")
          assert.strictEqual(served.status, 200)
          const mcp = yield* FakeMcpServer.make
          const auth = yield* FakeAuthServer.make({ mcpUrl: mcp.url })
          const account = yield* TestServer.signUp()
          const api = yield* TestServer.apiClient(account.token)

          yield* withBrowser(async (page) => {
            await page.goto(`${base}/app/tools`)
            await page.getByLabel("E-mail").fill(account.email)
            await page.getByLabel("Password").fill(account.password)
            await page.getByRole("button", { name: "Log in" }).click()
            await page.getByRole("heading", { name: "Getting started" }).waitFor()
            await nav(page, "Tools")

            await page.getByLabel("Name", { exact: true }).fill("vault")
            await page.getByLabel("Description", { exact: true }).fill("The vault's MCP server, behind OAuth.")
            await page.getByLabel("Kind", { exact: true }).selectOption({ label: "MCP server's tools" })
            await page.getByLabel("URL", { exact: true }).fill(auth.url)
            await page.getByLabel("Authentication", { exact: true }).selectOption({ label: "OAuth" })
            await page
              .getByTestId("oauth")
              .getByText(/^Save the tool, then connect/)
              .waitFor()
            await page.getByLabel("Allowed hosts", { exact: true }).fill("127.0.0.1")
            await page.getByRole("button", { name: "Create tool" }).click()
            await page.getByRole("heading", { name: "Edit vault" }).waitFor()
            const toolId = new URL(page.url()).searchParams.get("tool")!

            // Saved with OAuth, not connected: nothing listed yet, and nothing sent to the server unauthorized.
            const created = (await Effect.runPromise(api.tools.list({ query: {} }))).data[0]!
            assert.strictEqual(
              created.settings.kind === "mcp" && "auth" in created.settings && created.settings.auth,
              "oauth"
            )
            await page.getByTestId("oauth-status").getByText("not connected", { exact: true }).waitFor()
            await page.getByText("Connect to list its tools.").waitFor()
            assert.strictEqual(await page.getByRole("button", { name: "List again" }).count(), 0)
            assert.strictEqual(await page.getByRole("button", { name: "Disconnect" }).count(), 0)
            await accessible(page, "mcp-04-oauth-not-connected")

            // Connect: the authorization server approves at once and sends the browser back through the
            // service's callback to this tool, connected, its server's tools listed with the token.
            await page.getByRole("button", { name: "Connect", exact: true }).click()
            await page.getByText("Connected vault to its server.").waitFor()
            assert.strictEqual(new URL(page.url()).pathname, "/app/tools")
            assert.strictEqual(new URL(page.url()).searchParams.get("tool"), toolId)
            assert.isNull(new URL(page.url()).searchParams.get("oauth"), "the outcome is taken out of the URL")
            assert.strictEqual(auth.authorizeRequests().length, 1)
            await page.getByTestId("oauth-status").getByText("connected", { exact: true }).waitFor()
            await page.getByTestId("oauth").getByText(auth.issuer).waitFor()
            await page.getByTestId("server-tools").waitFor()
            assert.deepStrictEqual(await listedRows(page), [
              ["echo", "vault__echo"],
              ["fail", "vault__fail"],
              ["mixed", "vault__mixed"]
            ])
            await accessible(page, "mcp-05-oauth-connected")

            // Listed again with the connection's token.
            const before = mcp.methods().filter((method) => method === "tools/list").length
            await page.getByRole("button", { name: "List again" }).click()
            await page.getByText("Listed 3 tools of vault's server.").waitFor()
            assert.strictEqual(mcp.methods().filter((method) => method === "tools/list").length, before + 1)

            // Disconnected: the service forgets the tokens.
            await page.getByRole("button", { name: "Disconnect" }).click()
            await page.getByText("Disconnected vault.").waitFor()
            await page.getByTestId("oauth-status").getByText("not connected", { exact: true }).waitFor()
            const status = await Effect.runPromise(api.tools.oauthStatus({ params: { id: created.id } }))
            assert.strictEqual(status.status, "not_connected")

            // A connection that failed comes back with why: shown on the tool.
            await page.goto(
              `${base}/app/tools?tool=${toolId}&oauth=error&detail=${encodeURIComponent("The authorization server answered access_denied")}`
            )
            await page
              .getByRole("alert")
              .filter({ hasText: "The authorization server answered access_denied" })
              .waitFor()
            await page.getByRole("heading", { name: "Edit vault" }).waitFor()
          })
        })
      ),
    { timeout: 240_000 }
  )

  it.effect(
    "an mcp tool naming a server the operator runs: no URL, headers or hosts asked; its tools listed",
    () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const base = client.baseUrl
        const served = yield* client.request("GET", "/app/")
        assert.strictEqual(served.status, 200)
        const account = yield* TestServer.signUp()
        const api = yield* TestServer.apiClient(account.token)

        yield* withBrowser(async (page) => {
          await page.goto(`${base}/app/tools`)
          await page.getByLabel("E-mail").fill(account.email)
          await page.getByLabel("Password").fill(account.password)
          await page.getByRole("button", { name: "Log in" }).click()
          await page.getByRole("heading", { name: "Getting started" }).waitFor()
          await nav(page, "Tools")

          await page.getByLabel("Name", { exact: true }).fill("ops")
          await page.getByLabel("Description", { exact: true }).fill("The operator's file tools.")
          await page.getByLabel("Kind", { exact: true }).selectOption({ label: "MCP server's tools" })
          await page.getByLabel("Server", { exact: true }).selectOption({ label: "Run by the operator (stdio)" })
          for (const network of ["URL", "Authentication", "Allowed hosts"]) {
            assert.strictEqual(await page.getByLabel(network, { exact: true }).count(), 0, network)
          }
          assert.strictEqual(await page.getByRole("button", { name: "Add a header" }).count(), 0)
          await page.getByLabel("Server name", { exact: true }).fill("files")
          await page.getByRole("button", { name: "Create tool" }).click()
          await page.getByRole("heading", { name: "Edit ops" }).waitFor()
          await page.getByTestId("server-tools").waitFor()
          const rows = await listedRows(page)
          assert.deepInclude(rows, ["echo", "ops__echo"])
          const [made] = (await Effect.runPromise(api.tools.list({ query: {} }))).data
          assert.strictEqual(
            made!.settings.kind === "mcp" && "server" in made!.settings && made!.settings.server,
            "files"
          )
          // As stored, the form shows the server named.
          assert.strictEqual(await page.getByLabel("Server name", { exact: true }).inputValue(), "files")
          await accessible(page, "mcp-06-stdio")
        })
      }),
    { timeout: 240_000 }
  )
})
