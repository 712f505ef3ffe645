import { PgClient } from "@effect/sql-pg"
import { Effect, HashRing, PrimaryKey, Redacted } from "effect"
import * as RunnerAddress from "effect/cluster/RunnerAddress"
import * as ShardingConfig from "effect/cluster/ShardingConfig"
import * as Crypto from "node:crypto"
import { eventually } from "./Eventually.ts"
import { freePort, type ServiceProcess, spawnService, waitReady } from "./Process.ts"
import { sample } from "./Prometheus.ts"

export interface ClusterNode extends ServiceProcess {
  /** The runner address the node advertises, which is also the `node` of its log lines. */
  readonly runnerAddress: string
}

/**
 * `count` nodes of the service as child processes on one database, each a
 * cluster runner on its own loopback port. They start together, so they also
 * race for the migrations.
 */
export const startNodes = (count: number, env: Record<string, string>) =>
  Effect.gen(function* () {
    const nodes: Array<ClusterNode> = []
    // Several nodes refuse to start without one shared key for webhook secrets
    // and one credential for the runner port.
    const webhookSecretKey = Crypto.randomBytes(32).toString("base64")
    const runnerSecret = Crypto.randomBytes(32).toString("base64")
    for (let i = 0; i < count; i++) {
      const runnerAddress = `127.0.0.1:${yield* freePort}`
      const service = yield* spawnService({
        WEBHOOK_SECRET_KEY: webhookSecretKey,
        RUNNER_SECRET: runnerSecret,
        ...env,
        RUNNER_ADDRESS: runnerAddress
      })
      nodes.push({ ...service, runnerAddress })
    }
    yield* Effect.forEach(nodes, (node) => waitReady(node), { concurrency: "unbounded" })
    return nodes
  })

/**
 * Waits (bounded) until the shards have settled over `nodes`: each node holds
 * exactly the shards that effect's hash ring of all of them gives it, and
 * releases none, as the cluster's gauges on its `/metrics` say. Until then a
 * runner that joined late may still take shards, and their runs, from another.
 */
export const shardsSettled = (nodes: ReadonlyArray<ClusterNode>, timeoutMs = 30_000) => {
  const ring = HashRing.make<RunnerAddress.RunnerAddress>()
  for (const node of nodes) {
    const [host, port] = node.runnerAddress.split(":")
    HashRing.add(ring, RunnerAddress.make(host!, Number(port)))
  }
  const assigned = (HashRing.getShards(ring, ShardingConfig.defaults.shardsPerGroup) ?? []).map(PrimaryKey.value)
  return Effect.promise(() =>
    eventually(
      async () => {
        for (const node of nodes) {
          const { text } = await request(`${node.baseUrl}/metrics`)
          const held = sample(text, "effect_cluster_shards", {})
          const releasing = sample(text, "effect_cluster_shards_releasing", {})
          const share = assigned.filter((address) => address === node.runnerAddress).length
          if (held !== share || (releasing ?? 0) !== 0)
            throw new Error(`${node.runnerAddress} holds ${held} shards of its ${share}, releasing ${releasing}`)
        }
      },
      { timeoutMs, intervalMs: 200 }
    )
  )
}

/**
 * Waits (bounded) until the database holds at least `count` webhook events and
 * none is still pending: every delivery has ended (delivered or failed), so no
 * attempt of them is still to come, not even one a lost node had begun.
 */
export const webhookEventsEnded = (databaseUrl: string, count: number, timeoutMs = 60_000) =>
  Effect.flatMap(PgClient.PgClient, (sql) =>
    eventually(
      Effect.flatMap(
        sql<{ total: number; pending: number }>`
          SELECT count(*)::int AS total, count(*) FILTER (WHERE status = 'pending')::int AS pending
          FROM webhook_events`,
        ([row]) =>
          row!.total >= count && row!.pending === 0
            ? Effect.void
            : Effect.die(new Error(`${row!.total} webhook events of ${count}, ${row!.pending} still pending`))
      ),
      { timeoutMs, intervalMs: 200 }
    )
  ).pipe(Effect.provide(PgClient.layer({ url: Redacted.make(databaseUrl) })), Effect.orDie)

/** The JSON log lines a node has written so far. */
export const logLines = (node: ServiceProcess): Array<Record<string, any>> =>
  node
    .stdout()
    .split("\n")
    .flatMap((line) => {
      if (!line.startsWith("{")) return []
      try {
        return [JSON.parse(line)]
      } catch {
        return []
      }
    })

/** Log lines with this message, from every node, with the node that wrote each. */
export const linesWith = (nodes: ReadonlyArray<ClusterNode>, message: string) =>
  nodes.flatMap((node) =>
    logLines(node)
      .filter((line) => line.message === message)
      .map((line) => ({ node: node.runnerAddress, line }))
  )

