import { configDefaults, defineConfig } from "vitest/config"

// Files whose bounds are timings of several processes (a service's latency
// while it works hard, three nodes handing shards over after a kill -9) run
// after every other file, one at a time, so that the other files' load on the
// machine is not what they measure. (Group orders start at 1: with 0, vitest
// ran the later group first.)
const alone = [
  "test/Knowledge/Poison.test.ts",
  "test/Cluster/Failover.test.ts",
  "test/Cluster/MultiNode.test.ts",
  "test/Cluster/RunnerAuth.test.ts",
  "test/Tools/CrashRecovery.test.ts",
  "test/Tools/Failover.test.ts",
  "test/Tools/TeamCrashRecovery.test.ts",
  "test/Tools/McpCrashRecovery.test.ts",
  "test/Approvals/CrashRecovery.test.ts",
  "test/Approvals/ManyWaiting.test.ts",
  "test/Schedules/ScheduleCluster.test.ts"
]

export default defineConfig({
  test: {
    globalSetup: ["test/support/globalSetup.ts"],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // Three files at a time, chosen on the 2-core machine the suite is timed
    // on (vitest's default there is one: cores - 1). A file spends most of its
    // time waiting (on the model fakes' delays, child processes, Postgres,
    // bounded polls), so three overlap well; a fourth saves little and eats
    // into what the timing-sensitive tests (multi-node hand-overs, listener
    // latencies) have to spare, and into Postgres's connections (100 by
    // default), which every file's pools and the three-node tests share.
    maxWorkers: 3,
    projects: [
      {
        extends: true,
        test: {
          name: "service",
          include: ["test/**/*.test.ts"],
          exclude: [...configDefaults.exclude, ...alone],
          sequence: { groupOrder: 1 }
        }
      },
      {
        extends: true,
        test: { name: "alone", include: alone, maxWorkers: 1, sequence: { groupOrder: 2 } }
      }
    ]
  }
})
