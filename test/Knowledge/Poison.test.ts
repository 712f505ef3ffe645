import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as ChildProcess from "node:child_process"
import * as Fs from "node:fs"
import * as Zlib from "node:zlib"
import pg from "pg"
import { request, requestJson, signUpTenant } from "../support/Cluster.ts"
import { defined, eventually } from "../support/Eventually.ts"
import { type ServiceProcess, spawnService, waitReady } from "../support/Process.ts"
import { TestDatabaseUrl } from "../support/TestServer.ts"

// Poison documents (finding N-C1 of the second security review): each is
// built here, small by construction, uploaded to the real service (`node
// src/main.ts` as a process of its own, as `npm start` runs it) and must end
// `failed` with its reason, while the service stays responsive and its memory
// bounded; and a document whose extraction was under way when its node died
// is not parsed again after the restart.

const megabyte = 1024 * 1024

/** `head`, `times` copies of `chunk`, then `tail`, deflated as they stream: the inflated form never exists in memory. */
const deflateRepeated = async (head: Buffer, chunk: Buffer, times: number, tail: Buffer, raw: boolean) => {
  const deflate = raw ? Zlib.createDeflateRaw({ level: 9 }) : Zlib.createDeflate({ level: 9 })
  const parts: Array<Buffer> = []
  deflate.on("data", (data: Buffer) => parts.push(data))
  const ended = new Promise((resolve) => deflate.once("end", resolve))
  const write = async (data: Buffer) => {
    if (!deflate.write(data)) await new Promise((resolve) => deflate.once("drain", resolve))
  }
  await write(head)
  for (let i = 0; i < times; i++) await write(chunk)
  await write(tail)
  deflate.end()
  await ended
  return { deflated: Buffer.concat(parts), size: head.length + chunk.length * times + tail.length }
}

interface ZipPart {
  readonly name: string
  readonly deflated: Buffer
  /** What the headers declare. */
  readonly size: number
}

/** A zip archive with deflated entries whose declared sizes are whatever the caller says. */
const zipOf = (parts: ReadonlyArray<ZipPart>) => {
  const locals: Array<Buffer> = []
  const centrals: Array<Buffer> = []
  let offset = 0
  for (const part of parts) {
    const name = Buffer.from(part.name)
    const local = Buffer.alloc(30)
    local.writeUInt32LE(0x04034b50, 0)
    local.writeUInt16LE(20, 4)
    local.writeUInt16LE(8, 8)
    local.writeUInt32LE(part.deflated.length, 18)
    local.writeUInt32LE(part.size, 22)
    local.writeUInt16LE(name.length, 26)
    const central = Buffer.alloc(46)
    central.writeUInt32LE(0x02014b50, 0)
    central.writeUInt16LE(20, 4)
    central.writeUInt16LE(20, 6)
    central.writeUInt16LE(8, 10)
    central.writeUInt32LE(part.deflated.length, 20)
    central.writeUInt32LE(part.size, 24)
    central.writeUInt16LE(name.length, 28)
    central.writeUInt32LE(offset, 42)
    locals.push(local, name, part.deflated)
    centrals.push(central, name)
    offset += 30 + name.length + part.deflated.length
  }
  const directory = Buffer.concat(centrals)
  const end = Buffer.alloc(22)
  end.writeUInt32LE(0x06054b50, 0)
  end.writeUInt16LE(parts.length, 8)
  end.writeUInt16LE(parts.length, 10)
  end.writeUInt32LE(directory.length, 12)
  end.writeUInt32LE(offset, 16)
  return Buffer.concat([...locals, directory, end])
}

const small = (name: string, text: string): ZipPart => ({
  name,
  deflated: Zlib.deflateRawSync(text),
  size: Buffer.byteLength(text)
})
const contentTypes = small(
  "[Content_Types].xml",
  `<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">` +
    `<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>` +
    `<Default Extension="xml" ContentType="application/xml"/>` +
    `<Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>`
)
const relationships = small(
  "_rels/.rels",
  `<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">` +
    `<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="word/document.xml"/></Relationships>`
)
const documentHead = Buffer.from(
  `<?xml version="1.0" encoding="UTF-8"?><w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>`
)
const documentTail = Buffer.from(`</w:body></w:document>`)

/**
 * A DOCX whose word/document.xml is `paragraphs` `times` over; its headers
 * declare `declared` bytes for it (its true size when absent).
 */
