import { assert, describe, it } from "@effect/vitest"
import { Duration, Effect, Option } from "effect"
import { AppConfig, type AppSettings } from "../../src/Config.ts"
import { shardingSettings } from "../../src/Runtime/Cluster.ts"

const settings = (overrides: Partial<AppSettings>) =>
  Effect.provide(
    Effect.map(AppConfig, (config) => shardingSettings(config)),
    AppConfig.layerWith(overrides)
  )

describe("sharding settings", () => {
  it.effect("a single node holds its shards on a 30 s lease, refreshed every 7.5 s", () =>
    Effect.gen(function* () {
      const single = yield* settings({ runnerAddress: Option.none() })
      assert.isTrue(Duration.equals(Duration.fromInputUnsafe(single.shardLockExpiration!), Duration.seconds(30)))
      assert.isTrue(Duration.equals(Duration.fromInputUnsafe(single.shardLockRefreshInterval!), Duration.millis(7500)))
    })
  )

  it.effect(
    "several nodes use a 6 s lease, so survivors take a dead node's shards within 10 s; an explicit one wins",
    () =>
      Effect.gen(function* () {
        const multi = yield* settings({ runnerAddress: Option.some({ host: "10.0.0.1", port: 34431 }) })
        assert.isTrue(Duration.equals(Duration.fromInputUnsafe(multi.shardLockExpiration!), Duration.seconds(6)))
        assert.isTrue(Duration.equals(Duration.fromInputUnsafe(multi.shardLockRefreshInterval!), Duration.millis(1500)))
        const explicit = yield* settings({ shardLockExpiration: Option.some(Duration.seconds(12)) })
        assert.isTrue(Duration.equals(Duration.fromInputUnsafe(explicit.shardLockExpiration!), Duration.seconds(12)))
        assert.isTrue(
          Duration.equals(Duration.fromInputUnsafe(explicit.shardLockRefreshInterval!), Duration.seconds(3))
        )
      })
  )
})
