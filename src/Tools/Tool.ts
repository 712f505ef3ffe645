import * as Schema from "effect/Schema"
import * as Model from "effect/schema/Model"
import { DefinitionStatus } from "../Domain/Definition.ts"
import * as Entity from "../Domain/Entity.ts"
import { AgentId, ToolId } from "../Domain/Ids.ts"
import { boundedArray, isSafeTextValue, text, textRecord } from "../Domain/Input.ts"
import { maxTopK } from "../Knowledge/SearchApi.ts"
import { holds, maxRuleChars, problemOf } from "./ApprovalRule.ts"
import { bodyPlace, headerPlace, type Place, refusal, urlPlace } from "./Template.ts"

// A tool an agent may call (docs/tools.md): what the model sees (its name,
// description and the JSON Schema of its arguments), what a call does (its
// kind and that kind's settings) and the bounds of its calls (its policy).
// Only the shape is checked here; what needs the tenant's data, the network
// or a JSON Schema compiler is checked by the service (Tools.ts).

/** What the model calls the tool by: unique within the tenant. */
export const toolNamePattern = /^[a-zA-Z0-9_-]{1,64}$/

export const ToolName = text(
  Schema.isPattern(toolNamePattern, { message: "Expected 1 to 64 letters, digits, `_` or `-`" })
).annotate({ description: "What the model calls the tool by: unique among the tenant's tools." })

export const maxDescriptionChars = 4_000

export const ToolDescription = text(
  Schema.isMinLength(1, { message: "Expected a non-empty description" }),
  Schema.isMaxLength(maxDescriptionChars)
).annotate({ description: "What the tool does and when to use it: the model reads it to decide." })

export const ToolKind = Schema.Literals(["http", "knowledge", "agent", "mcp"])
export type ToolKind = typeof ToolKind.Type

// ---------------------------------------------------------------------------
// Parameters: a JSON Schema
// ---------------------------------------------------------------------------

/** The most characters of JSON, and levels of nesting, a tool's `parameters` may have. */
export const maxParametersChars = 32_768
export const maxParametersDepth = 32

const isPlainObject = (value: unknown): value is { readonly [key: string]: unknown } =>
  typeof value === "object" && value !== null && !Array.isArray(value)

const unsafeText = "Expected text without NUL characters or unpaired UTF-16 surrogates"

/**
 * Why a JSON value may not be a tool's parameters, before it is compiled: not
 * an object, too deep, too large, or holding text Postgres would not store as
 * sent (Domain/Input.ts) or a `__proto__` key, which would read or replace
 * what objects inherit wherever the schema is copied. Walked without
 * recursion, so that no nesting, however deep, costs more than the bound.
 */
const parametersIssue = (input: unknown): Schema.FilterOutput => {
  if (!isPlainObject(input)) return "Expected a JSON Schema: an object"
  const pending: Array<readonly [unknown, ReadonlyArray<string | number>]> = [[input, []]]
  while (pending.length > 0) {
    const [value, path] = pending.pop()!
    if (typeof value === "string") {
      if (!isSafeTextValue(value)) return { path, issue: unsafeText }
    } else if (typeof value === "object" && value !== null) {
      if (path.length >= maxParametersDepth) {
        return { path, issue: `Expected at most ${maxParametersDepth} levels of nesting` }
      }
      if (Array.isArray(value)) value.forEach((item, i) => pending.push([item, [...path, i]]))
      else {
        for (const [key, item] of Object.entries(value)) {
          if (!isSafeTextValue(key)) return { path: [...path, key], issue: unsafeText }
          if (key === "__proto__") return { path, issue: "Expected no `__proto__` key" }
          pending.push([item, [...path, key]])
        }
      }
    }
  }
  const chars = JSON.stringify(input).length
  return chars <= maxParametersChars || `Expected at most ${maxParametersChars} characters of JSON, not ${chars}`
}

