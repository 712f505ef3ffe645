// The floor of a run: the service's own cluster (its storage, its settings,
// its digests, one node, DATABASE_URL) running a workflow that does nothing, started from
// this process by CONNECTIONS callers at a time for SECONDS, as an execute
// would start one (stored first, then run), with no HTTP, no execution row and
// no model. Prints one JSON line: runs started and completed, the seconds from
// the first start to the last completion, and this process's CPU per run.
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as ClusterWorkflowEngine from "effect/cluster/ClusterWorkflowEngine"
import * as Workflow from "effect/workflow/Workflow"
import * as Crypto from "node:crypto"
import { AppConfig } from "../src/Config.ts"
import * as Sql from "../src/Database/Sql.ts"
import * as Cluster from "../src/Runtime/Cluster.ts"
import * as SyncDigest from "../src/Runtime/SyncDigest.ts"

const seconds = Number(process.env.SECONDS ?? 8)
const connections = Number(process.env.CONNECTIONS ?? 50)

const Floor = Workflow.make("Floor", {
  payload: { id: Schema.String },
  idempotencyKey: ({ id }) => id
})

let completed = 0
let lastCompletedAt = 0
const FloorLive = Floor.toLayer(() =>
  Effect.sync(() => {
    completed++
    lastCompletedAt = performance.now()
  })
)

const burst = Effect.gen(function* () {
  // Warm: the first runs build the entity machinery and the statements.
  yield* Effect.forEach(
    Array.from({ length: 200 }, () => Crypto.randomUUID()),
    (id) => Floor.execute({ id }, { discard: true }),
    { concurrency: connections, discard: true }
  )
  while (completed < 200) yield* Effect.sleep("20 millis")
  const completedBefore = completed
  let started = 0
  const cpuBefore = process.cpuUsage()
  const startedAt = performance.now()
  const endAt = startedAt + seconds * 1000
  yield* Effect.forEach(
    Array.from({ length: connections }),
    () =>
      Effect.gen(function* () {
        while (performance.now() < endAt) {
          yield* Floor.execute({ id: Crypto.randomUUID() }, { discard: true })
          started++
        }
      }),
    { concurrency: "unbounded", discard: true }
  )
  const waitUntil = performance.now() + 120_000
  while (completed - completedBefore < started && performance.now() < waitUntil) yield* Effect.sleep("5 millis")
  const cpu = process.cpuUsage(cpuBefore)
  const runs = completed - completedBefore
  process.stdout.write(
    `${JSON.stringify({
      started,
      completed: runs,
      seconds: (lastCompletedAt - startedAt) / 1000,
      cpuMicrosPerRun: (cpu.user + cpu.system) / Math.max(1, runs)
    })}\n`
  )
})

// Its entities are let go as soon as the executions' are (Cluster.ts): at
// effect's 10 s, the cluster's cap on resident entities would pace the runs.
const IdleTime = Layer.unwrap(
  Effect.map(AppConfig, (config) =>
    Cluster.entityIdleTime(
      new Set([`Workflow/${Floor._tag}`]),
      Duration.fromInputUnsafe(Cluster.shardingSettings(config).entityMaxIdleTime!)
    )
  )
)

const Live = Layer.effectDiscard(burst).pipe(
  Layer.provide(FloorLive),
  Layer.provideMerge(ClusterWorkflowEngine.layer),
  Layer.provideMerge(IdleTime),
  Layer.provideMerge(Cluster.layer),
  Layer.provide(Sql.layer),
  // The service's digests (workflow and activity ids), as in Server.ts.
  Layer.provide(SyncDigest.layer),
  Layer.provide(AppConfig.layer)
)

NodeRuntime.runMain(Effect.asVoid(Layer.build(Live).pipe(Effect.scoped)))
