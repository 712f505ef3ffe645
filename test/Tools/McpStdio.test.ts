import { assert, describe, it, layer } from "@effect/vitest"
import { Context, Effect, Exit, Layer, Logger, Option, Scope } from "effect"
import * as ChildProcess from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as NodePath from "node:path"
import { AppConfig } from "../../src/Config.ts"
import { inheritedEnv, loadStdioServers, McpStdio, maxLineBytes } from "../../src/Tools/McpStdio.ts"
import { eventually } from "../support/Eventually.ts"
import * as TestServer from "../support/TestServer.ts"
import { type Account, TestClient } from "../support/TestServer.ts"

// MCP servers the operator runs as local processes (docs/mcp.md#stdio-servers):
// the service on its own against the SDK-built fake (test/support/fake-stdio-mcp.ts)
// started by `node`, then mcp tools naming a configured server through the API,
// and the operator's file refused at start when it is wrong.

const fakeServer = NodePath.resolve(import.meta.dirname, "../support/fake-stdio-mcp.ts")
const configDir = Fs.mkdtempSync(NodePath.join(Os.tmpdir(), "mcp-stdio-"))
Fs.mkdirSync(NodePath.join(configDir, "work"))

const writeFile = (name: string, content: unknown) => {
  const file = NodePath.join(configDir, name)
  Fs.writeFileSync(file, typeof content === "string" ? content : JSON.stringify(content))
  return file
}

const fake = (extra: Record<string, unknown> = {}) => ({ command: process.execPath, args: [fakeServer], ...extra })

/** `files` for every tenant (with an env and a cwd of its own), `private` for tenant-a only, `broken` never starts. */
const serversFile = writeFile("servers.json", {
  servers: {
    files: fake({ env: { FAKE_GREETING: "hello from the operator" }, cwd: "work" }),
    private: fake({ tenants: ["tenant-a"] }),
    broken: { command: NodePath.join(configDir, "no-such-command") }
  }
})

const logs: Array<string> = []
const collectLogs = Logger.layer([Logger.make((options) => void logs.push(String(options.message)))])

const serviceLayer = McpStdio.layer.pipe(
  Layer.provide(AppConfig.layerWith({ mcpStdioServersFile: Option.some(serversFile) })),
  Layer.provide(collectLogs)
)

const within = (ms: number) => ({ deadline: Date.now() + ms, timeoutMessage: `No answer within ${ms} ms` })

/** The text of a tools/call result. */
const textOf = (result: unknown) =>
  ((result as { content: Array<{ text: string }> }).content ?? []).map((block) => block.text).join("")

const envOf = (stdio: McpStdio["Service"], tenantId = "tenant-a") =>
  Effect.map(
    stdio.callTool({ server: "files", tenantId }, "env", {}, within(10_000)),
    (result) => JSON.parse(textOf(result)) as { pid: number; cwd: string; env: Record<string, string> }
  )

/** The fake servers this test process started that are still running. */
const fakeProcesses = () =>
  ChildProcess.execFileSync("ps", ["-o", "pid=,args=", "--ppid", String(process.pid)], { encoding: "utf8" })
    .split("\n")
    .filter((line) => line.includes(fakeServer))

