import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"
import * as Semaphore from "effect/Semaphore"
import * as ChildProcess from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Url from "node:url"
import { AppConfig } from "../Config.ts"
import type { ExtractReply, ExtractRequest, JobFailure, SplitReply, SplitRequest } from "./ExtractChild.ts"

/**
 * Extraction in a sandbox: every document is parsed and split in a child
 * process (ExtractChild.ts), never on the service's own thread, so that a
 * hostile file can neither block the event loop nor exhaust the service's
 * memory. Each child runs with a bounded old generation, and the parent
 * watches it from outside: its resident memory (which counts the array
 * buffers the old-generation bound does not) is read from /proc every 50 ms
 * and the child is killed past EXTRACTION_MEMORY_MB, and it is killed at
 * EXTRACTION_TIMEOUT, even in the middle of synchronous work. Children are
 * kept warm between documents; one that was killed, crashed or grew large is
 * replaced. At most EXTRACTION_CONCURRENCY documents are extracted at once on
 * a node.
 */

/** What the watchdog saw when a child was past half its memory or half its time: reported once per job. */
export interface Strain {
  readonly code: "too_large" | "timeout"
  readonly detail: string
}

export interface SandboxHooks<E, R> {
  /** Runs once the node has a place for the job, before the bytes reach a child; `false` skips the job. */
  readonly begin: Effect.Effect<boolean, E, R>
  /** Told once when the child is past half its memory bound or half its time. */
  readonly strained: (strain: Strain) => Effect.Effect<void, never, R>
}

export interface SandboxSettings {
  /** Resident memory a child may use, in bytes. */
  readonly memoryBytes: number
  readonly timeout: Duration.Duration
  /** Documents extracted at once on this node. */
  readonly concurrency: number
}

interface Worker {
  readonly child: ChildProcess.ChildProcess
  readonly pid: number
  exited: boolean
  /** Set by the watchdog before it kills the child: the answer its job gets. */
  killedFor: JobFailure | undefined
  /** The end of what the child wrote to stderr (V8's out-of-memory report, say). */
  stderr: string
  idleSince: number
}

const childEntry = Url.fileURLToPath(new URL("./ExtractChild.ts", import.meta.url))
const megabytes = (bytes: number) => Math.round(bytes / (1024 * 1024))
const sampleEvery = Duration.millis(50)
/** Children idle this long are stopped, to give their memory back. */
const idleFor = 120_000

/** Resident memory of a process, from outside it, or `undefined` where /proc cannot tell. */
const residentBytes = (pid: number) =>
  Effect.promise(() =>
    Fs.promises.readFile(`/proc/${pid}/status`, "utf8").then(
      (status) => {
        const kb = /^VmRSS:\s+(\d+)\s+kB/m.exec(status)
        return kb === null ? undefined : Number(kb[1]) * 1024
      },
      () => undefined
    )
  )

