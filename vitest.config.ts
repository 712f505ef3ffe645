import { configDefaults, defineConfig } from "vitest/config"

// Tests that assert the service stays responsive (latency bounds) while it
// works hard run after every other file, alone, so that the other files' load
// on the machine is not what they measure. (Group orders start at 1: with 0,
// vitest ran the later group first.)
const alone = ["test/Knowledge/Poison.test.ts"]

export default defineConfig({
  test: {
    globalSetup: ["test/support/globalSetup.ts"],
    testTimeout: 30_000,
    hookTimeout: 60_000,
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
        test: { name: "alone", include: alone, sequence: { groupOrder: 2 } }
      }
    ]
  }
})
