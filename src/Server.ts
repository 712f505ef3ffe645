import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Scope from "effect/Scope"
import * as ClusterWorkflowEngine from "effect/cluster/ClusterWorkflowEngine"
import * as HttpRouter from "effect/http/HttpRouter"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as HttpApiBuilder from "effect/http-api/HttpApiBuilder"
import * as HttpApiMiddleware from "effect/http-api/HttpApiMiddleware"
import * as HttpApiScalar from "effect/http-api/HttpApiScalar"
import { createServer } from "node:http"
import * as Conversation from "./Agents/Conversation.ts"
import * as AgentsHttp from "./Agents/Http.ts"
import { AgentsRepo } from "./Agents/Repo.ts"
import { Api } from "./Api.ts"
import * as AuthHttp from "./Auth/Http.ts"
import * as AuthMiddleware from "./Auth/Middleware.ts"
import { TokenBudget } from "./Billing/Budget.ts"
import * as BillingHttp from "./Billing/Http.ts"
import { Quota } from "./Billing/Quota.ts"
import * as StripeWebhookHttp from "./Billing/StripeHttp.ts"
import { AppConfig, type AppSettings } from "./Config.ts"
import * as Sql from "./Database/Sql.ts"
import * as HealthHttp from "./Health/Http.ts"
import { Executions } from "./Orchestrations/Executions.ts"
import * as ExecutionWorkflow from "./Orchestrations/ExecutionWorkflow.ts"
import * as OrchestrationsHttp from "./Orchestrations/Http.ts"
import { ExecutionsRepo } from "./Orchestrations/ExecutionsRepo.ts"
import { Models } from "./Models/Models.ts"
import * as Cluster from "./Runtime/Cluster.ts"
import * as Dashboard from "./Http/Dashboard.ts"
import * as MemoryReducer from "./Runtime/MemoryReducer.ts"
import * as MetricsHttp from "./Http/MetricsHttp.ts"
import * as Observability from "./Observability/Observability.ts"
import * as RequestPipeline from "./Http/RequestPipeline.ts"
import { RunSlots } from "./Runtime/RunSlots.ts"
import * as SyncDigest from "./Runtime/SyncDigest.ts"
import * as KnowledgeHttp from "./Knowledge/Http.ts"
import * as IngestionWorkflow from "./Knowledge/IngestionWorkflow.ts"
import * as McpHttp from "./Mcp/Server.ts"
import { Knowledge } from "./Knowledge/Knowledge.ts"
import { KnowledgeSearch } from "./Knowledge/Search.ts"
import * as KnowledgeSearchHttp from "./Knowledge/SearchHttp.ts"
import * as SchedulesHttp from "./Schedules/Http.ts"
import { Approvals } from "./Approvals/Approvals.ts"
import { ApprovalDefaults } from "./Approvals/Defaults.ts"
import * as ApprovalsHttp from "./Approvals/Http.ts"
import { Schedules } from "./Schedules/Schedules.ts"
import * as SecretsHttp from "./Secrets/Http.ts"
import * as TeamsHttp from "./Teams/Http.ts"
import { TeamsRepo } from "./Teams/Repo.ts"
import { TeamRuns } from "./Teams/TeamRuns.ts"
import * as ToolsHttp from "./Tools/Http.ts"
import { AgentTools } from "./Tools/AgentTools.ts"
import { ToolLoop } from "./Tools/Loop.ts"
import { ToolsRepo } from "./Tools/Repo.ts"
import * as TeamRunWorkflow from "./Teams/TeamRunWorkflow.ts"
import * as WebhookDelivery from "./Webhooks/Delivery.ts"
import { Webhooks } from "./Webhooks/Webhooks.ts"

/**
 * The offline API reference at /docs (Scalar). Its page inlines several MB of
 * script, which effect's layer loads when it is built: here that layer is
 * built on the first request for the page, so a node whose docs are never
 * read never holds it. The page carries a script-src of its inline scripts'
 * hashes, computed once: effect builds the page once and serves that response.
 */
const DocsLayer = HttpRouter.use(
  Effect.fnUntraced(function* (router) {
    const scope = yield* Effect.scope
    const page = yield* Effect.cached(
      HttpRouter.toHttpEffect(HttpApiScalar.layer(Api, { path: "/docs" })).pipe(Scope.provide(scope))
    )
    let withPolicy: readonly [HttpServerResponse.HttpServerResponse, HttpServerResponse.HttpServerResponse] | undefined
    yield* router.add(
      "GET",
      "/docs",
      Effect.map(Effect.flatten(page), (response) => {
        if (withPolicy?.[0] === response) return withPolicy[1]
        const html =
          response.body._tag === "Uint8Array"
            ? (response.body.text ?? new TextDecoder().decode(response.body.body))
            : ""
        withPolicy = [
          response,
          HttpServerResponse.setHeader(response, "content-security-policy", RequestPipeline.inlineScriptPolicy(html))
        ]
        return withPolicy[1]
      })
    )
  })
)

/** The routes served beside the API's, as (method, template). */
const extraRoutesOf = (config: AppSettings) => {
  const extraRoutes: Array<readonly [string, string]> = [["GET", "/openapi.json"], ["GET", "/docs"], ...McpHttp.routes]
  if (config.metricsEnabled) extraRoutes.push(["GET", "/metrics"])
  if (config.dashboardEnabled) extraRoutes.push(...Dashboard.routes)
  return extraRoutes
}

