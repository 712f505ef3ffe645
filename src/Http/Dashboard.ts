import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as HttpRouter from "effect/http/HttpRouter"
import * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as HttpServerRespondable from "effect/http/HttpServerRespondable"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as ChildProcess from "node:child_process"
import * as Crypto from "node:crypto"
import * as Fs from "node:fs/promises"
import * as Path from "node:path"
import * as Zlib from "node:zlib"
import { NotFound, ServiceUnavailable } from "../Domain/Problems.ts"

// The dashboard (web/) is built by Vite into dist/web when its sources changed
// since the last build, and served from memory at /app. A build runs in a
// child process, so the service never loads Vite; the API is ready before it
// ends, and /app waits for it. Processes sharing the checkout (several
// services, parallel tests) build once: a lock file names the builder, and the
// others wait for the stamp of the sources they have.

const root = Path.resolve(import.meta.dirname, "..", "..")
const webDir = Path.join(root, "web")
const outDir = Path.join(root, "dist", "web")
const stampFile = ".source-hash"
const lockFile = Path.join(root, "dist", ".web-build.lock")
// A lock older than this is from a builder that died: taken over.
const staleLockMs = 120_000

/** Every file under `dir`, relative paths, sorted. */
const filesUnder = async (dir: string): Promise<Array<string>> => {
  const entries = await Fs.readdir(dir, { recursive: true, withFileTypes: true })
  return entries
    .filter((entry) => entry.isFile())
    .map((entry) => Path.relative(dir, Path.join(entry.parentPath, entry.name)))
    .sort()
}

/**
 * A hash of what the build reads: web/, the API declaration under src/ (the
 * typed client imports it, so any of src/ may matter), and the lockfile.
 */
const sourceHash = async () => {
  const hash = Crypto.createHash("sha256")
  for (const dir of [webDir, Path.join(root, "src")]) {
    for (const file of await filesUnder(dir)) {
      hash.update(`${Path.relative(root, Path.join(dir, file))}\0`)
      hash.update(await Fs.readFile(Path.join(dir, file)))
    }
  }
  hash.update(await Fs.readFile(Path.join(root, "package-lock.json")).catch(() => Buffer.alloc(0)))
  return hash.digest("hex")
}

const stampOf = (dir: string) => Fs.readFile(Path.join(dir, stampFile), "utf8").catch(() => undefined)

const runBuild = (into: string) =>
  new Promise<void>((resolve, reject) => {
    const child = ChildProcess.spawn(process.execPath, [Path.join(webDir, "build.ts"), into], {
      cwd: root,
      // Always React's production build: Vite takes the mode from NODE_ENV
      // when it is set, and a test runner sets it to "test".
      env: { ...process.env, NODE_ENV: "production" },
      stdio: ["ignore", "inherit", "pipe"]
    })
    let stderr = ""
    child.stderr.on("data", (data: Buffer) => {
      stderr = (stderr + data.toString()).slice(-4000)
    })
    child.once("error", reject)
    child.once("exit", (code) =>
      code === 0 ? resolve() : reject(new Error(`the dashboard build exited with ${code}: ${stderr}`))
    )
  })

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** dist/web built from the current sources: reused when its stamp matches, built otherwise. */
const ensureBuilt = async (): Promise<"cached" | "built" | "prebuilt"> => {
  const hasSources = await Fs.stat(Path.join(webDir, "build.ts")).then(
    () => true,
    () => false
  )
  // An image holding only the built output serves it as it is.
  if (!hasSources) return "prebuilt"
  const hash = await sourceHash()
  await Fs.mkdir(Path.dirname(lockFile), { recursive: true })
  while (true) {
    if ((await stampOf(outDir)) === hash) return "cached"
    const lock = await Fs.open(lockFile, "wx").catch((error: NodeJS.ErrnoException) => {
      if (error.code === "EEXIST") return undefined
      throw error
    })
    if (lock === undefined) {
      const age = await Fs.stat(lockFile).then(
        (stat) => Date.now() - stat.mtimeMs,
        () => 0
      )
      if (age > staleLockMs) await Fs.rm(lockFile, { force: true })
      else await sleep(250)
      continue
    }
    try {
      await lock.write(String(process.pid))
      await lock.close()
      // Built beside the output, then swapped in, so no reader sees half a build;
      // what a builder killed midway left there goes first.
      for (const entry of await Fs.readdir(Path.dirname(outDir))) {
        if (/^web\.(building|previous)-\d+$/.test(entry))
          await Fs.rm(Path.join(Path.dirname(outDir), entry), { recursive: true, force: true })
      }
      const building = `${outDir}.building-${process.pid}`
      await runBuild(building)
      await Fs.writeFile(Path.join(building, stampFile), hash)
      const previous = `${outDir}.previous-${process.pid}`
      await Fs.rename(outDir, previous).catch(() => undefined)
      await Fs.rename(building, outDir)
      await Fs.rm(previous, { recursive: true, force: true })
      return "built"
    } finally {
      await Fs.rm(lockFile, { force: true })
    }
  }
}

