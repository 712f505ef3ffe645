// Measures the service side by side with a baseline, each under the same load
// from this process (autocannon, 50 connections), and prints the figures.
//
//   npm run bench                  embedded PostgreSQL in a temp directory
//   BENCH_DATABASE_URL=... npm run bench   an existing server (a database is created there)
//   BENCH_SECONDS=10               seconds per measurement
//   BENCH_ONLY=mcp                 only the figure of chat with one MCP tool call
import autocannon from "autocannon"
import * as ChildProcess from "node:child_process"
import type * as Http from "node:http"
import * as Os from "node:os"
import pg from "pg"
import { type McpFigures, measureMcpToolCall } from "./Mcp.ts"
import { openLoop, type OpenLoopResult, pacedLoop, send } from "./OpenLoop.ts"
import { cpuMicros, json, measureLoad, openDatabase, root, rssMb, signUp, spawn } from "./Support.ts"

const seconds = Number(process.env.BENCH_SECONDS ?? 10)
const connections = 50
// How long chat runs at its fixed rate before its overhead is measured.
const chatSettleSeconds = 20
// How long the service is left quiet before its settled idle RSS is read,
// after the executions before chat starts, and after the closed-loop chat
// before the fixed-rate chat: longer than the memory reducer's
// quiet period (src/Runtime/MemoryReducer.ts), so what start-up or the burst
// left is given back first.
const quietSeconds = 18

/** Load with autocannon, noting the CPU the measured process spent per answered request. */
const load = (pid: number, options: Partial<autocannon.Options> & { readonly url: string }) =>
  measureLoad(pid, { connections, duration: seconds, ...options })

const row = (name: string, result: Awaited<ReturnType<typeof load>>) =>
  `${name.padEnd(50)} ${String(Math.round(result.requests.average)).padStart(6)} req/s  p50 ${String(
    result.latency.p50
  ).padStart(3)} ms  p99 ${String(result.latency.p99).padStart(3)} ms  ${String(
    Math.round(result.cpuPerRequest)
  ).padStart(4)} µs CPU/req  non-2xx ${result.non2xx}`

const ratio = (a: { requests: { average: number } }, b: { requests: { average: number } }) =>
  (a.requests.average / b.requests.average).toFixed(2)

const pacedRow = (name: string, result: OpenLoopResult, cpuPerRequest?: number) =>
  `${name.padEnd(50)} ${String(result.ok).padStart(6)} answered  p50 ${result.p50.toFixed(2)} ms  p99 ${result.p99.toFixed(
    2
  )} ms  max ${result.max.toFixed(1)} ms${
    cpuPerRequest === undefined ? "" : `  ${Math.round(cpuPerRequest)} µs CPU/req`
  }  failed ${result.failed}`

const providerModel = "gpt-4o-mini"

/** The instant provider on a free port, ready (it answers anything but its one route with a 404). */
const spawnProvider = () => spawn("bench/provider.ts", {})

// The http tool of the tool-call figures, on an instant loopback receiver.
const lookupParameters = {
  type: "object",
  properties: { id: { type: "string" } },
  required: ["id"],
  additionalProperties: false
}
const lookupDescription = "Looks an item up by its id."

const chatRate = 200

/** A difference in ms with its sign: a noisy run may make it negative. */
const signed = (ms: number) => `${ms < 0 ? "" : "+"}${ms.toFixed(2)}`

/** The rows and the summary of chat with one MCP tool call (bench/Mcp.ts). */
const mcpLines = (mcp: McpFigures) => ({
  rows: [
    pacedRow("tools/call on the MCP server directly", mcp.raw),
    pacedRow("with one MCP call: provider, tools/call, provider", mcp.direct),
    pacedRow(`chat with one MCP tool call through the service, first ${seconds} s`, mcp.viaFirst),
    pacedRow(`the same after ${chatSettleSeconds} s more of it`, mcp.via, mcp.viaCpu)
  ],
  summary: `chat with one MCP tool call at ${chatRate} req/s over the provider twice and the MCP server directly: p50 ${signed(
    mcp.via.p50 - mcp.direct.p50
  )} ms, p99 ${signed(mcp.via.p99 - mcp.direct.p99)} ms; in its first ${seconds} s: p50 ${signed(
    mcp.viaFirst.p50 - mcp.direct.p50
  )} ms, p99 ${signed(mcp.viaFirst.p99 - mcp.direct.p99)} ms; the tools/call alone: p50 ${mcp.raw.p50.toFixed(2)} ms, p99 ${mcp.raw.p99.toFixed(2)} ms; chat MCP tool calls: ${mcp.toolCalls}`,
  figure: [
    "chat with one MCP tool call, added p50 / p99 at 200 req/s (after warm-up)",
    `${(mcp.via.p50 - mcp.direct.p50).toFixed(1)} / ${(mcp.via.p99 - mcp.direct.p99).toFixed(1)} ms`,
    "(beside the http tool's)"
  ] as [string, string, string]
})