export const make = (settings: SandboxSettings) =>
  Effect.gen(function* () {
    const permits = Semaphore.makeUnsafe(Math.max(1, settings.concurrency))
    const idle: Array<Worker> = []
    const live = new Set<Worker>()
    const timeoutMs = Duration.toMillis(settings.timeout)
    // V8's own bound stops the heap below the watchdog's; the rest is left to buffers and code.
    const oldSpaceMb = Math.max(64, Math.floor(megabytes(settings.memoryBytes) * 0.75))
    // The service's own NODE_OPTIONS (its heap size, say) are not the child's.
    const { NODE_OPTIONS: _ignored, ...env } = process.env

    const kill = (worker: Worker) => {
      live.delete(worker)
      if (!worker.exited) worker.child.kill("SIGKILL")
    }

    const spawn = Effect.callback<Worker>((resume) => {
      const child = ChildProcess.fork(childEntry, ["--extract-child"], {
        execPath: process.execPath,
        execArgv: [`--max-old-space-size=${oldSpaceMb}`],
        serialization: "advanced",
        stdio: ["ignore", "ignore", "pipe", "ipc"],
        env
      })
      const worker: Worker = {
        child,
        pid: child.pid ?? -1,
        exited: false,
        killedFor: undefined,
        stderr: "",
        idleSince: Date.now()
      }
      try {
        // On a busy machine the service's own requests come first: a parse may wait, a health check may not.
        Os.setPriority(worker.pid, 19)
      } catch {
        // Not allowed here: the child runs at the service's priority.
      }
      live.add(worker)
      child.stderr?.on("data", (chunk: Buffer) => {
        worker.stderr = (worker.stderr + chunk.toString("utf8")).slice(-2000)
      })
      const gone = () => {
        worker.exited = true
        live.delete(worker)
      }
      child.once("exit", gone)
      // A child that cannot start is a worker that has exited: its job gets the crash answer.
      const startTimer = setTimeout(
        () => {
          worker.killedFor = {
            ok: false,
            code: "parse_error",
            message: "The extractor did not start in time; try again later."
          }
          kill(worker)
        },
        Math.min(timeoutMs, 30_000)
      )
      const settle = () => {
        clearTimeout(startTimer)
        child.off("message", settle)
        child.off("exit", settle)
        resume(Effect.succeed(worker))
      }
      child.once("message", settle)
      child.once("exit", settle)
      child.on("error", () => {
        // A process that could not be made at all emits no exit.
        gone()
        kill(worker)
        settle()
      })
      return Effect.sync(() => {
        clearTimeout(startTimer)
        kill(worker)
      })
    })

    const take = Effect.suspend(() => {
      let worker = idle.pop()
      while (worker?.exited) worker = idle.pop()
      return worker === undefined ? spawn : Effect.succeed(worker)
    })

    // A child that ended its job in good health and small goes back to the pool.
    const giveBack = (worker: Worker) =>
      Effect.gen(function* () {
        const rss = yield* residentBytes(worker.pid)
        if (
          worker.exited ||
          (rss !== undefined && rss > settings.memoryBytes / 2) ||
          idle.length >= settings.concurrency
        ) {
          return kill(worker)
        }
        worker.idleSince = Date.now()
        idle.push(worker)
      })

    const crashed = (worker: Worker, code: number | null, signal: NodeJS.Signals | null): JobFailure => {
      if (/heap out of memory|allocation failed/i.test(worker.stderr)) {
        return {
          ok: false,
          code: "too_large",
          message: `Extraction needed more than ${megabytes(settings.memoryBytes)} MB of memory (EXTRACTION_MEMORY_MB) and was stopped.`
        }
      }
      return {
        ok: false,
        code: "parse_error",
        message: `The extractor stopped while reading the file (${signal ?? `exit code ${code}`}).`
      }
    }

    /** Sends the job and waits for its answer, or for the child's end (killed by the watchdog, or crashed). */
    const exchange = <Reply>(worker: Worker, request: ExtractRequest | SplitRequest) =>
      Effect.callback<Reply | JobFailure>((resume) => {
        const answered = (reply: Reply) => {
          cleanup()
          resume(Effect.succeed(reply))
        }
        const ended = (code: number | null, signal: NodeJS.Signals | null) => {
          cleanup()
          resume(Effect.succeed(worker.killedFor ?? crashed(worker, code, signal)))
        }
        const cleanup = () => {
          worker.child.off("message", answered)
          worker.child.off("exit", ended)
        }
        if (worker.exited) {
          resume(Effect.succeed(worker.killedFor ?? crashed(worker, worker.child.exitCode, worker.child.signalCode)))
          return
        }
        worker.child.on("message", answered)
        worker.child.once("exit", ended)
        worker.child.send(request, (error) => {
          if (error !== null && error !== undefined) kill(worker)
        })
        return Effect.sync(cleanup)
      })

    /** Kills the child past its memory bound or its deadline; tells `strained` once past half of either. */
    const watch = <R>(worker: Worker, startedAt: number, strained: (strain: Strain) => Effect.Effect<void, never, R>) =>
      Effect.gen(function* () {
        let told = false
        while (!worker.exited) {
          const elapsed = Date.now() - startedAt
          if (elapsed >= timeoutMs) {
            worker.killedFor = {
              ok: false,
              code: "timeout",
              message: `Extraction took longer than ${Duration.format(settings.timeout)} (EXTRACTION_TIMEOUT) and was stopped.`
            }
            return kill(worker)
          }
          const rss = yield* residentBytes(worker.pid)
          if (rss !== undefined && rss > settings.memoryBytes) {
            worker.killedFor = {
              ok: false,
              code: "too_large",
              message: `Extraction needed more than ${megabytes(settings.memoryBytes)} MB of memory (EXTRACTION_MEMORY_MB) and was stopped.`
            }
            return kill(worker)
          }
          if (!told && rss !== undefined && rss > settings.memoryBytes / 2) {
            told = true
            yield* Effect.forkChild(strained({ code: "too_large", detail: `it used ${megabytes(rss)} MB of memory` }))
          } else if (!told && elapsed > timeoutMs / 2) {
            told = true
            yield* Effect.forkChild(
              strained({ code: "timeout", detail: `it had run for ${Math.round(elapsed / 1000)} s` })
            )
          }
          yield* Effect.sleep(sampleEvery)
        }
      })

    const run = <Reply, E, R>(
      request: ExtractRequest | SplitRequest,
      hooks: SandboxHooks<E, R>
    ): Effect.Effect<Option.Option<Reply | JobFailure>, E, R> =>
      permits.withPermits(1)(
        Effect.gen(function* () {
          if (!(yield* hooks.begin)) return Option.none()
          const startedAt = Date.now()
          const reply = yield* Effect.acquireUseRelease(
            take,
            (worker) =>
              Effect.gen(function* () {
                if (!worker.exited) {
                  worker.killedFor = undefined
                  worker.stderr = ""
                }
                const watchdog = yield* Effect.forkChild(watch(worker, startedAt, hooks.strained))
                const reply = yield* exchange<Reply>(worker, request)
                yield* Fiber.interrupt(watchdog)
                return reply
              }),
            // A job interrupted midway leaves its child busy: it is not reused.
            (worker, exit) =>
              Exit.isSuccess(exit) && worker.killedFor === undefined
                ? giveBack(worker)
                : Effect.sync(() => kill(worker))
          )
          return Option.some(reply)
        })
      )

    // Idle children give their memory back after a while; every child ends with the service.
    yield* Effect.sync(() => {
      const now = Date.now()
      for (let i = idle.length - 1; i >= 0; i--) {
        if (now - idle[i]!.idleSince > idleFor) kill(idle.splice(i, 1)[0]!)
      }
    }).pipe(Effect.repeat(Schedule.spaced("30 seconds")), Effect.forkScoped)
    yield* Effect.addFinalizer(() => Effect.sync(() => [...live].forEach(kill)))

    return {
      /**
       * Extracts, splits and indexes a document in a child. `begin` runs once the node has a place for it,
       * before its bytes reach the child; none when `begin` skipped it.
       */
      extract: <E, R>(request: ExtractRequest, hooks: SandboxHooks<E, R>) => run<ExtractReply, E, R>(request, hooks),
      /** Splits a stored text again (a rechunk) in a child, bounded as an extraction is. */
      split: (request: SplitRequest): Effect.Effect<SplitReply> =>
        run<SplitReply, never, never>(request, noHooks).pipe(
          Effect.map(
            Option.getOrElse((): SplitReply => ({ ok: false, code: "parse_error", message: "The text was not split." }))
          )
        )
    } as const
  })

const noHooks: SandboxHooks<never, never> = { begin: Effect.succeed(true), strained: () => Effect.void }

export class ExtractionSandbox extends Context.Service<ExtractionSandbox, Effect.Success<ReturnType<typeof make>>>()(
  "agent-host/ExtractionSandbox"
) {
  static readonly layer = Layer.effect(
    ExtractionSandbox,
    Effect.gen(function* () {
      const config = yield* AppConfig
      return yield* make({
        memoryBytes: config.extractionMemoryMb * 1024 * 1024,
        timeout: config.extractionTimeout,
        concurrency: config.extractionConcurrency
      })
    })
  )
}