const docx = async (paragraphs: Buffer, times: number, declared?: number) => {
  const body = await deflateRepeated(documentHead, paragraphs, times, documentTail, true)
  return zipOf([
    contentTypes,
    relationships,
    { name: "word/document.xml", deflated: body.deflated, size: declared ?? body.size }
  ])
}

/** 2,000,000 tiny paragraphs: 106 MB of XML in a file of a few hundred kB (the review's 292 kB DOCX). */
const tinyParagraphs = () => docx(Buffer.from("<w:p><w:r><w:t>lorem ipsum dolor</w:t></w:r></w:p>".repeat(20_000)), 100)

/** An entry whose headers say 4,096 bytes but which inflates to 64 MB. */
const lyingZip = () => docx(Buffer.from("<w:p><w:r><w:t>lorem ipsum dolor</w:t></w:r></w:p>".repeat(20_000)), 60, 4_096)

/**
 * 20 MB of paragraphs of varied words: it compresses about ten times, well
 * within the ratio, and declares less than the entry bound, so it passes the
 * directory; parsing it takes far more memory than the sandbox allows.
 */
const manyWords = () => {
  const words = ["otter", "river", "harbour", "lantern", "stone", "willow", "copper", "meadow"]
  let seed = 7
  const next = () => (seed = (seed * 1103515245 + 12345) % 2147483648)
  const paragraphs: Array<string> = []
  let length = 0
  while (length < megabyte) {
    // The generator's high bits: its low ones repeat within a few steps, and would compress far.
    const sentence = Array.from(
      { length: 6 + ((next() >>> 16) % 6) },
      () => words[(next() >>> 16) % words.length]!
    ).join(" ")
    const paragraph = `<w:p><w:r><w:t>${sentence}</w:t></w:r></w:p>`
    paragraphs.push(paragraph)
    length += paragraph.length
  }
  return docx(Buffer.from(paragraphs.join("")), 20)
}

/** A one-page PDF whose content stream inflates to `megabytes` MB of `q Q` operators. */
const operatorsPdf = async (megabytes: number) => {
  const stream = (
    await deflateRepeated(Buffer.alloc(0), Buffer.from("q Q ".repeat(megabyte / 4)), megabytes, Buffer.alloc(0), false)
  ).deflated
  const parts: Array<Buffer> = []
  const offsets: Array<number> = []
  let length = 0
  const push = (data: Buffer | string) => {
    const buffer = typeof data === "string" ? Buffer.from(data, "latin1") : data
    parts.push(buffer)
    length += buffer.length
  }
  const object = (number: number, ...body: ReadonlyArray<Buffer | string>) => {
    offsets[number] = length
    push(`${number} 0 obj\n`)
    body.forEach(push)
    push("\nendobj\n")
  }
  push("%PDF-1.4\n")
  object(1, "<< /Type /Catalog /Pages 2 0 R >>")
  object(2, "<< /Type /Pages /Kids [3 0 R] /Count 1 >>")
  object(3, "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Resources << >> >>")
  object(4, `<< /Length ${stream.length} /Filter /FlateDecode >>\nstream\n`, stream, "\nendstream")
  const xref = length
  push(`xref\n0 5\n0000000000 65535 f \n`)
  for (let number = 1; number <= 4; number++) push(`${String(offsets[number]).padStart(10, "0")} 00000 n \n`)
  push(`trailer\n<< /Size 5 /Root 1 0 R >>\nstartxref\n${xref}\n%%EOF\n`)
  return Buffer.concat(parts)
}

// ---------------------------------------------------------------------------
// Watching the service from outside

/** Resident memory of a process, from /proc (0 once it is gone). */
const residentBytes = async (pid: number) => {
  try {
    const status = await Fs.promises.readFile(`/proc/${pid}/status`, "utf8")
    return Number(/^VmRSS:\s+(\d+)\s+kB/m.exec(status)?.[1] ?? 0) * 1024
  } catch {
    return 0
  }
}

/** The processes whose parent is `pid` (the sandbox's children of a service). */
const childrenOf = async (pid: number) => {
  const found: Array<number> = []
  for (const entry of await Fs.promises.readdir("/proc")) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const stat = await Fs.promises.readFile(`/proc/${entry}/stat`, "utf8")
      // The fields after the command name (in parentheses, which may hold spaces): state, then the parent's pid.
      if (Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]) === pid) found.push(Number(entry))
    } catch {
      // gone meanwhile
    }
  }
  return found
}

