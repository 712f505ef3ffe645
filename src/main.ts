import { NodeRuntime } from "@effect/platform-node"
import { Cause, Effect, Exit, Layer, Logger } from "effect"
import * as Server from "./Server.ts"

// Structured JSON lines on stdout, written in batches: one write per window
// instead of one per log line keeps logging off the request path. What is
// buffered is flushed when the process stops.
const JsonLines = Logger.batched(Logger.formatJson, {
  window: "50 millis",
  flush: (lines) => Effect.sync(() => void process.stdout.write(lines.join("\n") + "\n"))
})

// SIGTERM/SIGINT interrupt the launch, which closes the server (draining
// in-flight requests), then the database; a stop asked for by a signal is a
// clean exit.
Layer.launch(Server.layer).pipe(
  Effect.provide(Logger.layer([JsonLines])),
  NodeRuntime.runMain({
    teardown: (exit, onExit) => onExit(Exit.isSuccess(exit) || Cause.hasInterruptsOnly(exit.cause) ? 0 : 1)
  })
)
