import * as Schema from "effect/Schema"
import * as HttpApiEndpoint from "effect/http-api/HttpApiEndpoint"
import * as HttpApiGroup from "effect/http-api/HttpApiGroup"
import * as HttpApiSchema from "effect/http-api/HttpApiSchema"
import * as OpenApi from "effect/http-api/OpenApi"
import { SessionAuth, sessionCredential } from "../Auth/Api.ts"
import { operation } from "../Domain/ApiDocs.ts"
import { ToolId } from "../Domain/Ids.ts"
import { text } from "../Domain/Input.ts"
import { managementEndpoints } from "../Domain/Management.ts"
import { PageOf } from "../Domain/Page.ts"
import { BadRequest, Conflict, NotFound, QuotaReached } from "../Domain/Problems.ts"
import { CallResult, TestCallRequest } from "./Call.ts"
import { Tool } from "./Tool.ts"

export const ToolList = PageOf(Tool.json)

const checked =
  "`parameters` must be a draft-07 JSON Schema of an object (an `mcp` tool may leave it out); an `http` tool's " +
  "url may hold `{{args.NAME}}` in its path and query only, naming properties of `parameters`, and its host must " +
  "be one of `allowedHosts` and " +
  "pass the egress guard (no private, loopback, link-local or metadata address unless WEBHOOK_ALLOW_PRIVATE); " +
  "a `knowledge` tool's bases and an `agent` tool's agent must be the tenant's; an `mcp` tool's url passes the " +
  "same checks, or its `server` is a stdio server the operator configured for the tenant, and the server must " +
  "answer `tools/list`."

// Deleting is the routes' own: a tool agents have is refused (409) rather than taken from them.
const [list, create, get, update] = managementEndpoints({
  name: "tool",
  model: Tool,
  credential: sessionCredential,
  errors: { create: [Conflict, QuotaReached], update: [NotFound, Conflict] },
  docs: {
    list: { description: "The tenant's tools, active and inactive, a page at a time (`limit`, `cursor`)." },
    create: {
      description:
        "Defines a tool agents may be given: its name and description (what the model sees), the JSON Schema " +
        "of its arguments, its kind (`http`, `knowledge`, `agent` or `mcp`) with that kind's settings, and its " +
        "policy. An `mcp` tool's server tools are listed when it is saved (docs/mcp.md#agents-use-mcp-servers).",
      errors:
        `400 on invalid fields, each named by its path: ${checked} 409 when the tenant has a tool of that ` +
        "name. 429 when the tenant has as many tools as its plan allows (MAX_TOOLS)."
    },
    get: { description: "The tool, with its settings and policy." },
    update: {
      description:
        "Changes the fields sent and leaves the others as they are: `settings` is replaced whole, `policy` " +
        "changes the bounds sent. The settings and parameters are checked together, whichever is sent.",
      errors: `400 on invalid fields, as on create. 404 when the tool is not the tenant's. 409 when another tool has the name.`
    }
  }
})

const remove = HttpApiEndpoint.delete("remove", "/:id", {
  params: { id: ToolId },
  success: HttpApiSchema.NoContent,
  error: [NotFound, Conflict]
}).annotateMerge(
  operation({
    summary: "Delete a tool",
    description: "Deletes the tool. A tool that agents have is not deleted: take it out of their `toolIds` first.",
    credential: sessionCredential,
    errors: "404 when the tool is not the tenant's. 409 when agents have it, naming them (the first ten)."
  })
)

const test = HttpApiEndpoint.post("test", "/:id/test", {
  params: { id: ToolId },
  payload: TestCallRequest,
  success: CallResult,
  error: NotFound
}).annotateMerge(
  operation({
    summary: "Test a tool",
    description:
      "Calls the tool once with the arguments given, as a run would (an inactive tool too), and answers what " +
      "the model would read (`output`), whether the call went well (`ok`, and `errorKind` when not) and the " +
      "exchange: for an `http` tool, every request sent (method, url, headers, body) and every answer received " +
      "(status, headers, body), each secret value replaced by `[secret NAME]`. The arguments are checked " +
      "against `parameters` first: invalid ones are an `invalid_arguments` outcome and nothing is sent. The " +
      "request's Idempotency-Key is `test-<uuid>:test`. An `agent` tool answers that it runs only inside a run.",
    credential: sessionCredential,
    errors:
      '400 when the body is not `{ "arguments": { ... } }`. 404 when the tool is not the tenant\'s. A call ' +
      "that fails (invalid arguments, a refused target, a timeout, a status other than 2xx) is a 200 with " +
      "`ok: false`."
  })
)

const refresh = HttpApiEndpoint.post("refresh", "/:id/refresh", {
  params: { id: ToolId },
  success: Tool.json,
  error: [NotFound, BadRequest]
}).annotateMerge(
  operation({
    summary: "List an MCP tool's server tools again",
    description:
      "Lists the tools of an `mcp` tool's server again (`tools/list`, every page) and stores them: their names, " +
      "descriptions and input schemas, and the name the model calls each by (`exposedAs`). A tool the server " +
      "added appears; one it removed is no longer offered.",
    credential: sessionCredential,
    errors:
      "400 when the tool is not an `mcp` tool, when the server cannot be reached or does not answer as an MCP " +
      "server (the detail names its failure), or when a name of `tools` is no longer among the server's. 404 " +
      "when the tool is not the tenant's."
  })
)

