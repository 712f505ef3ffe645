import * as HttpApi from "effect/http-api/HttpApi"
import * as HttpApiMiddleware from "effect/http-api/HttpApiMiddleware"
import * as OpenApi from "effect/http-api/OpenApi"
import { AgentsApi, AgentsV1Api } from "./Agents/Api.ts"
import { ApprovalDefaultsApi, ApprovalsApi, ApprovalsV1Api } from "./Approvals/Api.ts"
import { AuthApi, KeysApi } from "./Auth/Api.ts"
import { BillingApi } from "./Billing/Api.ts"
import { StripeWebhookApi } from "./Billing/StripeApi.ts"
import { HealthApi } from "./Health/Api.ts"
import { ExecutionsApi, ExecutionsV1Api, OrchestrationsApi, OrchestrationsV1Api } from "./Orchestrations/Api.ts"
import { KnowledgeApi } from "./Knowledge/Api.ts"
import { KnowledgeSearchApi } from "./Knowledge/SearchApi.ts"
import { SchedulesApi } from "./Schedules/Api.ts"
import { SecretsApi } from "./Secrets/Api.ts"
import { TeamsApi, TeamsPublicApi, TeamsV1Api } from "./Teams/Api.ts"
import { McpOAuthCallbackApi, ToolsApi } from "./Tools/Api.ts"

/** The whole HTTP API: one declaration gives validation, the OpenAPI document and a typed client. */
export class Api extends HttpApi.make("agent-host")
  .add(HealthApi)
  .add(AuthApi)
  .add(KeysApi)
  .add(AgentsApi)
  .add(AgentsV1Api)
  .add(BillingApi)
  .add(StripeWebhookApi)
  .add(OrchestrationsApi)
  .add(OrchestrationsV1Api)
  .add(ExecutionsApi)
  .add(ExecutionsV1Api)
  .add(TeamsApi)
  .add(TeamsV1Api)
  .add(TeamsPublicApi)
  .add(KnowledgeApi)
  .add(KnowledgeSearchApi)
  .add(ToolsApi)
  .add(McpOAuthCallbackApi)
  .add(SecretsApi)
  .add(SchedulesApi)
  .add(ApprovalsApi)
  .add(ApprovalsV1Api)
  .add(ApprovalDefaultsApi)
  .middleware(HttpApiMiddleware.ProblemDetails)
  // A 400 names every bad field of the part that failed (params, headers,
  // query, payload), not just the first. Each request string aborts at its
  // first failed check (src/Domain/Input.ts), so that is one entry per field.
  .annotate(HttpApi.ParseOptions, { errors: "all" })
  .annotateMerge(
    OpenApi.annotations({
      title: "Agent Host API",
      version: "0.1.0",
      description:
        "Multi-tenant AI agents, orchestrations, teams and knowledge bases.\n\n" +
        "**Credentials.** The management routes (`/api/...`) take a session: the cookie set by " +
        "`POST /api/auth/login`, or its token as `Authorization: Bearer`. The routes of `/api/v1` take an API key " +
        "as a bearer token, those of `/api/public` the same key in `X-API-Key`; each names the scope it needs.\n\n" +
        "**Errors** are RFC 9457 `application/problem+json`. Any route answers 400 when the request does not " +
        "decode, with `errors: [{ path, message }]` naming every bad field, and 500 (with a `requestId`) on a fault " +
        "of the service. Every authenticated route answers 401 without a valid credential; session routes answer " +
        "403 to a cookie write from a foreign origin; key routes answer 403 when the key lacks the scope and 429 " +
        "past the plan's daily requests (`RateLimit-*` and `Retry-After` headers). A resource of another tenant is " +
        "a 404, as if it did not exist.",
      // Relative: the document describes the service that serves it, wherever that is.
      servers: [{ url: "/", description: "This service" }],
      // The project has no public home yet (package.json names no repository or
      // homepage), so the contact is this deployment's own reference, relative like
      // `servers`. OpenApi.annotations has no `contact`, hence the transform.
      transform: (spec) => ({ ...spec, info: { ...spec.info, contact: { name: "Agent Host", url: "/docs" } } })
    })
  ) {}