/** The JSON Schema of a tool's arguments, as stored and shown. */
export const JsonSchemaObject = Schema.Record(Schema.String, Schema.Unknown).annotate({
  description:
    'The JSON Schema (draft-07) of the arguments: an object schema (`"type": "object"`). The model reads it to ' +
    "form a call, and every call's arguments are checked against it."
})

/** The most keywords a tool's `parameters` may have at its root. */
export const maxParametersKeywords = 64

/**
 * The JSON Schema as a client sends it: an object of at most
 * `maxParametersKeywords` keys, refused whole otherwise, then walked within
 * its bounds.
 */
export const ParametersInput = textRecord(Schema.Unknown, { max: maxParametersKeywords })
  .check(Schema.makeFilter(parametersIssue, { expected: "a JSON Schema object" }))
  .annotate({
    description:
      'A JSON Schema (draft-07) with `"type": "object"`, at most ' +
      `${maxParametersChars} characters of JSON and ${maxParametersDepth} levels of nesting.`
  })

// ---------------------------------------------------------------------------
// Policy
// ---------------------------------------------------------------------------

/** Each bound of a tool's calls: its range and its default (docs/tools.md#policy). */
export const policyBounds = {
  timeoutMs: { minimum: 100, maximum: 120_000, default: 10_000 },
  maxOutputBytes: { minimum: 1_024, maximum: 1_048_576, default: 16_384 },
  maxCallsPerRun: { minimum: 1, maximum: 100, default: 10 }
} as const

export const defaultPolicy = {
  timeoutMs: policyBounds.timeoutMs.default,
  maxOutputBytes: policyBounds.maxOutputBytes.default,
  maxCallsPerRun: policyBounds.maxCallsPerRun.default
}

const described = {
  timeoutMs: "Milliseconds one call may take",
  maxOutputBytes: "Bytes of a call's result the model sees; a longer result is cut, with a marker",
  maxCallsPerRun: "Calls of this tool one chat turn, execution or team run may make"
} as const

const policyField = (field: keyof typeof policyBounds) => {
  const { default: value, ...range } = policyBounds[field]
  return Schema.Int.check(Schema.isBetween(range)).annotate({
    description: `${described[field]}: ${range.minimum} to ${range.maximum} (default ${value}).`
  })
}

/** The bounds of how long an approval may wait for a decision (docs/approvals.md). */
export const approvalTimeoutBounds = { minimum: 1_000, maximum: 604_800_000, default: 86_400_000 } as const

const ApprovalWhen = Schema.Struct({
  when: text(
    Schema.makeFilter<string>((value) => problemOf(value) ?? true, {
      expected: "a rule over the arguments, such as `amount > 100`"
    })
  ).annotate({
    description:
      "A condition on the call's arguments (docs/approvals.md#rules): `=`, `!=`, `>`, `>=`, `<`, `<=`, " +
      '`starts_with`, `ends_with`, `contains`, `and`, `or`, `not`, parentheses, literals ("text", 12.5, true, ' +
      `null) and dotted paths into the arguments; at most ${maxRuleChars} characters.`
  })
})

export const ToolApproval = Schema.Union([Schema.Literals(["never", "always"]), ApprovalWhen]).annotate({
  description:
    'Whether a call in an execution or a team run waits for a human\'s decision first: "never" (default), ' +
    '"always", or `{ "when": "<rule>" }` when the rule holds for its arguments.'
})
export type ToolApproval = typeof ToolApproval.Type

export const ApprovalOnExpiry = Schema.Literals(["reject", "approve"])

export const approvalFields = {
  // Absent (every tool saved before approvals): "never".
  approval: Schema.optionalKey(ToolApproval),
  approvalTimeoutMs: Schema.optionalKey(
    Schema.Int.check(
      Schema.isBetween({ minimum: approvalTimeoutBounds.minimum, maximum: approvalTimeoutBounds.maximum })
    ).annotate({
      description:
        `Milliseconds an approval waits for a decision: ${approvalTimeoutBounds.minimum} to ` +
        `${approvalTimeoutBounds.maximum} (default ${approvalTimeoutBounds.default}, a day).`
    })
  ),
  approvalOnExpiry: Schema.optionalKey(
    ApprovalOnExpiry.annotate({
      description: 'What an approval nobody decided in time becomes: "reject" (default) or "approve".'
    })
  )
}

