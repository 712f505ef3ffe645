// Builds the dashboard into the directory given as the first argument. Run by
// the service in a child process (src/Http/Dashboard.ts) when the sources
// changed, and by the Dockerfile's build stage.
import * as Path from "node:path"
import { build } from "vite"

const outDir = process.argv[2]
if (outDir === undefined) {
  console.error("usage: node web/build.ts <output directory>")
  process.exit(2)
}
await build({
  configFile: Path.join(import.meta.dirname, "vite.config.ts"),
  logLevel: "warn",
  build: { outDir: Path.resolve(outDir) }
})
