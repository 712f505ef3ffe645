import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Result from "effect/Result"
import { AgentsRepo } from "../Agents/Repo.ts"
import { Limits } from "../Billing/Limits.ts"
import { AppConfig } from "../Config.ts"
import type { TenantId, ToolId } from "../Domain/Ids.ts"
import type { PageRequest } from "../Domain/Page.ts"
import { Conflict, invalidFields, NotFound } from "../Domain/Problems.ts"
import { KnowledgeSearch } from "../Knowledge/Search.ts"
import * as Traced from "../Observability/Traced.ts"
import { Secrets } from "../Secrets/Secrets.ts"
import * as Guard from "../Webhooks/Guard.ts"
import { compileParameters } from "./JsonSchema.ts"
import { fillHeaders, headerSecrets, serverToolsOf } from "./Mcp.ts"
import { McpClient } from "./McpClient.ts"
import { McpOAuth, type OAuthTarget } from "./McpOAuth.ts"
import { McpStdio } from "./McpStdio.ts"
import { ToolsRepo } from "./Repo.ts"
import { argsOf, placeholders } from "./Template.ts"
import {
  type CreateTool,
  defaultPolicy,
  withoutNulls,
  type HttpSettings,
  type McpSettings,
  type McpStdioSettings,
  type ToolSettings,
  type ToolSettingsInput,
  type UpdateTool
} from "./Tool.ts"

const notFound = (id: string) => new NotFound({ detail: `No tool ${id}` })

/** What is wrong with a field of the payload, and where in it. */
interface Issue {
  readonly path: ReadonlyArray<string | number>
  readonly message: string
}

// A header name is an RFC 9110 token. Those the service sets on every call
// (and the hop-by-hop ones) are its own: a tool's could only break the call.
const headerNamePattern = /^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}$/
const reservedHeaders = new Set([
  "host",
  "content-length",
  "transfer-encoding",
  "connection",
  "keep-alive",
  "upgrade",
  "te",
  "trailer",
  "expect",
  "proxy-connection",
  "idempotency-key",
  "traceparent",
  "tracestate",
  "b3"
])

const mcpHeaders = new Set(["mcp-session-id", "mcp-protocol-version", "accept", "content-type"])

const headerIssues = (headers: Readonly<Record<string, string>>): ReadonlyArray<Issue> => {
  const seen = new Set<string>()
  return Object.keys(headers).flatMap((name): ReadonlyArray<Issue> => {
    const path = ["settings", "headers", name]
    const lower = name.toLowerCase()
    if (!headerNamePattern.test(name)) return [{ path, message: "Expected a header name: 1 to 64 token characters" }]
    if (reservedHeaders.has(lower)) return [{ path, message: `${name} is set by the service, not by a tool` }]
    if (seen.has(lower)) return [{ path, message: `${name} is given twice (header names ignore case)` }]
    seen.add(lower)
    return []
  })
}

/** A host as a URL's `hostname` has it: lower case, IPv4 in dotted decimal, without a final dot. */
const normalHost = (host: string) => new URL(`http://${host}/`).hostname.replace(/\.$/, "")

/** The properties of a JSON Schema of arguments: what `{{args.NAME}}` may name. */
const propertiesOf = (parameters: { readonly [key: string]: unknown }): ReadonlySet<string> => {
  const properties = parameters.properties
  return typeof properties === "object" && properties !== null && !Array.isArray(properties)
    ? new Set(Object.keys(properties))
    : new Set()
}

/**
 * The arguments an HTTP tool's url and body name that its parameters do not
 * have; none when the parameters are wrong themselves (`properties` undefined).
 */
const argIssues = (
  settings: Pick<HttpSettings, "url" | "body">,
  properties: ReadonlySet<string> | undefined
): ReadonlyArray<Issue> => {
  if (properties === undefined) return []
  return (["url", "body"] as const).flatMap((field) =>
    argsOf(settings[field] ?? "")
      .filter((name) => !properties.has(name))
      .slice(0, 1)
      .map((name) => ({
        path: ["settings", field],
        message: `{{args.${name}}} names no property of \`parameters\` (its \`properties\`)`
      }))
  )
}

/**
 * The url template's issues of form: placeholders only after its host, an
 * http(s) URL without credentials once they are filled, a host among
 * `allowedHosts`. The URL, filled, when there are none.
 */