/** Every route: the API, its OpenAPI document, the offline reference at /docs, /metrics, the dashboard, and the request pipeline. */
export const RoutesLayer = Layer.unwrap(
  Effect.gen(function* () {
    const config = yield* AppConfig
    const extraRoutes = extraRoutesOf(config)
    return Layer.mergeAll(
      HttpApiBuilder.layer(Api, { openapiPath: "/openapi.json" }),
      DocsLayer,
      // The service as an MCP server at /mcp, with an API key (docs/mcp.md).
      McpHttp.layer,
      // Prometheus text format, unless METRICS_ENABLED=false; behind METRICS_TOKEN when set.
      config.metricsEnabled ? MetricsHttp.layer : Layer.empty,
      // The dashboard at /app, unless DASHBOARD_ENABLED=false.
      config.dashboardEnabled ? Dashboard.layer : Layer.empty,
      RequestPipeline.layer(Api, extraRoutes)
    )
  })
).pipe(
  Layer.provide([
    HealthHttp.layer,
    AuthHttp.layer,
    AgentsHttp.layer,
    BillingHttp.layer,
    StripeWebhookHttp.layer,
    OrchestrationsHttp.layer,
    TeamsHttp.layer,
    KnowledgeHttp.layer,
    KnowledgeSearchHttp.layer,
    ToolsHttp.layer,
    SecretsHttp.layer,
    SchedulesHttp.layer,
    ApprovalsHttp.layer
  ]),
  Layer.provide([AuthMiddleware.layer, HttpApiMiddleware.layerProblemDetails({ includeDetails: true })]),
  // One quota per process: the middleware and the billing route share its batches.
  Layer.provide(Quota.layer)
)

/** The HTTP server on the configured port (0 picks a free one), draining in-flight requests on shutdown. */
export const HttpLayer = Layer.unwrap(
  Effect.gen(function* () {
    const config = yield* AppConfig
    return HttpRouter.serve(RoutesLayer, { disableLogger: true }).pipe(
      Layer.provide(RequestPipeline.multipartLimits),
      // Server spans are named after the route they matched.
      Layer.provide(RequestPipeline.spanNames(Api, extraRoutesOf(config))),
      Layer.provideMerge(
        NodeHttpServer.layer(() => RequestPipeline.answerUnparsable(createServer({ requireHostHeader: false })), {
          port: config.port,
          host: config.host,
          gracefulShutdownTimeout: Duration.toMillis(config.shutdownGrace)
        })
      )
    )
  })
)

/**
 * The cluster and the entities and workflows it runs on this node, with what
 * they need; also outbound webhooks (their deliveries are workflows, and the
 * outbox sweep a singleton), which the routes and the runs use.
 */
export const EntitiesLayer = Layer.mergeAll(
  Conversation.layer,
  ExecutionWorkflow.layer,
  TeamRunWorkflow.layer,
  IngestionWorkflow.layer,
  WebhookDelivery.layer,
  Webhooks.sweeper,
  // Decided approvals whose runs were not woken (their node died in between) are woken again.
  Approvals.wakeSweeper
).pipe(
  // The tool loop and what it needs: the agents' tools, their calls' records and how a call is made.
  // Kept in the output: chats of agents without memory run their loop from the routes.
  Layer.provideMerge(AgentTools.layer),
  Layer.provideMerge(ToolLoop.layer),
  // A tenant's approval defaults: the tools' loads apply them, the routes set them.
  Layer.provideMerge(ApprovalDefaults.layer),
  // Approvals: the runs ask for them and wait; the routes decide them.
  Layer.provideMerge(Approvals.layer),
  Layer.provide([
    AgentsRepo.layer,
    ExecutionsRepo.layer,
    TokenBudget.layer,
    TeamsRepo.layer,
    KnowledgeSearch.layer,
    ToolsRepo.layer
  ]),
  // One per process: the runs' slots and signals, which the workflows and the routes share.
  Layer.provideMerge(RunSlots.layerAll),
  // One model client per process: chats of agents without memory call it from the routes.
  Layer.provideMerge(Models.layer),
  Layer.provideMerge(Webhooks.layer),
  Layer.provideMerge(ClusterWorkflowEngine.layer),
  Layer.provideMerge(Cluster.layer)
)

/** The whole service, given its settings. */
export const ServiceLayer = Layer.mergeAll(
  // Start-up's garbage is given back to the OS before the server listens.
  HttpLayer.pipe(Layer.provide(MemoryReducer.layer)),
  Executions.sweeper.pipe(Layer.provide(Executions.layer)),
  TeamRuns.sweeper.pipe(Layer.provide(TeamRuns.layer)),
  Knowledge.sweeper.pipe(Layer.provide(Knowledge.layer)),
  // Every node ticks: a slot is started by whichever claims it first.
  Schedules.ticker.pipe(Layer.provide(Schedules.layer))
).pipe(
  Layer.provide(EntitiesLayer),
  Layer.provide(Sql.layer),
  Layer.provide(Observability.TracingLayer),
  Layer.provide(SyncDigest.layer)
)

/** The whole service, configured from the environment. */
export const layer = ServiceLayer.pipe(Layer.provide(AppConfig.layer))