const contentTypes: Record<string, string> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".svg": "image/svg+xml",
  ".png": "image/png",
  ".woff2": "font/woff2",
  ".json": "application/json",
  ".txt": "text/plain; charset=utf-8"
}

interface Asset {
  readonly body: Uint8Array
  readonly gzip: Uint8Array | undefined
  readonly contentType: string
}

/** The built files, by URL path under /app, with a gzip copy of the compressible ones. */
const loadAssets = async (): Promise<Map<string, Asset>> => {
  const assets = new Map<string, Asset>()
  for (const file of await filesUnder(outDir)) {
    if (file === stampFile) continue
    const body = await Fs.readFile(Path.join(outDir, file))
    const contentType = contentTypes[Path.extname(file)] ?? "application/octet-stream"
    const compressible = /^text\/|svg|json/.test(contentType) && body.length > 1024
    assets.set(`/${file.split(Path.sep).join("/")}`, {
      body,
      gzip: compressible ? Zlib.gzipSync(body, { level: 9 }) : undefined,
      contentType
    })
  }
  return assets
}

// Scripts, styles and requests stay on this origin: the page works offline and loads nothing from elsewhere.
const contentSecurityPolicy =
  "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
  "connect-src 'self'; font-src 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'; form-action 'self'"

const hashedAsset = /^\/assets\//

/** GET /, /app and /app/*: the dashboard, its single page for any path that is not a file. */
export const layer = Layer.effectDiscard(
  Effect.gen(function* () {
    const router = yield* HttpRouter.HttpRouter
    const ready = yield* Deferred.make<Map<string, Asset>, Error>()

    yield* Effect.tryPromise({
      try: async () => {
        const startedAt = Date.now()
        const how = await ensureBuilt()
        return { how, assets: await loadAssets(), ms: Date.now() - startedAt }
      },
      catch: (cause) => (cause instanceof Error ? cause : new Error(String(cause)))
    }).pipe(
      Effect.tap(({ how, ms }) =>
        how === "built" ? Effect.logInfo("Built the dashboard").pipe(Effect.annotateLogs({ ms })) : Effect.void
      ),
      Effect.tapError((error) => Effect.logError("The dashboard could not be built", error.message)),
      Effect.map(({ assets }) => assets),
      Effect.exit,
      Effect.flatMap((exit) => Deferred.done(ready, exit)),
      Effect.forkScoped
    )

    const send = (asset: Asset, cacheControl: string, acceptsGzip: boolean) => {
      const gzip = acceptsGzip && asset.gzip !== undefined
      return HttpServerResponse.uint8Array(gzip ? asset.gzip! : asset.body, {
        contentType: asset.contentType,
        headers: {
          "cache-control": cacheControl,
          "content-security-policy": contentSecurityPolicy,
          vary: "accept-encoding",
          ...(gzip ? { "content-encoding": "gzip" } : {})
        }
      })
    }

    const serve = Effect.gen(function* () {
      const request = yield* HttpServerRequest.HttpServerRequest
      const assets = yield* Deferred.await(ready).pipe(
        Effect.catch(() =>
          Effect.fail(
            new ServiceUnavailable({ detail: "The dashboard could not be built; the service's log says why" })
          )
        )
      )
      const path = request.url.split("?")[0]!.replace(/^\/app/, "") || "/"
      const acceptsGzip = /\bgzip\b/.test(request.headers["accept-encoding"] ?? "")
      const file = assets.get(path)
      if (file !== undefined && path !== "/index.html") {
        return send(file, hashedAsset.test(path) ? "public, max-age=31536000, immutable" : "no-cache", acceptsGzip)
      }
      if (hashedAsset.test(path)) return yield* new NotFound({ detail: `No file ${request.url.split("?")[0]}` })
      // Any other path is a view of the single page, which reads it from the URL.
      return send(assets.get("/index.html")!, "no-cache", acceptsGzip)
    }).pipe(Effect.catch((problem) => HttpServerRespondable.toResponse(problem)))

    yield* router.add("GET", "/", Effect.succeed(HttpServerResponse.redirect("/app/", { status: 302 })))
    yield* router.add("GET", "/app/*", serve)
  })
)

/** The routes this layer adds, for the request pipeline's 404/405 answers. */
export const routes: ReadonlyArray<readonly [string, string]> = [
  ["GET", "/"],
  ["GET", "/app/*"]
]
