import { Effect, Exit, Redacted, Scope } from "effect"
import * as Fs from "node:fs/promises"
import * as Net from "node:net"
import * as Os from "node:os"
import * as Path from "node:path"
import type { TestProject } from "vitest/node"
import * as Embedded from "../../src/Database/Embedded.ts"

declare module "vitest" {
  export interface ProvidedContext {
    /** Admin URL of the test PostgreSQL; each test file creates its own database in it. */
    databaseUrl: string
  }
}

/** A port nobody listens on right now (the kernel picks it). */
const freePort = () =>
  new Promise<number>((resolve, reject) => {
    const server = Net.createServer()
    server.once("error", reject)
    server.listen({ host: "127.0.0.1", port: 0 }, () => {
      const address = server.address()
      const port = typeof address === "object" && address !== null ? address.port : 0
      server.close(() => resolve(port))
    })
  })

/**
 * One PostgreSQL for the whole run: TEST_DATABASE_URL when set, otherwise an
 * embedded server in a fresh temp directory, stopped and deleted on teardown.
 */
export default async function setup(project: TestProject) {
  const external = process.env.TEST_DATABASE_URL
  if (external) {
    project.provide("databaseUrl", external)
    return
  }

  const root = await Fs.mkdtemp(Path.join(Os.tmpdir(), "agent-host-test-"))
  // mkdtemp makes it 0700; as root the server runs as another OS user who must enter it.
  await Fs.chmod(root, 0o755)
  const scope = Effect.runSync(Scope.make())
  const teardown = async () => {
    await Effect.runPromise(Scope.close(scope, Exit.void))
    await Fs.rm(root, { recursive: true, force: true })
  }

  try {
    const server = await Effect.runPromise(
      Embedded.start({
        dataDir: Path.join(root, "postgres"),
        port: await freePort(),
        osUser: process.env.EMBEDDED_POSTGRES_USER ?? "postgres"
      }).pipe(Scope.provide(scope))
    )
    project.provide("databaseUrl", Redacted.value(server.url))
  } catch (error) {
    await teardown()
    throw error
  }

  return teardown
}
