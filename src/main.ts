import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import { AppConfig } from "./Config.ts"
import * as Observability from "./Observability/Observability.ts"
import * as Server from "./Server.ts"

// SIGTERM/SIGINT interrupt the launch, which closes the server (draining
// in-flight requests), then the database; a stop asked for by a signal is a
// clean exit.
Layer.launch(Server.layer).pipe(
  Effect.provide(Observability.LoggerLayer.pipe(Layer.provide(AppConfig.layer))),
  NodeRuntime.runMain({
    teardown: (exit, onExit) => onExit(Exit.isSuccess(exit) || Cause.hasInterruptsOnly(exit.cause) ? 0 : 1)
  })
)