export interface JsonInit {
  readonly method?: string
  readonly headers?: Record<string, string>
  readonly body?: unknown
}

/** A JSON request that must succeed (2xx); its parsed body. */
export const requestJson = async (url: string, init: JsonInit = {}) => {
  const { status, body, text } = await request(url, init)
  if (status >= 300) throw new Error(`${init.method ?? "GET"} ${url}: ${status} ${text}`)
  return body
}

/** A JSON request, whatever its status. */
export const request = async (url: string, init: JsonInit = {}) => {
  const response = await fetch(url, {
    method: init.method ?? "GET",
    headers: { "content-type": "application/json", ...init.headers },
    body: init.body === undefined ? null : JSON.stringify(init.body)
  })
  const text = await response.text()
  let body: any
  try {
    body = text === "" ? undefined : JSON.parse(text)
  } catch {
    body = undefined
  }
  return { status: response.status, headers: response.headers, body, text }
}

/** A tenant with a session and an API key, signed up through `baseUrl`. */
export const signUpTenant = async (baseUrl: string, email: string) => {
  await requestJson(`${baseUrl}/api/auth/register`, { method: "POST", body: { email, password: "12345678" } })
  const { token } = await requestJson(`${baseUrl}/api/auth/login`, {
    method: "POST",
    body: { email, password: "12345678" }
  })
  const session = { authorization: `Bearer ${token}` }
  const created = await requestJson(`${baseUrl}/api/keys`, { method: "POST", headers: session, body: { name: "k" } })
  return {
    session,
    key: created.key as string,
    keyId: created.id as string,
    bearer: { authorization: `Bearer ${created.key}` }
  }
}

/** Polls (bounded) until every execution is final; their bodies, in order. */
export const awaitFinal = async (
  baseUrls: ReadonlyArray<string>,
  bearer: Record<string, string>,
  ids: ReadonlyArray<string>,
  timeoutMs: number
) => {
  const finals = new Map<string, any>()
  let turn = 0
  await eventually(
    async () => {
      for (const id of ids) {
        if (finals.has(id)) continue
        const base = baseUrls[turn++ % baseUrls.length]!
        const { status, body } = await request(`${base}/api/v1/executions/${id}`, { headers: bearer })
        if (status !== 200 && status !== 503) throw new Error(`GET execution ${id}: ${status}`)
        if (status === 200 && ["completed", "failed", "cancelled"].includes(body.status)) finals.set(id, body)
      }
      if (finals.size < ids.length)
        throw new Error(`${ids.length - finals.size} executions not final after ${timeoutMs} ms`)
    },
    // Every try reads each open execution: a slower pace spares the nodes under test.
    { timeoutMs, intervalMs: 200 }
  )
  return ids.map((id) => finals.get(id))
}

/**
 * A new tenant with an agent on `model` and an orchestration of `steps`
 * (each `{ id, prompt, dependsOn? }`, all run by that agent).
 */
export const orchestrationSetup = async (
  baseUrl: string,
  email: string,
  model: string,
  steps: ReadonlyArray<{ readonly id: string; readonly prompt: string; readonly dependsOn?: ReadonlyArray<string> }>
) => {
  const tenant = await signUpTenant(baseUrl, email)
  const agent = await requestJson(`${baseUrl}/api/agents`, {
    method: "POST",
    headers: tenant.session,
    body: { name: "Worker", model }
  })
  const orchestration = await requestJson(`${baseUrl}/api/orchestrations`, {
    method: "POST",
    headers: tenant.session,
    body: { name: `${steps.length} steps`, steps: steps.map((step) => ({ ...step, agentId: agent.id })) }
  })
  return { ...tenant, agentId: agent.id as string, orchestrationId: orchestration.id as string }
}

/** A tenant with an agent on the fake model and a two-step orchestration (b after a). */
export const twoStepSetup = (baseUrl: string, email: string) =>
  orchestrationSetup(baseUrl, email, "openai/gpt-4o-mini", [
    { id: "a", prompt: "A {{input}}" },
    { id: "b", prompt: "B {{input}} after {{steps.a.output}}", dependsOn: ["a"] }
  ])

/** Starts `count` executions, round-robin over the nodes; their ids, in input order `run-<i>`. */
export const executeMany = (
  urls: ReadonlyArray<string>,
  setup: { readonly orchestrationId: string; readonly bearer: Record<string, string> },
  count: number
) =>
  Promise.all(
    Array.from({ length: count }, async (_, i) => {
      const started = await requestJson(
        `${urls[i % urls.length]}/api/v1/orchestrations/${setup.orchestrationId}/execute`,
        {
          method: "POST",
          headers: setup.bearer,
          body: { input: `run-${i}` }
        }
      )
      return started.executionId as string
    })
  )