export const ToolPolicy = Schema.Struct({
  timeoutMs: policyField("timeoutMs"),
  maxOutputBytes: policyField("maxOutputBytes"),
  maxCallsPerRun: policyField("maxCallsPerRun"),
  ...approvalFields
})
export type ToolPolicy = typeof ToolPolicy.Type

const nullable = <S extends Schema.Top>(field: Schema.optionalKey<S>) =>
  Schema.optionalKey(
    Schema.NullOr(field.schema).annotate({
      description: `${field.schema.ast.annotations?.description ?? ""} null: removed, the tenant's default applies.`
    })
  )

/** The approval fields as a client sends them: `null` removes one (`withoutNulls`). */
export const approvalFieldsInput = {
  approval: nullable(approvalFields.approval),
  approvalTimeoutMs: nullable(approvalFields.approvalTimeoutMs),
  approvalOnExpiry: nullable(approvalFields.approvalOnExpiry)
}

/** `policy` with the fields sent as `null` removed. */
export const withoutNulls = <A extends Record<string, unknown>>(policy: A) =>
  Object.fromEntries(Object.entries(policy).filter(([, value]) => value !== null)) as {
    [K in keyof A]: Exclude<A[K], null>
  }

/** The policy as a client sends it: each bound left out keeps its default (on create) or its value (on update). */
export const ToolPolicyInput = Schema.Struct({
  timeoutMs: Schema.optionalKey(ToolPolicy.fields.timeoutMs),
  maxOutputBytes: Schema.optionalKey(ToolPolicy.fields.maxOutputBytes),
  maxCallsPerRun: Schema.optionalKey(ToolPolicy.fields.maxCallsPerRun),
  ...approvalFieldsInput
})

/** What a tool's policy says of approvals, its defaults filled in. */
export const approvalPolicy = (policy: Pick<ToolPolicy, "approval" | "approvalTimeoutMs" | "approvalOnExpiry">) => ({
  approval: policy.approval ?? "never",
  timeoutMs: policy.approvalTimeoutMs ?? approvalTimeoutBounds.default,
  onExpiry: policy.approvalOnExpiry ?? "reject"
})

// The arguments as a call reads them (Invoke.ts): a model may send them as a JSON string.
const asArguments = (raw: unknown): unknown => {
  if (typeof raw !== "string") return raw ?? {}
  if (raw.trim() === "") return {}
  try {
    return JSON.parse(raw)
  } catch {
    return raw
  }
}

/** Whether a call of a tool with `policy`, with `args`, waits for a human's decision. */
export const needsApproval = (policy: ToolPolicy, args: unknown): boolean => {
  const approval = policy.approval ?? "never"
  return approval === "never" ? false : approval === "always" ? true : holds(approval.when, asArguments(args))
}

// ---------------------------------------------------------------------------
// Settings of each kind
// ---------------------------------------------------------------------------

export const httpMethods = ["GET", "POST", "PUT", "PATCH", "DELETE"] as const
export const HttpMethod = Schema.Literals(httpMethods)

/** The most each setting may hold (docs/tools.md#kinds). */
export const settingsBounds = {
  urlChars: 2_048,
  headers: 32,
  headerValueChars: 4_096,
  bodyChars: 32_000,
  allowedHosts: 16,
  knowledgeBases: 8
} as const

/** A template holding only the placeholders `place` allows. */
const template = (place: Place) =>
  Schema.makeFilter<string>((value) => refusal(value, place) ?? true, {
    expected: `a template with only the placeholders allowed in ${place.name}`
  })

