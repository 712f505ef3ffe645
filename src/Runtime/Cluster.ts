import * as NodeCrypto from "@effect/platform-node/NodeCrypto"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as RunnerAddress from "effect/cluster/RunnerAddress"
import * as RunnerHealth from "effect/cluster/RunnerHealth"
import * as Runners from "effect/cluster/Runners"
import * as Sharding from "effect/cluster/Sharding"
import * as ShardingConfig from "effect/cluster/ShardingConfig"
import * as SocketRunner from "effect/cluster/SocketRunner"
import * as RpcSerialization from "effect/rpc/RpcSerialization"
import { AppConfig, type AppSettings, type RunnerCredential } from "../Config.ts"
import * as ClusterStorage from "./ClusterStorage.ts"
import * as RunnerTransport from "./RunnerTransport.ts"

/**
 * The sharding settings, always given explicitly: the cluster's own
 * environment reading would take our PORT and HOST (the HTTP server's) for its
 * runner address.
 *
 * A node that dies keeps its shard locks until `shardLockExpiration` passes
 * without a refresh (a node stopped with SIGTERM releases them at once); the
 * refresh and assignment intervals are tightened to match, so survivors notice
 * and take over well within that bound.
 */
export const shardingSettings = (config: AppSettings): Partial<ShardingConfig.ShardingConfig["Service"]> => {
  const expiration = Option.getOrElse(config.shardLockExpiration, () =>
    Option.isSome(config.runnerAddress) ? Duration.seconds(6) : Duration.seconds(30)
  )
  const refresh = Duration.max(Duration.seconds(1), Duration.divideUnsafe(expiration, 4))
  return {
    runnerAddress: Option.map(config.runnerAddress, (address) => RunnerAddress.make(address.host, address.port)),
    runnerListenAddress: Option.map(config.runnerListen, (address) => RunnerAddress.make(address.host, address.port)),
    shardLockExpiration: expiration,
    shardLockRefreshInterval: refresh,
    refreshAssignmentsInterval: Duration.seconds(1),
    runnerHealthCheckInterval: refresh,
    // Messages persisted for this node's shards by other nodes are also pushed
    // over the socket; the poll is the fallback that catches the rest.
    entityMessagePollInterval: Duration.seconds(1),
    // An execution's entity stays in memory this long after its last message
    // (`entityIdleTime` below: effect's workflow engine would give it 10 s),
    // until the entity reaper's next pass (every 5 s):
    // after a burst of executions, what they held is given back within
    // seconds rather than the default minute. A run that has ended is read
    // from the read model, never from its entity, and one that waits (a
    // durable sleep or deferred) is started again by its next message. Under
    // a burst the node holds fewer finished runs, for less CPU and memory
    // (docs/performance.md).
    entityMaxIdleTime: Duration.seconds(2),
    entityTerminationTimeout: Duration.min(config.shutdownGrace, Duration.seconds(15))
  }
}

/**
 * The cluster's message storage: effect's, with fewer statements per message
 * and indexes of ours, or effect's own unchanged when the installed effect is
 * not the one ours was verified with (ClusterStorage.ts).
 */
const messageStorage = (storage: ClusterStorage.StorageChoice) =>
  Layer.orDie(ClusterStorage.messageStorageLayer(storage))

/**
 * One node: entities run in this process, with message and runner storage in
 * our Postgres.
 */
const singleNode = (config: AppSettings, storage: ClusterStorage.StorageChoice) =>
  Sharding.layer.pipe(
    Layer.provideMerge(Runners.layerNoop),
    Layer.provideMerge(messageStorage(storage)),
    Layer.provide([Layer.orDie(ClusterStorage.runnerStorageLayer(storage)), RunnerHealth.layerNoop]),
    // The runner address only names this node in storage: nothing listens on it.
    Layer.provide(
      ShardingConfig.layer({
        ...shardingSettings(config),
        runnerAddress: ShardingConfig.defaults.runnerAddress,
        runnerListenAddress: Option.none()
      })
    ),
    Layer.provide(NodeCrypto.layerDigest)
  )

/**
 * Several nodes on one Postgres: each node is a runner that listens on its
 * socket (RUNNER_LISTEN, else RUNNER_ADDRESS) and is reached by the others at
 * RUNNER_ADDRESS. Shards are spread over the healthy runners; their locks,
 * the runner table and every persisted message live in the shared database.
 * Runners speak to each other only over TLS with the cluster's credential
 * (RunnerTransport.ts).
 */
const multiNode = (config: AppSettings, credential: RunnerCredential, storage: ClusterStorage.StorageChoice) => {
  const tls = RunnerTransport.tlsSettings(credential)
  const listen = Option.getOrElse(config.runnerListen, () => Option.getOrThrow(config.runnerAddress))
  const clientProtocol = RunnerTransport.layerClientProtocol(tls)
  return SocketRunner.layer.pipe(
    Layer.provide(RunnerHealth.layerPing.pipe(Layer.provide(Runners.layerRpc), Layer.provide(clientProtocol))),
    Layer.provide([RunnerTransport.layerServer(listen, tls), clientProtocol]),
    Layer.provideMerge(messageStorage(storage)),
    Layer.provide(Layer.orDie(ClusterStorage.runnerStorageLayer(storage))),
    Layer.provide(ShardingConfig.layer(shardingSettings(config))),
    Layer.provide(RpcSerialization.layerSchemaBinary()),
    Layer.provide(NodeCrypto.layerDigest)
  )
}

/**
 * effect's workflow engine registers each workflow's entity with an idle time
 * of its own, 10 s, over the sharding's `entityMaxIdleTime`: a finished
 * execution's entity (its RPC server, scopes, fibers and context) stayed in
 * memory 10 to 15 s, so under a burst every run of the last 15 s was
 * resident, and all of it outlived the young generation. Execution workflows
 * get the sharding's idle time instead (above); their state is durable, so an
 * entity released early is rebuilt from storage by its next message, as
 * effect's own comment on that constant says. The other workflows (team runs,
 * webhook deliveries, ingestion) are few at a time and keep effect's.
 */
const shortLived: ReadonlySet<string> = new Set(["Workflow/Execution"])

/** The sharding, with `maxIdleTime` for the entities of these types (`Workflow/<name>` for a workflow's). */
export const entityIdleTime = (types: ReadonlySet<string>, maxIdleTime: Duration.Duration) =>
  Layer.effect(
    Sharding.Sharding,
    Effect.map(Sharding.Sharding, (sharding) =>
      Sharding.Sharding.of({
        ...sharding,
        registerEntity: (entity, build, options) =>
          sharding.registerEntity(entity, build, types.has(entity.type) ? { ...options, maxIdleTime } : options)
      })
    )
  )

/**
 * The cluster this node takes part in: a single node unless RUNNER_ADDRESS is
 * set; on our storage of its tables, or effect's own (CLUSTER_STORAGE, and
 * the version check of ClusterStorage.choose); with what features do with
 * those tables (ClusterTables).
 */
export const layer = Layer.unwrap(
  Effect.gen(function* () {
    const config = yield* AppConfig
    const settings = shardingSettings(config)
    const storage = yield* ClusterStorage.choose(config.clusterStorage)
    const cluster =
      Option.isSome(config.runnerAddress) && Option.isSome(config.runnerCredential)
        ? multiNode(config, config.runnerCredential.value, storage)
        : singleNode(config, storage)
    return ClusterStorage.ClusterTables.layer(storage).pipe(
      Layer.provideMerge(entityIdleTime(shortLived, Duration.fromInputUnsafe(settings.entityMaxIdleTime!))),
      Layer.provideMerge(cluster)
    )
  })
)
