import { NodeRuntime } from "@effect/platform-node"
import { Cause, Effect, Exit, Layer, Logger } from "effect"
import * as Server from "./Server.ts"

// Structured JSON logs on stdout. SIGTERM/SIGINT interrupt the launch, which
// closes the server (draining in-flight requests), then the database; a stop
// asked for by a signal is a clean exit.
Layer.launch(Server.layer).pipe(
  Effect.provide(Logger.layer([Logger.consoleJson])),
  NodeRuntime.runMain({
    teardown: (exit, onExit) => onExit(Exit.isSuccess(exit) || Cause.hasInterruptsOnly(exit.cause) ? 0 : 1)
  })
)
