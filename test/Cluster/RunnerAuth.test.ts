import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as ChildProcess from "node:child_process"
import * as Crypto from "node:crypto"
import * as Fs from "node:fs/promises"
import * as Os from "node:os"
import * as NodePath from "node:path"
import { awaitFinal, type ClusterNode, executeMany, linesWith, orchestrationSetup } from "../support/Cluster.ts"
import { defined, eventually } from "../support/Eventually.ts"
import { freePort, projectRoot, spawnService, waitReady } from "../support/Process.ts"
import { TestDatabaseUrl } from "../support/TestServer.ts"

interface ProbeResult {
  readonly answered: boolean
  readonly error?: string
}

/** A fourth process speaking effect's runner protocol to a node's runner port (test/support/RunnerProbe.ts). */
const probe = (runnerAddress: string, env: Record<string, string>) =>
  Effect.promise(
    () =>
      new Promise<ProbeResult>((resolve, reject) => {
        const cut = runnerAddress.lastIndexOf(":")
        ChildProcess.execFile(
          process.execPath,
          ["test/support/RunnerProbe.ts", runnerAddress.slice(0, cut), runnerAddress.slice(cut + 1)],
          { cwd: projectRoot, env: { ...process.env, ...env }, timeout: 20_000 },
          (error, stdout) => (error ? reject(error) : resolve(JSON.parse(stdout.trim().split("\n").at(-1)!)))
        )
      })
  )

const refusals = (node: ClusterNode) => linesWith([node], "Runner connection refused").map(({ line }) => line)

/** Waits for the `count`th refusal in the node's log. */
const refused = (node: ClusterNode, count: number, what: string) =>
  Effect.promise(() => eventually(() => defined(what, refusals(node)[count - 1])))

const tempDir = Effect.acquireRelease(
  Effect.promise(() => Fs.mkdtemp(NodePath.join(Os.tmpdir(), "runner-certs-"))),
  (dir) => Effect.promise(() => Fs.rm(dir, { recursive: true, force: true }))
)

const makeCertificates = (dir: string, ...nodes: Array<string>) =>
  Effect.promise(
    () =>
      new Promise<void>((resolve, reject) =>
        ChildProcess.execFile("bash", [NodePath.join(projectRoot, "infra/runner-certs.sh"), dir, ...nodes], (error) =>
          error ? reject(error) : resolve()
        )
      )
  )

/** Nodes of one cluster with the given runner credential settings per node. */
const startWith = (databaseUrl: string, perNode: ReadonlyArray<Record<string, string>>) =>
  Effect.gen(function* () {
    const webhookSecretKey = Crypto.randomBytes(32).toString("base64")
    const nodes: Array<ClusterNode> = []
    for (const credential of perNode) {
      const runnerAddress = `127.0.0.1:${yield* freePort}`
      const service = yield* spawnService({
        DATABASE_URL: databaseUrl,
        WEBHOOK_SECRET_KEY: webhookSecretKey,
        ENFORCE_DAILY_LIMITS: "false",
        ...credential,
        RUNNER_ADDRESS: runnerAddress
      })
      nodes.push({ ...service, runnerAddress })
    }
    yield* Effect.forEach(nodes, (node) => waitReady(node), { concurrency: "unbounded" })
    return nodes
  })

/** Executions spread over the nodes all finish, and steps ran on more than one node. */
const workCrossesNodes = (nodes: ReadonlyArray<ClusterNode>, email: string) =>
  Effect.gen(function* () {
    const urls = nodes.map((node) => node.baseUrl)
    const tenant = yield* Effect.promise(() =>
      orchestrationSetup(urls[0]!, email, "local", [
        { id: "a", prompt: "A {{input}}" },
        { id: "b", prompt: "B {{input}} after {{steps.a.output}}", dependsOn: ["a"] }
      ])
    )
    const ids = yield* Effect.promise(() => executeMany(urls, tenant, 20))
    const finals = yield* Effect.promise(() => awaitFinal(urls, tenant.bearer, ids, 60_000))
    for (const final of finals) assert.strictEqual(final.status, "completed")
    const ranOn = new Set(linesWith(nodes, "Step completed").map(({ node }) => node))
    assert.strictEqual(ranOn.size, nodes.length, `steps ran on ${[...ranOn].join(", ")}`)
  })

