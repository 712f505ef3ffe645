// The floor of a route, without a database: the same two routes on bare
// effect (HttpApi, the platform's node server, no middleware) or on fastify
// (FRAMEWORK=effect|fastify), on PORT. GET /items/:id answers a fixed row;
// POST /items reads a JSON body ({ input }) and answers 202 with an id. The
// floor bench (floor.ts) loads them side by side with the service's own
// routes, to show what the framework itself costs per request.
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as HttpRouter from "effect/http/HttpRouter"
import * as HttpApi from "effect/http-api/HttpApi"
import * as HttpApiBuilder from "effect/http-api/HttpApiBuilder"
import * as HttpApiEndpoint from "effect/http-api/HttpApiEndpoint"
import * as HttpApiGroup from "effect/http-api/HttpApiGroup"
import * as HttpApiSchema from "effect/http-api/HttpApiSchema"
import Fastify from "fastify"
import * as Crypto from "node:crypto"
import { createServer } from "node:http"

const port = Number(process.env.PORT)
const host = "127.0.0.1"
// A row shaped like the agent the fastify baseline reads.
const row = {
  id: "agt_0000000000000000000000",
  name: "Agent",
  description: null,
  model: "local/echo",
  status: "active",
  memory_enabled: false,
  created_at: "2026-01-01T00:00:00.000Z"
}

if (process.env.FRAMEWORK === "fastify") {
  const app = Fastify({ logger: false })
  app.get<{ Params: { id: string } }>("/items/:id", async (request) => ({ ...row, id: request.params.id }))
  app.post<{ Body: { input: string } }>("/items", async (request, reply) => {
    if (typeof request.body?.input !== "string") return reply.code(400).send({ status: 400 })
    return reply.code(202).send({ id: Crypto.randomUUID() })
  })
  await app.listen({ port, host })
  process.on("SIGTERM", () => app.close().then(() => process.exit(0)))
} else {
  const Row = Schema.Struct({
    id: Schema.String,
    name: Schema.String,
    description: Schema.NullOr(Schema.String),
    model: Schema.String,
    status: Schema.String,
    memory_enabled: Schema.Boolean,
    created_at: Schema.String
  })
  class Items extends HttpApiGroup.make("items").add(
    HttpApiEndpoint.get("get", "/items/:id", { params: { id: Schema.String }, success: Row }),
    HttpApiEndpoint.post("create", "/items", {
      payload: Schema.Struct({ input: Schema.String }),
      success: Schema.Struct({ id: Schema.String }).pipe(HttpApiSchema.status(202))
    })
  ) {}
  class Floor extends HttpApi.make("floor").add(Items) {}
  const ItemsLive = HttpApiBuilder.group(Floor, "items", (handlers) =>
    handlers
      .handle("get", ({ params }) => Effect.succeed({ ...row, id: params.id }))
      .handle("create", () => Effect.sync(() => ({ id: Crypto.randomUUID() })))
  )
  const Live = HttpRouter.serve(HttpApiBuilder.layer(Floor), { disableLogger: true }).pipe(
    Layer.provide(ItemsLive),
    Layer.provide(NodeHttpServer.layer(createServer, { port, host }))
  )
  NodeRuntime.runMain(Layer.launch(Live))
}
