import * as HttpApiEndpoint from "effect/http-api/HttpApiEndpoint"
import * as HttpApiGroup from "effect/http-api/HttpApiGroup"
import * as HttpApiSchema from "effect/http-api/HttpApiSchema"
import * as OpenApi from "effect/http-api/OpenApi"
import { SessionAuth, sessionCredential } from "../Auth/Api.ts"
import { operation } from "../Domain/ApiDocs.ts"
import { ToolId } from "../Domain/Ids.ts"
import { managementEndpoints } from "../Domain/Management.ts"
import { PageOf } from "../Domain/Page.ts"
import { BadRequest, Conflict, NotFound, QuotaReached } from "../Domain/Problems.ts"
import { CallResult, TestCallRequest } from "./Call.ts"
import { Tool } from "./Tool.ts"

export const ToolList = PageOf(Tool.json)

const checked =
  "`parameters` must be a draft-07 JSON Schema of an object; an `http` tool's url may hold `{{args.NAME}}` in " +
  "its path and query only, naming properties of `parameters`, and its host must be one of `allowedHosts` and " +
  "pass the egress guard (no private, loopback, link-local or metadata address unless WEBHOOK_ALLOW_PRIVATE); " +
  "a `knowledge` tool's bases and an `agent` tool's agent must be the tenant's; an `mcp` tool's url passes the " +
  "same checks and its server must answer `tools/list`."

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

export class ToolsApi extends HttpApiGroup.make("tools")
  .add(list, create, get, update, remove, test, refresh)
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