describe("the runner port admits only the cluster's nodes", () => {
  it.live(
    "shared secret: a process without it cannot deliver a message; the nodes still work together",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          const databaseUrl = yield* TestDatabaseUrl
          const secret = Crypto.randomBytes(32).toString("base64")
          const nodes = yield* startWith(databaseUrl, [{ RUNNER_SECRET: secret }, { RUNNER_SECRET: secret }])
          const [a] = nodes as [ClusterNode, ClusterNode]

          // The nodes, started, have refused nobody.
          assert.deepStrictEqual(refusals(a), [])
          // Effect's own socket client, as a node without the credential would speak.
          const plain = yield* probe(a.runnerAddress, { PROBE_MODE: "plain" })
          assert.isFalse(plain.answered)
          yield* refused(a, 1, "the refusal of the plaintext peer in the node's log")

          // TLS with the wrong secret.
          const wrong = yield* probe(a.runnerAddress, {
            PROBE_MODE: "secret",
            PROBE_SECRET: Crypto.randomBytes(32).toString("base64")
          })
          assert.isFalse(wrong.answered)
          yield* refused(a, 2, "the refusal of the peer with another secret in the node's log")
          for (const line of refusals(a)) assert.match(line.annotations.peer, /^127\.0\.0\.1:\d+$/)

          // The same probe with the cluster's secret is answered: the probe itself works.
          const right = yield* probe(a.runnerAddress, { PROBE_MODE: "secret", PROBE_SECRET: secret })
          assert.isTrue(right.answered, right.error)

          // A refused probe's client may connect again within its timeout, so each probe leaves one
          // refusal or more; all of them are logged by the time the probe's process has exited.
          const probesRefused = refusals(a).length
          yield* workCrossesNodes(nodes, "runner-secret@example.com")
          // The nodes never refused each other.
          assert.strictEqual(refusals(a).length, probesRefused)
          assert.deepStrictEqual(refusals(nodes[1]!), [])
        })
      ),
    { timeout: 120_000 }
  )

  it.live(
    "certificates of the cluster's CA: a certificate of another CA is refused; the nodes still work together",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          const databaseUrl = yield* TestDatabaseUrl
          const dir = yield* tempDir
          const other = yield* tempDir
          yield* makeCertificates(dir, "node1", "node2")
          yield* makeCertificates(other, "intruder")
          const files = (node: string) => ({
            RUNNER_TLS_CERT_FILE: NodePath.join(dir, `${node}.crt`),
            RUNNER_TLS_KEY_FILE: NodePath.join(dir, `${node}.key`),
            RUNNER_TLS_CA_FILE: NodePath.join(dir, "ca.crt")
          })
          const nodes = yield* startWith(databaseUrl, [files("node1"), files("node2")])
          const [a] = nodes as [ClusterNode, ClusterNode]

          // The nodes, started, have refused nobody.
          assert.deepStrictEqual(refusals(a), [])
          const plain = yield* probe(a.runnerAddress, { PROBE_MODE: "plain" })
          assert.isFalse(plain.answered)
          // Another CA's certificate, trusting the cluster's CA itself.
          const intruder = yield* probe(a.runnerAddress, {
            PROBE_MODE: "certificates",
            PROBE_CERT_FILE: NodePath.join(other, "intruder.crt"),
            PROBE_KEY_FILE: NodePath.join(other, "intruder.key"),
            PROBE_CA_FILE: NodePath.join(dir, "ca.crt")
          })
          assert.isFalse(intruder.answered)
          yield* refused(a, 2, "both refusals in the node's log")
          // The intruder's refusal names the certificate check that failed.
          assert.isTrue(
            refusals(a).some((line) => /VERIFY|CERT/.test(line.annotations.reason)),
            JSON.stringify(refusals(a).map((line) => line.annotations.reason))
          )

          const member = yield* probe(a.runnerAddress, {
            PROBE_MODE: "certificates",
            PROBE_CERT_FILE: NodePath.join(dir, "node2.crt"),
            PROBE_KEY_FILE: NodePath.join(dir, "node2.key"),
            PROBE_CA_FILE: NodePath.join(dir, "ca.crt")
          })
          assert.isTrue(member.answered, member.error)

          const probesRefused = refusals(a).length
          yield* workCrossesNodes(nodes, "runner-certificates@example.com")
          assert.strictEqual(refusals(a).length, probesRefused)
          assert.deepStrictEqual(refusals(nodes[1]!), [])
        })
      ),
    { timeout: 120_000 }
  )
})