const UrlTemplate = text(
  Schema.isMinLength(1, { message: "Expected a URL" }),
  Schema.isMaxLength(settingsBounds.urlChars, {
    message: `Expected a URL of at most ${settingsBounds.urlChars} characters`
  }),
  template(urlPlace)
).annotate({
  description:
    "The http(s) URL called, a template: `{{args.NAME}}` in its path and query stands for an argument, " +
    "URL-encoded. Its host is fixed, one of `allowedHosts`, and checked by the egress guard when saved."
})

const HeaderValue = text(
  Schema.isMaxLength(settingsBounds.headerValueChars),
  // biome-ignore lint/suspicious/noControlCharactersInRegex: the pattern exists to refuse control characters
  Schema.isPattern(/^[^\u0000-\u0008\u000a-\u001f\u007f]*$/, {
    message: "Expected no control characters (but tab) in a header value"
  }),
  template(headerPlace)
)

const BodyTemplate = text(Schema.isMaxLength(settingsBounds.bodyChars), template(bodyPlace)).annotate({
  description:
    "The request body, a template over `{{args.NAME}}` (the argument as JSON) and `{{secrets.NAME}}`. " +
    "Left out: the arguments as a JSON object (none for GET and DELETE). A GET has no body."
})

/** Whether a string is a host as a URL writes it: a name, an IPv4 address or an IPv6 one in brackets; no port. */
const isHost = (value: string) => {
  try {
    const url = new URL(`http://${value}/`)
    return url.hostname !== "" && url.port === "" && url.username === "" && url.pathname === "/" && url.search === ""
  } catch {
    return false
  }
}

const HostName = text(
  Schema.isMinLength(1, { message: "Expected a host name" }),
  Schema.isMaxLength(253),
  Schema.makeFilter<string>((value) => isHost(value) || "Expected a host name (no scheme, port or path)", {
    expected: "a host name"
  })
)

export const HttpSettings = Schema.Struct({
  kind: Schema.Literal("http"),
  method: HttpMethod,
  url: Schema.String,
  headers: Schema.Record(Schema.String, Schema.String),
  body: Schema.optionalKey(Schema.String),
  allowedHosts: Schema.Array(Schema.String),
  followRedirects: Schema.Boolean
}).annotate({ description: "An HTTP request to one of the tenant's services." })

export const HttpSettingsInput = Schema.Struct({
  kind: Schema.Literal("http"),
  method: HttpMethod,
  url: UrlTemplate,
  headers: Schema.optionalKey(
    textRecord(HeaderValue, { max: settingsBounds.headers }).annotate({
      description:
        "Header names and values sent with every call (default none); a value may use `{{secrets.NAME}}`. " +
        "Headers the service sets itself (Host, Content-Length, Idempotency-Key...) may not be given."
    })
  ),
  body: Schema.optionalKey(BodyTemplate),
  allowedHosts: boundedArray(HostName, {
    min: 1,
    max: settingsBounds.allowedHosts,
    tooFew: "Expected at least one host",
    tooMany: `Expected at most ${settingsBounds.allowedHosts} hosts`,
    description: "The hosts a call may reach: the url's host, and those a followed redirect may go to."
  }),
  followRedirects: Schema.optionalKey(
    Schema.Boolean.annotate({ description: "Whether a redirect to one of `allowedHosts` is followed (default false)." })
  )
})

export const KnowledgeSettings = Schema.Struct({
  kind: Schema.Literal("knowledge"),
  knowledgeIds: Schema.Array(Schema.String),
  topK: Schema.Int
}).annotate({ description: "A search of the tenant's knowledge bases, answered with numbered sources." })

export const KnowledgeSettingsInput = Schema.Struct({
  kind: Schema.Literal("knowledge"),
  knowledgeIds: boundedArray(text(Schema.isMinLength(1), Schema.isMaxLength(64)), {
    min: 1,
    max: settingsBounds.knowledgeBases,
    tooFew: "Expected at least one knowledge base",
    tooMany: `Expected at most ${settingsBounds.knowledgeBases} knowledge bases`,
    description: "Ids of the tenant's knowledge bases searched."
  }),
  topK: Schema.optionalKey(
    Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: maxTopK })).annotate({
      description: `How many chunks a search gives, 1 to ${maxTopK} (default KNOWLEDGE_TOP_K).`
    })
  )
})