const isRunning = (pid: number) => {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

describe("the stdio servers' service", () => {
  layer(serviceLayer, { excludeTestServices: true })((it) => {
    it.effect("lists the server's tools and calls them through one process, shared by tenants", () =>
      Effect.gen(function* () {
        const stdio = yield* McpStdio
        assert.deepStrictEqual(stdio.names, ["broken", "files", "private"])
        const tools = (yield* stdio.listTools({ server: "files", tenantId: "tenant-a" }, within(10_000))) as Array<{
          name: string
          inputSchema: { properties?: object }
        }>
        assert.deepStrictEqual(
          tools.map((tool) => tool.name),
          ["echo", "fail", "crash", "sleep", "big", "env"]
        )
        assert.deepStrictEqual(Object.keys(tools[0]!.inputSchema.properties ?? {}), ["text"])
        const echoed = yield* stdio.callTool(
          { server: "files", tenantId: "tenant-a" },
          "echo",
          { text: "hi" },
          within(10_000)
        )
        assert.strictEqual(textOf(echoed), "echo: hi")
        const failed = yield* stdio.callTool({ server: "files", tenantId: "tenant-b" }, "fail", {}, within(10_000))
        assert.deepInclude(failed as object, { isError: true })
        const first = yield* envOf(stdio, "tenant-a")
        const second = yield* envOf(stdio, "tenant-b")
        assert.strictEqual(first.pid, second.pid)
        // Its stderr went to the log.
        yield* eventually(
          Effect.sync(() => assert.isTrue(logs.some((line) => line.includes(`fake-stdio-mcp ${first.pid} listening`))))
        )
      })
    )

    it.effect("the process sees the operator's env over a minimal one, in the operator's cwd", () =>
      Effect.gen(function* () {
        const stdio = yield* McpStdio
        const { env, cwd } = yield* envOf(stdio)
        assert.strictEqual(env.FAKE_GREETING, "hello from the operator")
        const inherited: ReadonlyArray<string> = inheritedEnv
        assert.deepStrictEqual(
          Object.keys(env)
            .filter((name) => !inherited.includes(name))
            .sort(),
          ["FAKE_GREETING"]
        )
        assert.strictEqual(env.PATH, process.env.PATH)
        assert.strictEqual(Fs.realpathSync(cwd), Fs.realpathSync(NodePath.join(configDir, "work")))
      })
    )

    it.effect("a tenant not among the server's tenants, or a server not configured, is refused", () =>
      Effect.gen(function* () {
        const stdio = yield* McpStdio
        assert.deepStrictEqual(stdio.availableTo("tenant-a"), ["broken", "files", "private"])
        assert.deepStrictEqual(stdio.availableTo("tenant-b"), ["broken", "files"])
        const allowed = yield* stdio.callTool(
          { server: "private", tenantId: "tenant-a" },
          "echo",
          { text: "a" },
          within(10_000)
        )
        assert.strictEqual(textOf(allowed), "echo: a")
        const refused = yield* Effect.flip(
          stdio.callTool({ server: "private", tenantId: "tenant-b" }, "echo", { text: "b" }, within(10_000))
        )
        assert.strictEqual(refused.reason, "refused")
        const unknown = yield* Effect.flip(stdio.listTools({ server: "nope", tenantId: "tenant-a" }, within(10_000)))
        assert.strictEqual(unknown.reason, "refused")
        const broken = yield* Effect.flip(stdio.listTools({ server: "broken", tenantId: "tenant-a" }, within(10_000)))
        assert.strictEqual(broken.reason, "error")
        assert.match(broken.message, /could not be started: .*ENOENT/)
      })
    )

    it.effect("a crash mid-call fails the call; the next call starts the process again", () =>
      Effect.gen(function* () {
        const stdio = yield* McpStdio
        const before = yield* envOf(stdio)
        const crashed = yield* Effect.flip(
          stdio.callTool({ server: "files", tenantId: "tenant-a" }, "crash", {}, within(10_000))
        )
        assert.strictEqual(crashed.reason, "error")
        assert.match(crashed.message, /exited \(code 3\) before answering/)
        const after = yield* envOf(stdio)
        assert.notStrictEqual(after.pid, before.pid)
        assert.isFalse(isRunning(before.pid))
      })
    )

    it.effect("a request past its deadline is a timeout; the process goes on serving", () =>
      Effect.gen(function* () {
        const stdio = yield* McpStdio
        const before = yield* envOf(stdio)
        const slow = yield* Effect.flip(
          stdio.callTool({ server: "files", tenantId: "tenant-a" }, "sleep", { ms: 5_000 }, within(300))
        )
        assert.deepStrictEqual(slow, { reason: "timeout", message: "No answer within 300 ms" })
        const after = yield* envOf(stdio)
        assert.strictEqual(after.pid, before.pid)
      })
    )

    it.effect("a line over the bound stops the process and fails the call; the next call starts it again", () =>
      Effect.gen(function* () {
        const stdio = yield* McpStdio
        const before = yield* envOf(stdio)
        const big = yield* Effect.flip(
          stdio.callTool({ server: "files", tenantId: "tenant-a" }, "big", { bytes: maxLineBytes + 10 }, within(10_000))
        )
        assert.match(big.message, /a line over 1048576 bytes/)
        const after = yield* envOf(stdio)
        assert.notStrictEqual(after.pid, before.pid)
      })
    )
  })

  it.live("the processes are stopped when the service's scope closes", () =>
    Effect.gen(function* () {
      const scope = yield* Scope.make()
      const context = yield* Layer.buildWithScope(serviceLayer, scope)
      const stdio = Context.get(context, McpStdio)
      const { pid } = yield* envOf(stdio)
      assert.isTrue(isRunning(pid))
      yield* Scope.close(scope, Exit.void)
      yield* eventually(Effect.sync(() => assert.isFalse(isRunning(pid))))
    })
  )
})

describe("the operator's file", () => {
  const refusal = (content: unknown) =>
    Effect.map(Effect.flip(loadStdioServers(writeFile(`bad-${Math.random()}.json`, content))), (error) => error.message)

  it.effect("a bad file stops the start with an error naming the file and the field", () =>
    Effect.gen(function* () {
      const missingCommand = yield* refusal({ servers: { files: { args: [] } } })
      assert.match(missingCommand, /^MCP_STDIO_SERVERS_FILE .*bad-.*\.json: servers\.files\.command: Missing key/)
      const badName = yield* refusal({ servers: { "bad name": fake() } })
      assert.match(badName, /servers\.bad name: .*1 to 64 letters/)
      const typo = yield* refusal({ servers: { files: fake({ tenant: ["a"] }) } })
      assert.match(typo, /servers\.files\.tenant: Unknown field \(a server has command, args, env, cwd, tenants\)/)
      const args = yield* refusal({ servers: { files: fake({ args: "not a list" }) } })
      assert.match(args, /servers\.files\.args: /)
      const noTenants = yield* refusal({ servers: { files: fake({ tenants: [] }) } })
      assert.match(noTenants, /servers\.files\.tenants: Expected at least one tenant id/)
      assert.match(yield* refusal("{ not json"), /is not JSON/)
      const missing = yield* Effect.flip(loadStdioServers(NodePath.join(configDir, "absent.json")))
      assert.match(missing.message, /absent\.json: cannot be read: .*ENOENT/)
    })
  )

  it.effect("the service does not start over a bad file", () =>
    Effect.gen(function* () {
      const bad = writeFile("bad-start.json", { servers: { files: {} } })
      const exit = yield* Effect.exit(
        Layer.build(
          McpStdio.layer.pipe(Layer.provide(AppConfig.layerWith({ mcpStdioServersFile: Option.some(bad) })))
        ).pipe(Effect.scoped)
      )
      assert.isTrue(Exit.isFailure(exit))
      assert.include(String(Exit.isFailure(exit) ? exit.cause : ""), "servers.files.command")
    })
  )

  it.effect("no file: no servers", () =>
    Effect.gen(function* () {
      const stdio = yield* McpStdio
      assert.deepStrictEqual(stdio.names, [])
      const refused = yield* Effect.flip(stdio.listTools({ server: "files", tenantId: "t" }, within(1_000)))
      assert.strictEqual(refused.reason, "refused")
    }).pipe(
      Effect.provide(McpStdio.layer.pipe(Layer.provide(AppConfig.layerWith({ mcpStdioServersFile: Option.none() }))))
    )
  )
})

// ---------------------------------------------------------------------------
// Through the API
// ---------------------------------------------------------------------------

const session = (account: Account) => ({ headers: TestServer.bearer(account.token) })

const stdioTool = (settings: Record<string, unknown> = {}) => ({
  name: "files",
  description: "The operator's files server.",
  settings: { kind: "mcp", server: "files", ...settings }
})

const createTool = (account: Account, body: unknown) =>
  Effect.flatMap(TestClient, (client) => client.request("POST", "/api/tools", { ...session(account), body }))

const testCall = (account: Account, toolId: string, tool: string, args: Record<string, unknown>) =>
  Effect.flatMap(TestClient, (client) =>
    client.request("POST", `/api/tools/${toolId}/test`, {
      ...session(account),
      body: { arguments: { tool, arguments: args } }
    })
  )

layer(TestServer.layer({ mcpStdioServersFile: Option.some(serversFile) }), { excludeTestServices: true })(
  "mcp tools naming a stdio server",
  (it) => {
    it.effect("saved without parameters, its tools listed, called by the model in an execution", () =>
      Effect.gen(function* () {
        const client = yield* TestClient
        const account = yield* TestServer.signUp()
        const created = yield* createTool(account, stdioTool({ tools: ["echo", "crash", "env"] }))
        assert.strictEqual(created.status, 201, created.text)
        assert.deepStrictEqual(created.body.parameters, { type: "object" })
        assert.strictEqual(created.body.settings.server, "files")
        assert.notProperty(created.body.settings, "url")
        const exposed = (created.body.settings.serverTools as Array<{ name: string; exposedAs: string | null }>).map(
          (one) => [one.name, one.exposedAs]
        )
        assert.deepInclude(exposed, ["echo", "files__echo"])
        assert.deepInclude(exposed, ["fail", null])
        const read = yield* client.request("GET", `/api/tools/${created.body.id}`, session(account))
        assert.deepStrictEqual(read.body.settings, created.body.settings)
        const refreshed = yield* client.request("POST", `/api/tools/${created.body.id}/refresh`, session(account))
        assert.strictEqual(refreshed.status, 200, refreshed.text)
        assert.deepStrictEqual(refreshed.body.settings.serverTools, created.body.settings.serverTools)

        const { key } = yield* TestServer.createKey(account, ["execute", "read"])
        const agent = yield* TestServer.createAgent(account, { model: "local", toolIds: [created.body.id] })
        const orchestration = yield* client.request("POST", "/api/orchestrations", {
          ...session(account),
          body: {
            name: "Stdio",
            steps: [{ id: "s", agentId: agent.id, prompt: 'call files__echo {"text": "{{input}}"}' }]
          }
        })
        assert.strictEqual(orchestration.status, 201, orchestration.text)
        const started = yield* client.request("POST", `/api/v1/orchestrations/${orchestration.body.id}/execute`, {
          headers: TestServer.bearer(key),
          body: { input: "hello" }
        })
        assert.strictEqual(started.status, 202, started.text)
        const id = started.body.executionId as string
        const execution = yield* TestServer.waitFor(
          "the execution to finish",
          Effect.map(client.request("GET", `/api/v1/executions/${id}`, { headers: TestServer.bearer(key) }), (reply) =>
            reply.body.status === "completed" || reply.body.status === "failed" ? reply.body : undefined
          )
        )
        assert.strictEqual(execution.status, "completed", JSON.stringify(execution))
        assert.include(execution.output, 'files__echo answered: "echo: hello"')
        const calls = yield* client.request("GET", `/api/v1/executions/${id}/tool-calls`, {
          headers: TestServer.bearer(key)
        })
        assert.deepInclude(calls.body.data[0], { tool: "files__echo", status: "succeeded", result: "echo: hello" })
        // Saving (Tools), refreshing and calling (the invoker) went through one process of this node.
        assert.strictEqual(fakeProcesses().length, 1)
      })
    )

    it.effect("a crash mid-call is a failed call; the next call starts the process again and succeeds", () =>
      Effect.gen(function* () {
        const account = yield* TestServer.signUp()
        const created = yield* createTool(account, stdioTool())
        assert.strictEqual(created.status, 201, created.text)
        const before = yield* testCall(account, created.body.id, "env", {})
        assert.strictEqual(before.body.ok, true, before.text)
        const crashed = yield* testCall(account, created.body.id, "crash", {})
        assert.strictEqual(crashed.status, 200, crashed.text)
        assert.deepInclude(crashed.body, { ok: false, errorKind: "error" })
        assert.match(crashed.body.output, /exited \(code 3\) before answering/)
        assert.deepStrictEqual(crashed.body.exchange, { kind: "http", requests: [] })
        const after = yield* testCall(account, created.body.id, "env", {})
        assert.strictEqual(after.body.ok, true, after.text)
        assert.notStrictEqual(JSON.parse(after.body.output).pid, JSON.parse(before.body.output).pid)
        const echoed = yield* testCall(account, created.body.id, "echo", { text: "again" })
        assert.deepInclude(echoed.body, { ok: true, output: "echo: again" })
      })
    )

    it.effect("an unknown server, a server with a url, or a server not for this tenant is a 400 naming the field", () =>
      Effect.gen(function* () {
        const account = yield* TestServer.signUp()
        const unknown = yield* createTool(account, stdioTool({ server: "nope" }))
        assert.strictEqual(unknown.status, 400, unknown.text)
        assert.deepStrictEqual(unknown.body.errors[0].path, ["payload", "settings", "server"])
        // The names this tenant may use, and not `private`, which is another tenant's.
        assert.match(unknown.body.errors[0].message, /available: broken, files$/)

        const withUrl = yield* createTool(
          account,
          stdioTool({ url: "http://127.0.0.1:1/mcp", allowedHosts: ["127.0.0.1"], headers: { "X-A": "b" } })
        )
        assert.strictEqual(withUrl.status, 400, withUrl.text)
        assert.deepStrictEqual(
          (withUrl.body.errors as Array<{ path: Array<string> }>).map((error) => error.path.at(-1)),
          ["url", "allowedHosts", "headers"]
        )

        const notTheirs = yield* createTool(account, stdioTool({ server: "private" }))
        assert.strictEqual(notTheirs.status, 400, notTheirs.text)
        assert.deepStrictEqual(notTheirs.body.errors[0].path, ["payload", "settings", "server"])

        const neither = yield* createTool(account, { ...stdioTool(), settings: { kind: "mcp" } })
        assert.strictEqual(neither.status, 400, neither.text)
        assert.deepStrictEqual(neither.body.errors[0].path, ["payload", "settings", "url"])

        const broken = yield* createTool(account, stdioTool({ server: "broken" }))
        assert.strictEqual(broken.status, 400, broken.text)
        assert.deepStrictEqual(broken.body.errors[0].path, ["payload", "settings", "server"])
        assert.match(broken.body.errors[0].message, /could not be listed: .*could not be started/)
      })
    )

    it.effect("a tool of another kind still needs its parameters", () =>
      Effect.gen(function* () {
        const account = yield* TestServer.signUp()
        const agent = yield* TestServer.createAgent(account, {})
        const refused = yield* createTool(account, {
          name: "ask",
          description: "Asks another agent.",
          settings: { kind: "agent", agentId: agent.id }
        })
        assert.strictEqual(refused.status, 400, refused.text)
        assert.deepStrictEqual(refused.body.errors[0].path, ["payload", "parameters"])
      })
    )
  }
)