const main = async () => {
  const { close, databaseUrl } = await openDatabase("bench")
  // An instant OpenAI-compatible provider: chat through the service is
  // compared with calling it directly.
  const provider = await spawnProvider()
  const providerEnv = { OPENAI_BASE_URL: `${provider.url}/v1`, OPENAI_API_KEY: "bench-provider-key" }
  // The tool's receiver, on loopback: the service may call it only with private targets allowed.
  const receiver = await spawn("bench/receiver.ts", {})
  // The mcp tool's server, on loopback too.
  const mcpServer = await spawn("bench/mcp-server.ts", {})
  const service = await spawn("src/main.ts", {
    DATABASE_URL: databaseUrl,
    WEBHOOK_ALLOW_PRIVATE: "true",
    ...providerEnv
  })
  const pid = service.child.pid!
  const measureMcp = (auth: Record<string, string>, keyHeader: Record<string, string>, db: pg.Client) =>
    measureMcpToolCall({
      serviceUrl: service.url,
      pid,
      auth,
      keyHeader,
      providerUrl: `${provider.url}/v1/chat/completions`,
      providerHeaders: { authorization: "Bearer bench-provider-key" },
      providerModel,
      mcpUrl: `${mcpServer.url}/mcp`,
      db,
      rate: chatRate,
      seconds,
      settleSeconds: chatSettleSeconds
    })
  try {
    if (process.env.BENCH_ONLY === "mcp") {
      const { auth } = await signUp(service.url)
      const { key } = await json(`${service.url}/api/keys`, {
        method: "POST",
        headers: auth,
        body: JSON.stringify({ name: "bench" })
      })
      const db = new pg.Client({ connectionString: databaseUrl })
      await db.connect()
      await db.query("UPDATE tenants SET plan = 'business'")
      const mcp = mcpLines(await measureMcp(auth, { authorization: `Bearer ${key}` }, db))
      await db.end()
      console.log(`\n${seconds}s per measurement, ${Os.cpus().length} cores\n`)
      for (const line of mcp.rows) console.log(line)
      console.log(`\n${mcp.summary}`)
      return
    }
    const idleRss = await rssMb(pid)
    await new Promise((resolve) => setTimeout(resolve, quietSeconds * 1000))
    const settledIdleRss = await rssMb(pid)
    const { auth } = await signUp(service.url)
    const { key } = await json(`${service.url}/api/keys`, {
      method: "POST",
      headers: auth,
      body: JSON.stringify({ name: "bench" })
    })
    const agents = []
    for (let i = 0; i < 10; i++) {
      agents.push(
        await json(`${service.url}/api/agents`, {
          method: "POST",
          headers: auth,
          body: JSON.stringify({ name: `Agent ${i}`, memoryEnabled: false })
        })
      )
    }
    const providerAgent = await json(`${service.url}/api/agents`, {
      method: "POST",
      headers: auth,
      body: JSON.stringify({ name: "Instant provider", model: `openai/${providerModel}`, memoryEnabled: false })
    })
    const orchestration = await json(`${service.url}/api/orchestrations`, {
      method: "POST",
      headers: auth,
      body: JSON.stringify({ name: "One step", steps: [{ id: "s", agentId: agents[0].id, prompt: "Say {{input}}" }] })
    })
    const lookupTool = await json(`${service.url}/api/tools`, {
      method: "POST",
      headers: auth,
      body: JSON.stringify({
        name: "lookup",
        description: lookupDescription,
        parameters: lookupParameters,
        settings: { kind: "http", method: "GET", url: `${receiver.url}/items/{{args.id}}`, allowedHosts: ["127.0.0.1"] }
      })
    })
    // The same one-step orchestration with one tool call: the local model calls
    // the tool the step's prompt names (its tool rule, docs/tools.md), then answers from the result.
    const localToolAgent = await json(`${service.url}/api/agents`, {
      method: "POST",
      headers: auth,
      body: JSON.stringify({ name: "Local with a tool", memoryEnabled: false, toolIds: [lookupTool.id] })
    })
    const toolOrchestration = await json(`${service.url}/api/orchestrations`, {
      method: "POST",
      headers: auth,
      body: JSON.stringify({
        name: "One step, one tool call",
        steps: [{ id: "s", agentId: localToolAgent.id, prompt: 'Look {{input}} up: call lookup {"id": "A-1"}' }]
      })
    })
    const providerToolAgent = await json(`${service.url}/api/agents`, {
      method: "POST",
      headers: auth,
      body: JSON.stringify({
        name: "Instant provider with a tool",
        model: `openai/${providerModel}`,
        memoryEnabled: false,
        toolIds: [lookupTool.id]
      })
    })
    const baseline = await spawn("bench/baseline.ts", { DATABASE_URL: databaseUrl })
    const baselinePid = baseline.child.pid!
    // The same service without daily limits, on the same database, to price the counting.
    const uncounted = await spawn("src/main.ts", {
      DATABASE_URL: databaseUrl,
      ENFORCE_DAILY_LIMITS: "false",
      ...providerEnv
    })
    // A warm start: the database is migrated and the modules are in the file cache.
    const warmStartMs = uncounted.readyMs
    const db = new pg.Client({ connectionString: databaseUrl })
    await db.connect()
    // The bench tenant must not run out of requests.
    await db.query("UPDATE tenants SET plan = 'business'")

    const warm = (u: string, extra: Partial<autocannon.Options> = {}) =>
      new Promise((resolve) => autocannon({ connections, ...extra, url: u, duration: 2 }, resolve))
    const keyHeader = { authorization: `Bearer ${key}` }

    // Reads: the v1 list against one SELECT by primary key.
    await warm(`${baseline.url}/agents/${agents[0].id}`)
    const select = await load(baselinePid, { url: `${baseline.url}/agents/${agents[0].id}` })
    await warm(`${service.url}/api/v1/agents`, { headers: keyHeader })
    const list = await load(pid, { url: `${service.url}/api/v1/agents`, headers: keyHeader })
    await warm(`${uncounted.url}/api/v1/agents`, { headers: keyHeader })
    const listUncounted = await load(uncounted.child.pid!, {
      url: `${uncounted.url}/api/v1/agents`,
      headers: keyHeader
    })
    // Both run the cluster on one database in single-node mode: the second
    // must be gone before the executions, or the two would share the shards.
    uncounted.child.kill("SIGTERM")
    await new Promise((resolve) => uncounted.child.once("exit", resolve))

    // Writes: execute (202 once the run is durable) against one INSERT; then
    // how fast the accepted one-step runs complete on the instant local model.
    const body = JSON.stringify({ input: "hello" })
    const post = { method: "POST" as const, body, headers: { ...keyHeader, "content-type": "application/json" } }
    await warm(`${baseline.url}/items`, post)
    const insert = await load(baselinePid, { url: `${baseline.url}/items`, ...post })
    const executeUrl = `${service.url}/api/v1/orchestrations/${orchestration.id}/execute`
    const countDone = async () =>
      Number((await db.query("SELECT count(*) AS n FROM executions WHERE status IN ('completed', 'failed')")).rows[0].n)
    const waitForRuns = async (total: number, withinSeconds = 120) => {
      for (let i = 0; i < withinSeconds * 50; i++) {
        const done = Number(
          (await db.query("SELECT count(*) AS n FROM executions WHERE status NOT IN ('pending', 'running')")).rows[0].n
        )
        if (done >= total) return
        await new Promise((resolve) => setTimeout(resolve, 20))
      }
      throw new Error(`executions did not finish within ${withinSeconds} s`)
    }
    await warm(executeUrl, post)
    await waitForRuns(Number((await db.query("SELECT count(*) AS n FROM executions")).rows[0].n))
    let burstRss = 0
    const sampleRss = setInterval(() => void rssMb(pid).then((mb) => (burstRss = Math.max(burstRss, mb))), 200)
    // One burst: the executions accepted in `seconds`, then how fast all of
    // them finish, counted from the first request to the last completion.
    const executeBurst = async (url = executeUrl) => {
      const doneBefore = await countDone()
      const startedAt = performance.now()
      const result = await load(pid, { url, ...post })
      await waitForRuns(Number((await db.query("SELECT count(*) AS n FROM executions")).rows[0].n), 600)
      const elapsed = (performance.now() - startedAt) / 1000
      return { result, accepted: result["2xx"], completed: (await countDone()) - doneBefore, seconds: elapsed }
    }
    // The first burst after 2 s of warm-up, then the same burst again: the
    // first costs the node more CPU per execution (10 to 16% more on this
    // machine) while the hot paths of a run are still being optimised.
    const firstBurst = await executeBurst()
    const warmBurst = await executeBurst()
    const execute = firstBurst.result
    clearInterval(sampleRss)
    const afterBurstRss = await rssMb(pid)
    await new Promise((resolve) => setTimeout(resolve, quietSeconds * 1000))
    const quietRss = await rssMb(pid)
    const failed = Number((await db.query("SELECT count(*) AS n FROM executions WHERE status = 'failed'")).rows[0].n)

    // The same bursts, each run making one tool call (two model calls, the
    // call and its records): after the RSS above is read, and followed by as
    // long a quiet time, so the figures after them are not theirs.
    const toolExecuteUrl = `${service.url}/api/v1/orchestrations/${toolOrchestration.id}/execute`
    await warm(toolExecuteUrl, post)
    await waitForRuns(Number((await db.query("SELECT count(*) AS n FROM executions")).rows[0].n), 600)
    const firstToolBurst = await executeBurst(toolExecuteUrl)
    const warmToolBurst = await executeBurst(toolExecuteUrl)
    // Requests still in flight when a load stops may store runs after the counts above were read.
    for (let i = 0; i < 600; i++) {
      const open = await db.query("SELECT count(*) AS n FROM executions WHERE status IN ('pending', 'running')")
      if (Number(open.rows[0].n) === 0) break
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
    const toolRuns = (
      await db.query(
        `SELECT count(*) AS runs, count(*) FILTER (WHERE status = 'failed') AS failed,
                count(*) FILTER (WHERE status = 'completed' AND output LIKE '%lookup answered:%') AS answered
           FROM executions WHERE orchestration_id = $1`,
        [toolOrchestration.id]
      )
    ).rows[0]
    const toolCallsOf = async (runKind: string) =>
      (
        await db.query(
          "SELECT status, count(*) AS n FROM tool_calls WHERE run_kind = $1 GROUP BY status ORDER BY status",
          [runKind]
        )
      ).rows
        .map((row) => `${row.status} ${row.n}`)
        .join(", ")
    const executionToolCalls = await toolCallsOf("execution")
    await new Promise((resolve) => setTimeout(resolve, quietSeconds * 1000))

    // Chat on the instant local model: all overhead. Closed loop (50 clients
    // as fast as answered), then an open loop at a fixed rate that the
    // service keeps up with, which shows latency without queueing.
    let n = 0
    const chatOptions = {
      url: `${service.url}/api/v1/agents/${agents[0].id}/chat`,
      method: "POST" as const,
      headers: { ...keyHeader, "content-type": "application/json" },
      // 50 conversations, one per connection's worth of traffic.
      requests: [
        {
          setupRequest: (request: autocannon.Request) => ({
            ...request,
            body: JSON.stringify({ message: "Hello, how are you?", conversationId: `bench-${n++ % connections}` })
          })
        }
      ]
    }
    await warm(chatOptions.url, chatOptions)
    let closedChatRss = 0
    const sampleChatRss = setInterval(
      () => void rssMb(pid).then((mb) => (closedChatRss = Math.max(closedChatRss, mb))),
      200
    )
    const chat = await load(pid, chatOptions)
    clearInterval(sampleChatRss)
    // What the closed loop left is given back before the fixed-rate load, as
    // after the executions: the figure under load is the fixed-rate load's.
    await new Promise((resolve) => setTimeout(resolve, quietSeconds * 1000))
    // The overhead: the same open loop at a fixed rate, on the instant
    // provider directly and then through the service (an agent on it).
    const paced = (url: string, headers: Record<string, string>, body: () => string) =>
      openLoop({ url, headers, body, rate: chatRate, seconds })
    const directBody = () =>
      JSON.stringify({
        model: providerModel,
        messages: [
          { role: "system", content: "You are a helpful assistant." },
          { role: "user", content: "Hello, how are you?" }
        ]
      })
    const directUrl = `${provider.url}/v1/chat/completions`
    const directHeaders = { authorization: "Bearer bench-provider-key" }
    const viaUrl = `${service.url}/api/v1/agents/${providerAgent.id}/chat`
    const viaBody = () => JSON.stringify({ message: "Hello, how are you?" })
    await openLoop({ url: directUrl, headers: directHeaders, body: directBody, rate: chatRate, seconds: 2 })
    const direct = await paced(directUrl, directHeaders, directBody)
    await openLoop({ url: viaUrl, headers: keyHeader, body: viaBody, rate: chatRate, seconds: 2 })
    // The first seconds of this load, then the same load once it has run for
    // a while: in between, the heap grows to its working size (its first
    // major collections fall there) and the hot paths are optimised.
    const viaFirst = await paced(viaUrl, keyHeader, viaBody)
    await openLoop({ url: viaUrl, headers: keyHeader, body: viaBody, rate: chatRate, seconds: chatSettleSeconds })
    const viaCpuBefore = await cpuMicros(pid)
    const via = await paced(viaUrl, keyHeader, viaBody)
    const viaCpu = ((await cpuMicros(pid)) - viaCpuBefore) / Math.max(1, via.ok)
    const loadedRss = await rssMb(pid)
    // Memory a minute after the load: what the service gives back.
    await new Promise((resolve) => setTimeout(resolve, 60_000))
    const settledRss = await rssMb(pid)

    // Chat with one tool call, at the same rate: an agent on the instant
    // provider with the http tool, against a client making the same turns
    // itself: the provider asked (it calls the tool), the receiver called, the
    // provider asked again with the result, one after the other.
    const viaToolUrl = `${service.url}/api/v1/agents/${providerToolAgent.id}/chat`
    const viaToolBody = () => JSON.stringify({ message: "Where is A-1?" })
    const checked = await json(viaToolUrl, { method: "POST", headers: keyHeader, body: viaToolBody() })
    if (
      checked.toolCalls?.length !== 1 ||
      checked.toolCalls[0].status !== "succeeded" ||
      checked.reply !== "A-1 is ready."
    )
      throw new Error(`chat with a tool did not make its one call: ${JSON.stringify(checked)}`)
    const providerUrl = new URL(directUrl)
    const toolSpec = {
      type: "function",
      function: { name: "lookup", description: lookupDescription, parameters: lookupParameters }
    }
    const directTool = async (agent: Http.Agent) => {
      const messages: Array<unknown> = [
        { role: "system", content: "You are a helpful assistant." },
        { role: "user", content: "Where is A-1?" }
      ]
      const ask = () =>
        send(agent, providerUrl, {
          method: "POST",
          headers: directHeaders,
          body: JSON.stringify({ model: providerModel, messages, tools: [toolSpec], tool_choice: "auto" })
        })
      const first = await ask()
      if (first === undefined || first.status >= 300) return false
      const call = JSON.parse(first.body).choices[0].message.tool_calls[0]
      const { id } = JSON.parse(call.function.arguments)
      const result = await send(agent, new URL(`${receiver.url}/items/${encodeURIComponent(id)}`), {
        method: "GET",
        headers: {}
      })
      if (result === undefined || result.status >= 300) return false
      messages.push(
        { role: "assistant", content: null, tool_calls: [call] },
        {
          role: "tool",
          tool_call_id: call.id,
          content: JSON.stringify({ status: result.status, contentType: "application/json", body: result.body })
        }
      )
      const second = await ask()
      return second !== undefined && second.status < 300 && JSON.parse(second.body).choices[0].message.content !== null
    }
    await pacedLoop({ rate: chatRate, seconds: 2, one: directTool })
    const directWithTool = await pacedLoop({ rate: chatRate, seconds, one: directTool })
    await openLoop({ url: viaToolUrl, headers: keyHeader, body: viaToolBody, rate: chatRate, seconds: 2 })
    const viaToolFirst = await paced(viaToolUrl, keyHeader, viaToolBody)
    await openLoop({
      url: viaToolUrl,
      headers: keyHeader,
      body: viaToolBody,
      rate: chatRate,
      seconds: chatSettleSeconds
    })
    const viaToolCpuBefore = await cpuMicros(pid)
    const viaTool = await paced(viaToolUrl, keyHeader, viaToolBody)
    const viaToolCpu = ((await cpuMicros(pid)) - viaToolCpuBefore) / Math.max(1, viaTool.ok)
    const chatToolCalls = await toolCallsOf("chat")
    // The same with the tool an MCP server's, after the http tool's calls are
    // counted and what their load left is given back.
    await new Promise((resolve) => setTimeout(resolve, quietSeconds * 1000))
    const mcp = mcpLines(await measureMcp(auth, keyHeader, db))
    await db.end()

    console.log(`\n${seconds}s per measurement, ${connections} connections, ${Os.cpus().length} cores\n`)
    console.log(row("baseline: fastify + pg, SELECT by id", select))
    console.log(row("GET /api/v1/agents (key auth + quota + list)", list))
    console.log(row("GET /api/v1/agents without daily limits", listUncounted))
    console.log(row("baseline: fastify + pg, INSERT", insert))
    console.log(row("POST /api/v1/orchestrations/{id}/execute", execute))
    console.log(row("the same, a second burst right after", warmBurst.result))
    console.log(row("POST /api/v1/agents/{id}/chat (local model)", chat))
    console.log(pacedRow(`instant provider directly, ${chatRate} req/s open loop`, direct))
    console.log(pacedRow(`chat through the service on it, first ${seconds} s`, viaFirst))
    console.log(pacedRow(`the same after ${chatSettleSeconds} s more of it`, via, viaCpu))
    console.log(pacedRow("with one tool call: provider, receiver, provider", directWithTool))
    console.log(pacedRow(`chat with one tool call through the service, first ${seconds} s`, viaToolFirst))
    console.log(pacedRow(`the same after ${chatSettleSeconds} s more of it`, viaTool, viaToolCpu))
    for (const line of mcp.rows) console.log(line)
    console.log(`\nGET /api/v1/agents / SELECT baseline: ${ratio(list, select)}x (target 0.8x)`)
    console.log(
      `counting costs: ${(100 * (1 - list.requests.average / listUncounted.requests.average)).toFixed(1)}% of throughput`
    )
    console.log(
      `execute / INSERT baseline: ${ratio(execute, insert)}x, second burst ${ratio(warmBurst.result, insert)}x (target 0.6x)`
    )
    for (const [name, burst] of [
      ["first burst", firstBurst],
      ["second burst", warmBurst]
    ] as const) {
      console.log(
        `one-step executions, ${name}: ${burst.accepted} accepted, ${burst.completed} finished in ${burst.seconds.toFixed(
          1
        )} s from the first request: ${Math.round(burst.completed / burst.seconds)} per second (target 1,000)`
      )
    }
    console.log(`executions failed: ${failed}`)
    for (const [name, burst] of [
      ["first burst", firstToolBurst],
      ["second burst", warmToolBurst]
    ] as const) {
      console.log(
        `one-step executions with one tool call, ${name}: ${burst.accepted} accepted, ${burst.completed} finished in ${burst.seconds.toFixed(
          1
        )} s from the first request: ${Math.round(burst.completed / burst.seconds)} per second`
      )
    }
    console.log(
      `executions with one tool call: ${toolRuns.runs} in all, ${toolRuns.answered} answered from the tool's result, ${toolRuns.failed} failed; their tool calls: ${executionToolCalls}`
    )
    console.log(`chat latency, local model, closed loop: p50 ${chat.latency.p50} ms, p99 ${chat.latency.p99} ms`)
    console.log(
      `chat overhead at ${chatRate} req/s over the provider directly: p50 +${(via.p50 - direct.p50).toFixed(2)} ms, p99 +${(
        via.p99 - direct.p99
      ).toFixed(
        2
      )} ms (targets 2 / 10 ms); in its first ${seconds} s: p50 +${(viaFirst.p50 - direct.p50).toFixed(2)} ms, p99 +${(
        viaFirst.p99 - direct.p99
      ).toFixed(2)} ms`
    )
    console.log(
      `chat with one tool call at ${chatRate} req/s over the provider twice and the receiver directly: p50 +${(
        viaTool.p50 - directWithTool.p50
      ).toFixed(
        2
      )} ms, p99 +${(viaTool.p99 - directWithTool.p99).toFixed(2)} ms (targets 2 / 10 ms); in its first ${seconds} s: p50 +${(
        viaToolFirst.p50 - directWithTool.p50
      ).toFixed(
        2
      )} ms, p99 +${(viaToolFirst.p99 - directWithTool.p99).toFixed(2)} ms; chat tool calls: ${chatToolCalls}`
    )
    console.log(mcp.summary)
    console.log(
      `service RSS: idle ${idleRss} MB when ready, ${settledIdleRss} MB ${quietSeconds} s later; executions bursts: peak ${burstRss} MB, ${afterBurstRss} MB when their runs had finished, ${quietRss} MB after ${quietSeconds} s quiet; closed-loop chat peak ${closedChatRss} MB; under chat load at ${chatRate} req/s ${loadedRss} MB, 60 s later ${settledRss} MB (targets 150 / 400 / 250 MB)`
    )
    console.log(`warm start until /health/ready: ${warmStartMs} ms (target 3,000 ms)`)

    const figures: Array<[string, string, string]> = [
      ["GET /api/v1/agents / SELECT by id", `${ratio(list, select)}x`, ">= 0.8x"],
      [
        "POST .../execute / INSERT (second burst)",
        `${ratio(execute, insert)}x (${ratio(warmBurst.result, insert)}x)`,
        ">= 0.6x"
      ],
      [
        "one-step executions per second (second burst)",
        `${Math.round(firstBurst.completed / firstBurst.seconds)} (${Math.round(warmBurst.completed / warmBurst.seconds)})`,
        ">= 1,000"
      ],
      [
        "the same with one tool call each (second burst)",
        `${Math.round(firstToolBurst.completed / firstToolBurst.seconds)} (${Math.round(
          warmToolBurst.completed / warmToolBurst.seconds
        )})`,
        "(beside the row above)"
      ],
      [
        "chat added p50 / p99 at 200 req/s (after warm-up)",
        `${(via.p50 - direct.p50).toFixed(1)} / ${(via.p99 - direct.p99).toFixed(1)} ms`,
        "<= 2 / 10 ms"
      ],
      [
        "chat with one tool call, added p50 / p99 at 200 req/s (after warm-up)",
        `${(viaTool.p50 - directWithTool.p50).toFixed(1)} / ${(viaTool.p99 - directWithTool.p99).toFixed(1)} ms`,
        "<= 2 / 10 ms"
      ],
      mcp.figure,
      [
        `RSS idle (ready / ${quietSeconds} s later) / under chat load / 60 s later`,
        `${idleRss} / ${settledIdleRss} / ${loadedRss} / ${settledRss} MB`,
        "<= 150 / 400 / 250 MB"
      ],
      [
        `RSS peak of the two executions bursts / after them and ${quietSeconds} s quiet`,
        `${burstRss} / ${quietRss} MB`,
        "(not a target)"
      ],
      ["RSS peak of the closed-loop chat (50 connections)", `${closedChatRss} MB`, "(not a target)"],
      ["warm start", `${warmStartMs} ms`, "<= 3,000 ms"]
    ]
    console.log(`\n| figure | measured | target |\n|---|---|---|`)
    for (const [name, value, target] of figures) console.log(`| ${name} | ${value} | ${target} |`)
    baseline.child.kill("SIGTERM")
  } finally {
    provider.child.kill("SIGTERM")
    receiver.child.kill("SIGTERM")
    mcpServer.child.kill("SIGTERM")
    service.child.kill("SIGTERM")
    await new Promise((resolve) => service.child.once("exit", resolve))
    await close()
  }
}

await main()

// Chunking throughput and knowledge search latency, each its own script
// (also `npm run bench:chunking` and `npm run bench:search`).
for (const script of process.env.BENCH_ONLY === "mcp" ? [] : ["bench/chunking.ts", "bench/search.ts"]) {
  console.log(`\n${script}:`)
  ChildProcess.execFileSync(process.execPath, [script], { cwd: root, stdio: "inherit" })
}