export const AgentSettings = Schema.Struct({
  kind: Schema.Literal("agent"),
  agentId: Schema.String
}).annotate({ description: "A message to another agent of the tenant, answered with its reply." })

export const AgentSettingsInput = Schema.Struct({
  kind: Schema.Literal("agent"),
  agentId: AgentId.check(Schema.isMaxLength(64))
})

/** The most server tools an `mcp` tool keeps from a listing, and the most it may name in `tools`. */
export const maxServerTools = 128

/** A tool of an MCP server, as listed when the `mcp` tool was saved or refreshed (docs/mcp.md#agents-use-mcp-servers). */
export const McpServerTool = Schema.Struct({
  name: Schema.String.annotate({ description: "The server's name for the tool." }),
  description: Schema.String,
  inputSchema: JsonSchemaObject,
  exposedAs: Schema.NullOr(Schema.String).annotate({
    description:
      "The name the model calls it by (`<toolName>__<serverToolName>`), or null when it is not exposed: not " +
      "among `tools`, a name that does not fit, or an input schema that is not accepted (`reason`)."
  }),
  reason: Schema.optionalKey(Schema.String)
})
export type McpServerTool = typeof McpServerTool.Type

/** How an `mcp` tool's calls are authorized (docs/mcp.md#oauth). */
export const McpAuth = Schema.Literals(["headers", "oauth"]).annotate({
  description:
    '"headers" (default): the credentials, if any, are the `headers`, which may use `{{secrets.NAME}}`. "oauth": ' +
    "an OAuth 2.1 connection to the server's authorization server, made in the dashboard " +
    "(`POST /api/tools/{id}/oauth/start`); `headers` may then not set Authorization."
})

export const McpSettings = Schema.Struct({
  kind: Schema.Literal("mcp"),
  url: Schema.String,
  headers: Schema.Record(Schema.String, Schema.String),
  // Absent on tools saved before OAuth: "headers".
  auth: Schema.optionalKey(McpAuth),
  allowedHosts: Schema.Array(Schema.String),
  tools: Schema.Union([Schema.Literal("all"), Schema.Array(Schema.String)]),
  serverTools: Schema.Array(McpServerTool),
  listedAt: Schema.String.annotate({ description: "When the server's tools were last listed (ISO 8601)." })
}).annotate({ description: "The tools of an MCP server (Streamable HTTP), each one tool the model sees." })
export type McpSettings = typeof McpSettings.Type

/**
 * An `mcp` tool of a server the operator runs as a local process (stdio,
 * docs/mcp.md#stdio-servers): named, never defined, by the tenant.
 */
export const McpStdioSettings = Schema.Struct({
  kind: Schema.Literal("mcp"),
  server: Schema.String.annotate({ description: "The name of a stdio MCP server the operator configured." }),
  tools: McpSettings.fields.tools,
  serverTools: Schema.Array(McpServerTool),
  listedAt: McpSettings.fields.listedAt
}).annotate({ description: "The tools of an MCP server the operator runs (stdio), each one tool the model sees." })
export type McpStdioSettings = typeof McpStdioSettings.Type

/** A stdio server's name, in the operator's file and in a tool's `settings.server`. */
export const stdioServerNamePattern = /^[a-zA-Z0-9_-]{1,64}$/

const McpStdioServerName = text(
  Schema.isPattern(stdioServerNamePattern, { message: "Expected a server name: 1 to 64 letters, digits, `_` or `-`" })
).annotate({
  description:
    "The name of a stdio MCP server the operator configured (MCP_STDIO_SERVERS_FILE), instead of `url`: " +
    "`url`, `allowedHosts` and `headers` are then not given."
})