export const OAuthStart = Schema.Struct({
  authorizationUrl: Schema.String.annotate({
    description: "The authorization server's page the user's browser opens to approve the connection."
  })
})

export const OAuthStatus = Schema.Struct({
  status: Schema.Literals(["connected", "not_connected", "expired"]).annotate({
    description:
      "`connected`: the tool has a token (renewed before it expires when there is a refresh token); " +
      "`expired`: its token expired and could not be renewed, so it must be connected again; `not_connected`."
  }),
  authorizationServer: Schema.NullOr(Schema.String).annotate({ description: "The authorization server's issuer." }),
  scope: Schema.NullOr(Schema.String).annotate({ description: "The scope granted, as the authorization server said." }),
  expiresAt: Schema.NullOr(Schema.String).annotate({ description: "When the access token expires (ISO 8601)." }),
  connectedAt: Schema.NullOr(Schema.String).annotate({ description: "When the user last approved it (ISO 8601)." })
})

const notOAuth =
  "400 when the tool is not an `mcp` tool with `settings.auth` `oauth` (the detail says which). 404 when the " +
  "tool is not the tenant's."

const oauthStart = HttpApiEndpoint.post("oauthStart", "/:id/oauth/start", {
  params: { id: ToolId },
  success: OAuthStart,
  error: [NotFound, BadRequest]
}).annotateMerge(
  operation({
    summary: "Start an MCP tool's OAuth connection",
    description:
      "Discovers the authorization server of an `mcp` tool's server (its protected resource metadata, then the " +
      "authorization server's metadata), registers a client there when none is registered yet, and answers " +
      "the URL of the authorization request (PKCE S256, the server's URL as `resource`). The user approves it " +
      "in the browser, which comes back to `GET /api/mcp/oauth/callback` within 10 minutes " +
      "(docs/mcp.md#oauth). A body, if sent, is ignored.",
    credential: sessionCredential,
    errors: `${notOAuth} 400 too when discovery fails or the authorization server offers no client registration.`
  })
)

const oauthStatus = HttpApiEndpoint.get("oauthStatus", "/:id/oauth", {
  params: { id: ToolId },
  success: OAuthStatus,
  error: [NotFound, BadRequest]
}).annotateMerge(
  operation({
    summary: "Read an MCP tool's OAuth connection",
    description:
      "Whether the tool is connected, to which authorization server, with which scope and until when. Never a token.",
    credential: sessionCredential,
    errors: notOAuth
  })
)

const oauthDisconnect = HttpApiEndpoint.delete("oauthDisconnect", "/:id/oauth", {
  params: { id: ToolId },
  success: HttpApiSchema.NoContent,
  error: [NotFound, BadRequest]
}).annotateMerge(
  operation({
    summary: "Disconnect an MCP tool's OAuth connection",
    description: "Forgets the tool's tokens: its calls fail, asking to connect it, until it is connected again.",
    credential: sessionCredential,
    errors: notOAuth
  })
)

export class ToolsApi extends HttpApiGroup.make("tools")
  .add(list, create, get, update, remove, test, refresh, oauthStart, oauthStatus, oauthDisconnect)
  .middleware(SessionAuth)
  .prefix("/api/tools")
  .annotateMerge(
    OpenApi.annotations({
      title: "Tools",
      description:
        "Define the tools a tenant's agents may call: HTTP requests to the tenant's services, searches of its " +
        "knowledge bases, questions to its other agents, the tools of MCP servers."
    })
  ) {}

/** A parameter of the authorization server's redirect, as sent. */
const CallbackText = text(Schema.isMaxLength(4096))

const oauthCallback = HttpApiEndpoint.get("callback", "/callback", {
  query: {
    code: Schema.optionalKey(CallbackText),
    state: Schema.optionalKey(CallbackText),
    error: Schema.optionalKey(CallbackText),
    error_description: Schema.optionalKey(CallbackText)
  },
  success: HttpApiSchema.Empty(302).annotate({
    description:
      "To the dashboard: `/app/tools?tool=<id>&oauth=connected`, or `/app/tools?tool=<id>&oauth=error&detail=<why>`."
  })
}).annotateMerge(
  operation({
    summary: "Finish an MCP tool's OAuth connection",
    description:
      "Where the authorization server sends the user's browser back: the code is exchanged for tokens (PKCE), " +
      "which are stored sealed, the server's tools are listed with them, and the browser is redirected to the " +
      "dashboard's tools page, saying whether the tool is connected (docs/mcp.md#oauth).",
    credential: "No credential: the `state` of an authorization started within 10 minutes, good once.",
    errors:
      "Every failure (an unknown, used or stale state, a refusal of the authorization server) is a redirect with `oauth=error`."
  })
)

export class McpOAuthCallbackApi extends HttpApiGroup.make("mcpOAuth")
  .add(oauthCallback)
  .prefix("/api/mcp/oauth")
  .annotateMerge(
    OpenApi.annotations({
      title: "MCP OAuth",
      description: "The return of an `mcp` tool's OAuth authorization from the authorization server.",
      // A browser's redirect target (always a 302), not a route API clients call: kept out of the document.
      exclude: true
    })
  ) {}