const urlIssues = (settings: HttpSettings): Result.Result<URL, Issue> => {
  const path = ["settings", "url"]
  const template = settings.url.trim()
  const scheme = template.indexOf("://")
  const pathStart = template.slice(scheme + 3).search(/[/?#]/)
  const hostEnd = pathStart === -1 ? template.length : scheme + 3 + pathStart
  const first = placeholders(template)[0]
  if (scheme !== -1 && first !== undefined && first.index < hostEnd) {
    return Result.fail({ path, message: "Placeholders may appear only in the url's path and query: its host is fixed" })
  }
  let filled = template
  for (const found of placeholders(template)) filled = filled.replace(found.text, "x")
  const url = Guard.parseUrl(filled)
  if (Result.isFailure(url)) return Result.fail({ path, message: url.failure })
  const host = url.success.hostname.replace(/\.$/, "")
  if (!settings.allowedHosts.includes(host)) {
    return Result.fail({ path, message: `The url's host ${host} is not one of \`allowedHosts\`` })
  }
  return Result.succeed(url.success)
}

/** The server tools as a tool stores them, or the issue of a name of `tools` the server lacks. */
const selectServerTools = (
  listed: ReadonlyArray<unknown>,
  toolName: string,
  tools: McpSettings["tools"]
): Result.Result<McpSettings["serverTools"], Issue> => {
  const serverTools = serverToolsOf(listed, toolName, tools)
  if (tools !== "all") {
    const names = new Set(serverTools.map((tool) => tool.name))
    const missing = tools.findIndex((name) => !names.has(name))
    if (missing !== -1) {
      return Result.fail({
        path: ["settings", "tools", missing],
        message: `The MCP server has no tool ${JSON.stringify(tools[missing])}`
      })
    }
  }
  return Result.succeed(serverTools)
}

/** How long listing an MCP server's tools may take when a tool is saved or refreshed. */
const listTimeoutMs = 10_000

/** Tool definitions of a tenant (docs/tools.md). */
export class Tools extends Context.Service<Tools>()("agent-host/Tools", {
  make: Effect.gen(function* () {
    const repo = yield* ToolsRepo
    const agents = yield* AgentsRepo
    const knowledge = yield* KnowledgeSearch
    const guard = yield* Guard.EgressGuard
    /** Why the egress guard refuses `url` now, as the url's issue (none: it may be reached). */
    const refusedUrl = (url: URL) =>
      guard.check(url).pipe(
        Effect.match({
          onFailure: (why): ReadonlyArray<Issue> => [{ path: ["settings", "url"], message: why }],
          onSuccess: (): ReadonlyArray<Issue> => []
        })
      )
    const limits = yield* Limits
    const config = yield* AppConfig
    const secrets = yield* Secrets
    // Its own sessions, through this guard.
    const mcp = yield* McpClient.make
    // The operator's stdio servers: one process per server on this node, shared with the invoker.
    const stdio = yield* McpStdio
    const oauth = yield* McpOAuth

    /**
     * The server's tools, listed through the guard with the tool's headers
     * (their secrets filled), or the issue saying why they could not be.
     */
    const listServerTools = (
      tenantId: TenantId,
      toolName: string,
      settings: Pick<McpSettings, "url" | "headers" | "allowedHosts" | "tools">,
      // An OAuth tool's connection: its token is the credential, renewed on a 401 (McpOAuth.ts).
      oauthTarget?: OAuthTarget
    ): Effect.Effect<Result.Result<McpSettings["serverTools"], Issue>> =>
      Effect.gen(function* () {
        const resolved = yield* Effect.result(secrets.resolve(tenantId, headerSecrets(settings.headers)))
        if (Result.isFailure(resolved)) {
          return Result.fail({ path: ["settings", "headers"], message: resolved.failure.message })
        }
        const values = new Map([...resolved.success].map(([name, value]) => [name, Redacted.value(value)] as const))
        const now = yield* Clock.currentTimeMillis
        const listWith = (extra: Readonly<Record<string, string>>) =>
          mcp.listTools(
            {
              url: settings.url,
              allowedHosts: settings.allowedHosts,
              headers: { ...fillHeaders(settings.headers, values), ...extra }
            },
            {
              deadline: now + listTimeoutMs,
              timeoutMessage: `The MCP server did not answer within ${listTimeoutMs} ms`
            }
          )
        const listed = yield* Effect.result(
          oauthTarget === undefined
            ? listWith({})
            : oauth.withBearer(tenantId, oauthTarget, (token) => listWith({ authorization: `Bearer ${token}` }))
        )
        if (Result.isFailure(listed)) {
          return Result.fail({
            path: ["settings", "url"],
            message: `The MCP server's tools could not be listed: ${listed.failure.message}`
          })
        }
        return selectServerTools(listed.success, toolName, settings.tools)
      })

    /**
     * The settings of an `mcp` tool naming a stdio server (McpStdio.ts): one
     * the operator configured for this tenant, without the fields of an HTTP
     * server, its tools listed through its process when `list` (nothing else
     * is wrong).
     */
    const stdioSettings = (
      tenantId: TenantId,
      input: Extract<ToolSettingsInput, { readonly kind: "mcp" }>,
      server: string,
      toolName: string,
      list: boolean
    ) =>
      Effect.gen(function* () {
        const issues: Array<Issue> = []
        const sent = input as { readonly [field: string]: unknown }
        for (const field of ["url", "allowedHosts", "headers", "auth"]) {
          if (sent[field] !== undefined) {
            issues.push({
              path: ["settings", field],
              message: `Not accepted with \`server\`: the operator configures how a stdio server is started`
            })
          }
        }
        const available = stdio.availableTo(tenantId)
        if (!available.includes(server)) {
          issues.push({
            path: ["settings", "server"],
            message:
              `No MCP server ${JSON.stringify(server)} is configured for this tenant; ` +
              (available.length === 0 ? "none is" : `available: ${available.join(", ")}`)
          })
        }
        const tools = input.tools === undefined || input.tools === "all" ? ("all" as const) : [...new Set(input.tools)]
        let serverTools: McpStdioSettings["serverTools"] = []
        if (list && issues.length === 0) {
          const now = yield* Clock.currentTimeMillis
          const listed = yield* Effect.result(
            stdio.listTools(
              { server, tenantId },
              {
                deadline: now + listTimeoutMs,
                timeoutMessage: `The MCP server did not answer within ${listTimeoutMs} ms`
              }
            )
          )
          const selected = Result.isFailure(listed)
            ? Result.fail<Issue>({
                path: ["settings", "server"],
                message: `The MCP server's tools could not be listed: ${listed.failure.message}`
              })
            : selectServerTools(listed.success, toolName, tools)
          if (Result.isFailure(selected)) issues.push(selected.failure)
          else serverTools = selected.success
        }
        const settings: McpStdioSettings = {
          kind: "mcp",
          server,
          tools,
          serverTools,
          listedAt: new Date(yield* Clock.currentTimeMillis).toISOString()
        }
        return { issues, settings }
      })

    /** The issues of `parameters`, with their paths in the payload, or the names of its properties. */
    const checkParameters = (parameters: {
      readonly [key: string]: unknown
    }): { readonly issues: ReadonlyArray<Issue>; readonly properties: ReadonlySet<string> | undefined } =>
      Result.match(compileParameters(parameters), {
        onSuccess: () => ({ issues: [], properties: propertiesOf(parameters) }),
        onFailure: (problems) => ({
          issues: problems.map((problem) => ({ ...problem, path: ["parameters", ...problem.path] })),
          properties: undefined
        })
      })

    /**
     * The settings as stored (their defaults filled, hosts in normal form),
     * or every issue found: of form first, then what needs the tenant's data,
     * and last, only when nothing else is wrong, the egress guard's look at
     * the url's host (a name is resolved, every address checked).
     */
    const checkSettings = Traced.fn("Tools.checkSettings")(function* (
      tenantId: TenantId,
      input: ToolSettingsInput,
      parameters: ReturnType<typeof checkParameters>,
      toolName: string,
      // The tool saved before, if any: an OAuth tool lists its server's tools only once connected.
      existing?: { readonly id: ToolId; readonly refreshing: boolean }
    ) {
      const { properties } = parameters
      const issues = [...parameters.issues]
      let settings: ToolSettings
      switch (input.kind) {
        case "http": {
          const http: HttpSettings = {
            kind: "http",
            method: input.method,
            url: input.url.trim(),
            headers: input.headers ?? {},
            ...(input.body === undefined ? {} : { body: input.body }),
            allowedHosts: [...new Set(input.allowedHosts.map(normalHost))],
            followRedirects: input.followRedirects ?? false
          }
          settings = http
          issues.push(...headerIssues(http.headers), ...argIssues(http, properties))
          if (http.method === "GET" && http.body !== undefined) {
            issues.push({ path: ["settings", "body"], message: "A GET sends no body" })
          }
          const url = urlIssues(http)
          if (Result.isFailure(url)) issues.push(url.failure)
          else if (issues.length === 0) issues.push(...(yield* refusedUrl(url.success)))
          break
        }
        case "knowledge": {
          const ids = [...new Set(input.knowledgeIds)]
          const missing = new Set(yield* knowledge.missing(tenantId, ids))
          input.knowledgeIds.forEach((id, i) => {
            if (missing.has(id)) {
              issues.push({ path: ["settings", "knowledgeIds", i], message: `No knowledge base ${JSON.stringify(id)}` })
            }
          })
          settings = { kind: "knowledge", knowledgeIds: ids, topK: input.topK ?? config.knowledgeTopK }
          break
        }
        case "agent": {
          if (Option.isNone(yield* agents.findById(tenantId, input.agentId))) {
            issues.push({ path: ["settings", "agentId"], message: `No agent ${JSON.stringify(input.agentId)}` })
          }
          settings = { kind: "agent", agentId: input.agentId }
          break
        }
        case "mcp": {
          if (input.server !== undefined) {
            const stdio = yield* stdioSettings(tenantId, input, input.server, toolName, issues.length === 0)
            issues.push(...stdio.issues)
            settings = stdio.settings
            break
          }
          if (input.url === undefined || input.allowedHosts === undefined) {
            return yield* invalidFields([
              ...issues,
              ...(["url", "allowedHosts"] as const)
                .filter((field) => input[field] === undefined)
                .map((field) => ({
                  path: ["settings", field],
                  message:
                    field === "url"
                      ? "Expected `url` (an MCP server over HTTP) or `server` (a stdio server the operator configured)"
                      : "Expected the hosts the url may reach"
                }))
            ])
          }
          const wanted = {
            url: input.url.trim(),
            headers: input.headers ?? {},
            allowedHosts: [...new Set(input.allowedHosts.map(normalHost))],
            tools: input.tools === undefined || input.tools === "all" ? ("all" as const) : [...new Set(input.tools)],
            ...(input.auth === undefined ? {} : { auth: input.auth })
          }
          issues.push(...headerIssues(wanted.headers))
          if (wanted.auth === "oauth") {
            for (const name of Object.keys(wanted.headers)) {
              if (name.toLowerCase() === "authorization") {
                issues.push({
                  path: ["settings", "headers", name],
                  message: `${name} is the OAuth connection's with auth "oauth": leave it out, or use auth "headers"`
                })
              }
            }
          }
          // The transport's own headers (McpClient.ts): a tool's would break the session or the answer's format.
          for (const name of Object.keys(wanted.headers)) {
            if (mcpHeaders.has(name.toLowerCase())) {
              issues.push({
                path: ["settings", "headers", name],
                message: `${name} is set by the service, not by a tool`
              })
            }
          }
          const url = urlIssues({ ...wanted, kind: "http", method: "POST", followRedirects: false })
          if (Result.isFailure(url)) issues.push(url.failure)
          else if (issues.length === 0) issues.push(...(yield* refusedUrl(url.success)))
          let serverTools: McpSettings["serverTools"] = []
          const oauthTarget =
            wanted.auth === "oauth" && existing !== undefined
              ? { toolId: existing.id, toolName, url: wanted.url }
              : undefined
          // An OAuth tool not connected yet is saved without listing; refreshing it asks to connect it first.
          const unlisted =
            wanted.auth === "oauth" &&
            (oauthTarget === undefined || !(yield* oauth.isConnected(tenantId, oauthTarget.toolId, wanted.url)))
          if (unlisted && existing?.refreshing === true && issues.length === 0) {
            issues.push({
              path: ["settings", "auth"],
              message:
                "The tool's OAuth connection is not made: connect it first (POST /api/tools/{id}/oauth/start, " +
                "Tools → Connect in the dashboard)"
            })
          }
          if (issues.length === 0 && !unlisted) {
            const listed = yield* listServerTools(tenantId, toolName, wanted, oauthTarget)
            if (Result.isFailure(listed)) issues.push(listed.failure)
            else serverTools = listed.success
          }
          settings = {
            kind: "mcp",
            ...wanted,
            serverTools,
            listedAt: new Date(yield* Clock.currentTimeMillis).toISOString()
          }
          break
        }
      }
      if (issues.length > 0) return yield* invalidFields(issues)
      return settings
    })

    const list = (tenantId: TenantId, page: PageRequest) => repo.list(tenantId, page)

    const create = Traced.fn("Tools.create")(function* (tenantId: TenantId, input: CreateTool) {
      // An mcp tool's server tools each bring their schema: its own is not read.
      const parameters = input.parameters ?? (input.settings.kind === "mcp" ? { type: "object" } : undefined)
      if (parameters === undefined) {
        return yield* invalidFields([
          {
            path: ["parameters"],
            message: "Expected the JSON Schema of the arguments (only an mcp tool may leave it out)"
          }
        ])
      }
      const settings = yield* checkSettings(tenantId, input.settings, checkParameters(parameters), input.name)
      return yield* limits.admit(
        tenantId,
        "tools",
        repo.insert(tenantId, {
          ...input,
          parameters,
          settings,
          policy: withoutNulls({ ...defaultPolicy, ...input.policy })
        })
      )
    })

    const get = Traced.fn("Tools.get")(function* (tenantId: TenantId, id: ToolId) {
      const tool = yield* repo.findById(tenantId, id)
      if (Option.isNone(tool)) return yield* notFound(id)
      return tool.value
    })

    /**
     * Changes the fields sent; the settings and the parameters are checked
     * together, whichever of them is sent (an url naming an argument the new
     * parameters lack is refused).
     */
    const update = Traced.fn("Tools.update")(function* (tenantId: TenantId, id: ToolId, input: UpdateTool) {
      const { policy, settings: sent, ...fields } = input
      const existing = yield* get(tenantId, id)
      const parameters =
        input.parameters === undefined
          ? { issues: [], properties: propertiesOf(existing.parameters) }
          : checkParameters(input.parameters)
      let settings: ToolSettings | undefined
      const saved = { id, refreshing: false }
      if (sent !== undefined) {
        settings = yield* checkSettings(tenantId, sent, parameters, input.name ?? existing.name, saved)
      } else if (existing.settings.kind === "mcp" && input.name !== undefined && input.name !== existing.name) {
        // The names the model sees start with the tool's: listed again under the new one.
        const { serverTools: _, listedAt: __, ...kept } = existing.settings
        settings = yield* checkSettings(tenantId, kept, parameters, input.name, saved)
      } else {
        const issues = [
          ...parameters.issues,
          ...(existing.settings.kind === "http" ? argIssues(existing.settings, parameters.properties) : [])
        ]
        if (issues.length > 0) return yield* invalidFields(issues)
      }
      const tool = yield* repo.update(tenantId, id, {
        ...fields,
        ...(settings === undefined ? {} : { settings }),
        ...(policy === undefined ? {} : { policy: withoutNulls({ ...existing.policy, ...policy }) })
      })
      if (Option.isNone(tool)) return yield* notFound(id)
      return tool.value
    })

    /** Deletes the tool, unless agents have it: they would lose it without a word. */
    const remove = Traced.fn("Tools.remove")(function* (tenantId: TenantId, id: ToolId) {
      const shown = 10
      const users = yield* repo.usedBy(tenantId, id, shown)
      if (users.length > 0) {
        const names = users.map((agent) => `${JSON.stringify(agent.name)} (${agent.id})`).join(", ")
        const more = users[0]!.total > shown ? ` and ${users[0]!.total - shown} more` : ""
        return yield* new Conflict({
          detail: `Agents have this tool: ${names}${more}. Take it out of their toolIds first.`
        })
      }
      if (!(yield* repo.remove(tenantId, id))) return yield* notFound(id)
    })

    /** Lists an `mcp` tool's server tools again (`POST /api/tools/{id}/refresh`). */
    const refresh = Traced.fn("Tools.refresh")(function* (tenantId: TenantId, id: ToolId) {
      const existing = yield* get(tenantId, id)
      if (existing.settings.kind !== "mcp") {
        return yield* invalidFields([
          { path: ["settings", "kind"], message: `Only an mcp tool is refreshed; this one is ${existing.kind}` }
        ])
      }
      const { serverTools: _, listedAt: __, ...kept } = existing.settings
      const settings = yield* checkSettings(
        tenantId,
        kept,
        { issues: [], properties: propertiesOf(existing.parameters) },
        existing.name,
        { id, refreshing: true }
      )
      // The name is not changed: no other tool can have it.
      const tool = yield* repo.update(tenantId, id, { settings }).pipe(Effect.catchTag("Conflict", Effect.die))
      if (Option.isNone(tool)) return yield* notFound(id)
      return tool.value
    })

    return { list, create, get, update, remove, refresh } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make).pipe(
    Layer.provide([
      ToolsRepo.layer,
      AgentsRepo.layer,
      KnowledgeSearch.layer,
      Limits.layer,
      Guard.EgressGuard.layer,
      Secrets.layer,
      McpStdio.layer,
      McpOAuth.layer
    ])
  )
}