const McpUrl = text(
  Schema.isMinLength(1, { message: "Expected a URL" }),
  Schema.isMaxLength(settingsBounds.urlChars, {
    message: `Expected a URL of at most ${settingsBounds.urlChars} characters`
  }),
  Schema.makeFilter<string>((value) => !value.includes("{{") || "Expected a URL without placeholders", {
    expected: "a URL without placeholders"
  })
).annotate({
  description:
    "The MCP server's Streamable HTTP endpoint (an http(s) URL). Its host must be one of `allowedHosts` and " +
    "pass the egress guard."
})

export const McpSettingsInput = Schema.Struct({
  kind: Schema.Literal("mcp"),
  // Either `url` (with `allowedHosts`), or `server`: the service says which is missing or too many.
  url: Schema.optionalKey(McpUrl),
  server: Schema.optionalKey(McpStdioServerName),
  headers: HttpSettingsInput.fields.headers,
  auth: Schema.optionalKey(McpAuth),
  allowedHosts: Schema.optionalKey(
    boundedArray(HostName, {
      min: 1,
      max: settingsBounds.allowedHosts,
      tooFew: "Expected at least one host",
      tooMany: `Expected at most ${settingsBounds.allowedHosts} hosts`,
      description: "The hosts the server may be reached at: the url's host. Required with `url`."
    })
  ),
  tools: Schema.optionalKey(
    Schema.Union([
      Schema.Literal("all"),
      boundedArray(text(Schema.isMinLength(1), Schema.isMaxLength(128)), {
        min: 1,
        max: maxServerTools,
        tooFew: "Expected at least one tool name",
        tooMany: `Expected at most ${maxServerTools} tool names`,
        description: "Names of the server's tools to expose."
      })
    ]).annotate({ description: 'Which of the server\'s tools the model sees: "all" (default) or a list of names.' })
  )
})

/** What a call does, by kind, as stored and shown. */
export const ToolSettings = Schema.Union([
  HttpSettings,
  KnowledgeSettings,
  AgentSettings,
  McpSettings,
  McpStdioSettings
])
export type ToolSettings = typeof ToolSettings.Type
export type HttpSettings = typeof HttpSettings.Type

/** The settings as a client sends them: `kind` says which of the shapes. */
export const ToolSettingsInput = Schema.Union([
  HttpSettingsInput,
  KnowledgeSettingsInput,
  AgentSettingsInput,
  McpSettingsInput
]).annotate({
  description: "What a call does: `kind` (`http`, `knowledge`, `agent` or `mcp`) and that kind's settings."
})
export type ToolSettingsInput = typeof ToolSettingsInput.Type

// ---------------------------------------------------------------------------
// The entity
// ---------------------------------------------------------------------------

/** A tool: its row, its JSON, and what a client sends to create (`Tool.jsonCreate`) or update it (`Tool.jsonUpdate`). */
export class Tool extends Model.Class<Tool>("Tool")({
  id: Entity.id(ToolId),
  name: Entity.required(Schema.String, ToolName),
  description: Entity.required(Schema.String, ToolDescription),
  // Read from the settings, for lists; set by sending `settings`.
  kind: Model.Field({
    select: ToolKind,
    json: ToolKind.annotate({ description: "The settings' kind." })
  }),
  // Required on create but for an `mcp` tool, whose server tools bring their own (the service says so).
  parameters: Entity.optional(JsonSchemaObject, ParametersInput),
  settings: Entity.required(ToolSettings, ToolSettingsInput),
  // The defaults when omitted; on update, the bounds sent change and the others stay.
  policy: Entity.optional(ToolPolicy, ToolPolicyInput),
  status: Entity.withDefault(DefinitionStatus, "active"),
  createdAt: Entity.generated(Schema.Date),
  updatedAt: Entity.generated(Schema.Date)
}) {}

export type CreateTool = typeof Tool.jsonCreate.Type
export type UpdateTool = typeof Tool.jsonUpdate.Type
