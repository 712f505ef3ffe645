import { NodeCrypto } from "@effect/platform-node"
import { Layer } from "effect"
import { RunnerHealth, Runners, Sharding, ShardingConfig, SqlMessageStorage, SqlRunnerStorage } from "effect/cluster"

/**
 * effect's cluster on one node: entities run in this process, with message
 * and runner storage in our Postgres. The sharding settings are given here
 * explicitly, because the cluster's own environment reading would take our
 * PORT and HOST for its runner address.
 */
export const layer = Sharding.layer.pipe(
  Layer.provideMerge(Runners.layerNoop),
  Layer.provideMerge(SqlMessageStorage.layer),
  Layer.provide([Layer.orDie(SqlRunnerStorage.layer), RunnerHealth.layerNoop]),
  Layer.provide(ShardingConfig.layer({})),
  Layer.provide(NodeCrypto.layerDigest)
)