// /health/live is asked from a process of its own, one request after another: the test's own work
// (building and sending uploads) would otherwise count in the times it measures.
const prober = `
const url = process.argv[1]
const latencies = []
let running = true
process.on("message", () => { running = false })
;(async () => {
  // The first request loads fetch itself and opens the connection: not the service's time.
  await (await fetch(url)).text()
  process.send("ready")
  while (running) {
    const started = performance.now()
    const response = await fetch(url)
    await response.text()
    latencies.push(performance.now() - started)
    if (response.status !== 200) latencies.push(Infinity)
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
  process.send(latencies, () => process.exit(0))
})()
`

/**
 * Until `stop`: /health/live asked one request after another (each one's
 * time kept), and the service's resident memory and its children's read
 * every 100 ms (the highest of each kept).
 */
const watch = (service: ServiceProcess) => {
  let running = true
  const seen = { serviceRss: 0, childRss: 0, children: new Set<number>() }
  const probe = ChildProcess.spawn(process.execPath, ["-e", prober, `${service.baseUrl}/health/live`], {
    stdio: ["ignore", "inherit", "inherit", "ipc"]
  })
  const next = () =>
    new Promise<unknown>((resolve, reject) => {
      probe.once("message", resolve)
      probe.once("exit", (code) => reject(new Error(`the /health/live prober exited (${code})`)))
    })
  const ready = next()
  const latencies = ready.then(next) as Promise<Array<number>>
  const memory = (async () => {
    const pid = service.child.pid!
    let children: Array<number> = []
    for (let tick = 0; running; tick++) {
      seen.serviceRss = Math.max(seen.serviceRss, await residentBytes(pid))
      // Listing every process is the costly part: its children are looked for every 500 ms.
      if (tick % 5 === 0) children = await childrenOf(pid)
      for (const child of children) {
        seen.children.add(child)
        seen.childRss = Math.max(seen.childRss, await residentBytes(child))
      }
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
  })()
  let stopped: Promise<Array<number>> | undefined
  return {
    seen,
    /** Once the prober asks its first question. */
    ready,
    /** The time each /health/live took, in ms. */
    stop: () =>
      (stopped ??= (async () => {
        running = false
        probe.send("stop")
        await memory
        return latencies
      })())
  }
}

/** Uploads one file through the multipart route; the stored document's id. */
const upload = async (
  baseUrl: string,
  session: Record<string, string>,
  knowledgeId: string,
  file: {
    readonly name: string
    readonly type: string
    readonly bytes: Buffer
  }
) => {
  const form = new FormData()
  form.append("files", new Blob([new Uint8Array(file.bytes)], { type: file.type }), file.name)
  const response = await fetch(`${baseUrl}/api/knowledge/${knowledgeId}/upload`, {
    method: "POST",
    headers: session,
    body: form
  })
  const body = (await response.json()) as any
  if (response.status !== 201 && response.status !== 202)
    throw new Error(`upload ${file.name}: ${response.status} ${JSON.stringify(body)}`)
  return (response.status === 201 ? body.id : body.data[0].id) as string
}

const finalDocument = (
  baseUrl: string,
  session: Record<string, string>,
  knowledgeId: string,
  id: string,
  timeoutMs: number
) =>
  eventually(
    async () => {
      const { body, status } = await request(`${baseUrl}/api/knowledge/${knowledgeId}/documents/${id}`, {
        headers: session
      })
      if (status !== 200) throw new Error(`GET document ${id}: ${status}`)
      return defined(`document ${id} to be final`, body.status === "processing" ? undefined : body)
    },
    { timeoutMs, intervalMs: 100 }
  )

const docxType = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"

// The settings of these tests: the memory bound is the default's; the timeout is low enough to keep them
// fast and long enough that, on a slow machine too, the memory bound stops the large DOCX before it.
const extractionTimeoutMs = 12_000
const extractionMemoryMb = 512
/** How far past EXTRACTION_TIMEOUT a poison document may end: a child's start, the watchdog's tick, the write. */
const endsWithin = extractionTimeoutMs + 5_000
/** The service's own memory (its sandbox children apart) may grow this much over what it held when ready. */
const serviceGrowthBound = 150 * megabyte
/** A child may pass its bound by what it allocates between two of the watchdog's readings (50 ms apart). */
const childOvershoot = 256 * megabyte

describe("poison documents", () => {
  it.live(
    "a DOCX of tiny paragraphs, a lying zip, a DOCX too large to parse and a PDF of a billion operators each end failed with their reason; the service stays responsive and bounded",
    () =>
      Effect.gen(function* () {
        const env = {
          DATABASE_URL: yield* TestDatabaseUrl,
          EXTRACTION_TIMEOUT: `${extractionTimeoutMs} millis`,
          EXTRACTION_MEMORY_MB: String(extractionMemoryMb)
        }
        const files = yield* Effect.promise(async () => ({
          tiny: await tinyParagraphs(),
          liar: await lyingZip(),
          words: await manyWords(),
          // 1 GB of operators, half a billion `q Q` pairs: the review's 950 kB PDF.
          pdf: await operatorsPdf(1024)
        }))
        // Small by construction.
        assert.isBelow(files.tiny.length, 400_000)
        assert.isBelow(files.liar.length, 200_000)
        assert.isBelow(files.words.length, 8 * megabyte)
        assert.isBelow(files.pdf.length, 1_200_000)

        const service = yield* spawnService(env)
        yield* waitReady(service)
        const tenant = yield* Effect.promise(() => signUpTenant(service.baseUrl, "poison@example.com"))
        const base = yield* Effect.promise(() =>
          requestJson(`${service.baseUrl}/api/knowledge`, {
            method: "POST",
            headers: tenant.session,
            body: { name: "Poison" }
          })
        )
        const readyRss = yield* Effect.promise(() => residentBytes(service.child.pid!))
        const watching = watch(service)
        yield* Effect.promise(() => watching.ready)
        const outcome = yield* Effect.promise(async () => {
          const uploads = [
            { name: "tiny-paragraphs.docx", type: docxType, bytes: files.tiny },
            { name: "lying.docx", type: docxType, bytes: files.liar },
            { name: "many-words.docx", type: docxType, bytes: files.words },
            { name: "operators.pdf", type: "application/pdf", bytes: files.pdf }
          ]
          const ids = await Promise.all(uploads.map((file) => upload(service.baseUrl, tenant.session, base.id, file)))
          // Two of the four wait behind the tenant's two places: each may take two of the others' turns.
          const documents = await Promise.all(
            ids.map((id) => finalDocument(service.baseUrl, tenant.session, base.id, id, 3 * endsWithin))
          )
          return Object.fromEntries(uploads.map((file, i) => [file.name, documents[i]]))
        }).pipe(Effect.ensuring(Effect.promise(() => watching.stop()).pipe(Effect.ignore)))
        const latencies = yield* Effect.promise(() => watching.stop())
        const tiny = outcome["tiny-paragraphs.docx"]
        assert.strictEqual(tiny.status, "failed")
        assert.strictEqual(tiny.error.code, "too_large")
        assert.include(tiny.error.message, "word/document.xml")
        assert.include(tiny.error.message, "at most 50 MB")

        const liar = outcome["lying.docx"]
        assert.strictEqual(liar.status, "failed")
        assert.strictEqual(liar.error.code, "too_large")
        assert.include(liar.error.message, "word/document.xml inflates past the 4096 bytes its headers declare")

        const words = outcome["many-words.docx"]
        assert.strictEqual(words.status, "failed")
        assert.strictEqual(words.error.code, "too_large", JSON.stringify(words.error))
        assert.include(words.error.message, `more than ${extractionMemoryMb} MB of memory`)

        const pdf = outcome["operators.pdf"]
        assert.strictEqual(pdf.status, "failed")
        // Its memory or its time runs out first, depending on the machine: either stops it.
        assert.include(["too_large", "timeout"], pdf.error.code, JSON.stringify(pdf.error))
        assert.match(pdf.error.message, /EXTRACTION_MEMORY_MB|EXTRACTION_TIMEOUT/)

        // Each ended within the timeout plus the bound of its own extraction (waiting for a place aside: the
        // directory's refusals take no time, so at most one document waits behind a full extraction).
        const took = Object.values(outcome).map(
          (document: any) => Date.parse(document.updatedAt) - Date.parse(document.createdAt)
        )
        assert.isTrue(
          took.every((ms) => ms < 2 * endsWithin),
          JSON.stringify(took)
        )
        assert.isTrue(took.filter((ms) => ms >= endsWithin).length <= 1, JSON.stringify(took))

        assert.isAbove(latencies.length, 50)
        assert.isBelow(Math.max(...latencies), 100, `slowest /health/live: ${Math.max(...latencies)} ms`)
        assert.isBelow(
          watching.seen.serviceRss,
          readyRss + serviceGrowthBound,
          `service RSS ${Math.round(watching.seen.serviceRss / megabyte)} MB, ${Math.round(readyRss / megabyte)} MB when ready`
        )
        assert.isAbove(watching.seen.children.size, 0)
        assert.isBelow(
          watching.seen.childRss,
          extractionMemoryMb * megabyte + childOvershoot,
          `largest child: ${Math.round(watching.seen.childRss / megabyte)} MB`
        )
        // The service is still the same process, and still serves.
        assert.strictEqual(service.child.exitCode, null)
        const after = yield* Effect.promise(() => request(`${service.baseUrl}/health/ready`))
        assert.strictEqual(after.status, 200)
      }),
    240_000
  )

  it.live(
    "a document under strain when its node is killed is failed after the restart without being parsed again",
    () =>
      Effect.gen(function* () {
        const env = {
          DATABASE_URL: yield* TestDatabaseUrl,
          // Long enough for the strain (half of it) to be seen and the node killed well before the deadline.
          EXTRACTION_TIMEOUT: "10 seconds",
          EXTRACTION_MEMORY_MB: "4096"
        }
        const pdf = yield* Effect.promise(() => operatorsPdf(64))
        const db = new pg.Client({ connectionString: env.DATABASE_URL })
        yield* Effect.acquireRelease(
          Effect.promise(() => db.connect()),
          () => Effect.promise(() => db.end())
        )
        const row = async (id: string) =>
          (
            await db.query(
              "SELECT status, extraction_attempts, extraction_strain FROM knowledge_documents WHERE id = $1",
              [id]
            )
          ).rows[0]

        const first = yield* spawnService(env)
        yield* waitReady(first)
        const tenant = yield* Effect.promise(() => signUpTenant(first.baseUrl, "poison-restart@example.com"))
        const base = yield* Effect.promise(() =>
          requestJson(`${first.baseUrl}/api/knowledge`, {
            method: "POST",
            headers: tenant.session,
            body: { name: "Poison" }
          })
        )
        const id = yield* Effect.promise(() =>
          upload(first.baseUrl, tenant.session, base.id, { name: "operators.pdf", type: "application/pdf", bytes: pdf })
        )
        yield* Effect.promise(() =>
          eventually(
            async () => {
              const now = await row(id)
              // The document as it stands says why no strain came (an extraction ended early, or none started).
              if (now?.extraction_strain == null) {
                throw new Error(`Timed out waiting for the extraction's strain: the document is ${JSON.stringify(now)}`)
              }
              return now.extraction_strain
            },
            { timeoutMs: 20_000 }
          )
        )
        first.child.kill("SIGKILL")
        yield* Effect.promise(() => first.exited)
        const killed = yield* Effect.promise(() => row(id))
        assert.strictEqual(killed.status, "processing")
        assert.strictEqual(killed.extraction_attempts, 1)

        const second = yield* spawnService(env)
        yield* waitReady(second)
        // Every process the restarted service starts meanwhile is seen: a sandbox child would be one.
        const spawned = new Set<number>()
        let watching = true
        const children = (async () => {
          while (watching) {
            for (const child of await childrenOf(second.child.pid!)) spawned.add(child)
            await new Promise((resolve) => setTimeout(resolve, 20))
          }
        })()
        const document = yield* Effect.promise(() =>
          finalDocument(second.baseUrl, tenant.session, base.id, id, 30_000)
        ).pipe(
          Effect.ensuring(
            Effect.promise(async () => {
              watching = false
              await children
            })
          )
        )
        assert.strictEqual(document.status, "failed")
        assert.strictEqual(document.error.code, "timeout")
        assert.include(document.error.message, "Extraction did not finish")
        assert.include(document.error.message, "it had run for")
        assert.include(document.error.message, "not read again")
        // Not parsed again: no attempt was counted, and no sandbox process started.
        assert.strictEqual((yield* Effect.promise(() => row(id))).extraction_attempts, 1)
        assert.strictEqual(spawned.size, 0)
      }),
    120_000
  )
})
