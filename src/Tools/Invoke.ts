import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Result from "effect/Result"
import * as Crypto from "node:crypto"
import { AgentsRepo } from "../Agents/Repo.ts"
import type { TenantId } from "../Domain/Ids.ts"
import { toSource } from "../Knowledge/Grounding.ts"
import { KnowledgeSearch } from "../Knowledge/Search.ts"
import * as Traced from "../Observability/Traced.ts"
import { Secrets } from "../Secrets/Secrets.ts"
import * as Guard from "../Webhooks/Guard.ts"
import type { CallErrorKind, Exchange, HttpHop, SentRequest } from "./Call.ts"
import { compileParameters, type Problem, type Validate } from "./JsonSchema.ts"
import { fillHeaders, headerSecrets, modelTools, resultText, serverToolOf } from "./Mcp.ts"
import { McpClient } from "./McpClient.ts"
import { McpOAuth, oauthTargetOf } from "./McpOAuth.ts"
import { McpStdio } from "./McpStdio.ts"
import { type Found, placeholders } from "./Template.ts"
import { type HttpSettings, type McpSettings, type McpStdioSettings, policyBounds, type Tool } from "./Tool.ts"

// One call of a tool (docs/tools.md#calling-a-tool): the arguments checked
// against the tool's `parameters`, then the call its kind makes, bounded by
// its policy's time. A call never fails: whatever goes wrong is an outcome
// the model reads (and may act on), with every secret value scrubbed.

export type { CallErrorKind, Exchange } from "./Call.ts"

/** The Idempotency-Key of a call's requests: the same on every attempt of the call, and no other call's. */
export const idempotencyKey = (ctx: Pick<CallContext, "runId" | "scope" | "callId">) =>
  ctx.scope === undefined ? `${ctx.runId}:${ctx.callId}` : `${ctx.runId}:${ctx.scope}:${ctx.callId}`

export interface CallContext {
  readonly tenantId: TenantId
  /** The run (execution id, team run id, chat turn id) and this call's id. */
  readonly runId: string
  readonly callId: string
  /**
   * Where in the run the call's loop is (a step id, a team turn), when the
   * run has several loops: models number calls per loop (`call_1` again in
   * the next step), so the Idempotency-Key is `${runId}:${scope}:${callId}`,
   * and `${runId}:${callId}` without one.
   */
  readonly scope?: string | undefined
  /** Ids of the agents asking, outermost first, the one calling this tool last. */
  readonly agentChain: ReadonlyArray<string>
  /**
   * How an `agent` tool asks another agent (given by the loop): `chain` is
   * `agentChain` with the agent asked appended, the chain of that agent's own
   * calls. Absent: agent tools answer a tool error saying they run only
   * inside a run.
   */
  readonly askAgent?:
    | ((agentId: string, message: string, chain: ReadonlyArray<string>) => Effect.Effect<string, string>)
    | undefined
}

export interface CallOutcome {
  readonly ok: boolean
  /**
   * Why not ok: a `CallErrorKind` ("invalid_arguments", "refused", "timeout",
   * "status", "error") when the invoker says; a string, so that the loop may
   * add kinds of its own for calls it refuses before any invocation.
   */
  readonly errorKind?: string | undefined
  /** The full result text (or the error message the model sees), every secret value scrubbed. */
  readonly output: string
  readonly durationMs: number
  /**
   * What was sent (secret values masked) and what came back, for the test
   * route and the dashboard; always set by the invoker, undefined only for
   * an outcome made without it (a call the loop refused).
   */
  readonly exchange: Exchange | undefined
}

/** An outcome as the invoker gives it: a kind of its own, and always the exchange. */
export interface InvokedOutcome extends CallOutcome {
  readonly errorKind?: CallErrorKind | undefined
  readonly exchange: Exchange
}

/** The most bytes of an HTTP answer read: the largest `maxOutputBytes` a policy may have. */
export const maxResponseBytes = policyBounds.maxOutputBytes.maximum
/** Redirects an HTTP call follows at most (with `followRedirects`). */
export const maxRedirects = 5
/** The most agents a chain of agent tools may hold: one asking, and two levels asked below it. */
export const maxAgentDepth = 3

export const userAgent = "agent-host-tools/1.0"

/** What a call gave, before its time and exchange are added. */
interface Done {
  readonly ok: boolean
  readonly errorKind?: CallErrorKind | undefined
  readonly output: string
}

const succeeded = (output: string): Done => ({ ok: true, output })
const failed = (errorKind: CallErrorKind, output: string): Done => ({ ok: false, errorKind, output })

// ---------------------------------------------------------------------------
// Arguments
// ---------------------------------------------------------------------------

type Arguments = { readonly [key: string]: unknown }

const isPlainObject = (value: unknown): value is Arguments =>
  typeof value === "object" && value !== null && !Array.isArray(value)

const excerpt = (text: string, max = 200) => (text.length <= max ? text : `${text.slice(0, max)}…`)

const describeValue = (value: unknown) =>
  Array.isArray(value) ? "an array" : value === null ? "null" : `a ${typeof value}`

/**
 * The arguments as an object, or why they are not one. A model that wrote
 * broken JSON is given its arguments as the text it wrote; none at all (no
 * text, null) is an empty object, which the schema then judges.
 */
const argumentsObject = (raw: unknown): Result.Result<Arguments, string> => {
  let value = raw
  if (typeof raw === "string") {
    if (raw.trim() === "") return Result.succeed({})
    try {
      value = JSON.parse(raw)
    } catch {
      return Result.fail(
        `The arguments are not valid JSON: ${JSON.stringify(excerpt(raw))}. Send them as a JSON object ` +
          "matching the tool's parameters."
      )
    }
  }
  if (value === undefined || value === null) return Result.succeed({})
  return isPlainObject(value)
    ? Result.succeed(value)
    : Result.fail(`The arguments must be a JSON object, not ${describeValue(value)}.`)
}

/** A path into the arguments as the model reads it: `arguments.items[0].id`. */
export const pathText = (path: ReadonlyArray<string | number>) =>
  path.reduce<string>(
    (text, segment) =>
      typeof segment === "number"
        ? `${text}[${segment}]`
        : /^[A-Za-z_$][\w$-]*$/.test(segment)
          ? `${text}.${segment}`
          : `${text}[${JSON.stringify(segment)}]`,
    "arguments"
  )

const invalidArguments = (tool: Tool, problems: ReadonlyArray<Problem>): Done =>
  failed(
    "invalid_arguments",
    `Invalid arguments for ${tool.name}:\n${problems.map((problem) => `- ${pathText(problem.path)}: ${problem.message}`).join("\n")}`
  )

// ---------------------------------------------------------------------------
// Templates
// ---------------------------------------------------------------------------

/** `template` with each placeholder replaced by what `value` gives for it. */
const fill = (template: string, value: (found: Found) => string) => {
  let filled = ""
  let at = 0
  for (const found of placeholders(template)) {
    filled += template.slice(at, found.index) + value(found)
    at = found.index + found.text.length
  }
  return filled + template.slice(at)
}

/** An argument as text in a URL (before encoding): strings as they are, other JSON as JSON, nothing as nothing. */
const urlText = (value: unknown) =>
  value === undefined || value === null
    ? ""
    : typeof value === "string"
      ? value
      : typeof value === "number" || typeof value === "boolean"
        ? String(value)
        : JSON.stringify(value)

// What URL parsing takes for `.` and `..` (WHATWG URL: `%2e` is a dot too).
const isDotSegment = (segment: string) => /^(\.|%2e){1,2}$/i.test(segment)

/**
 * The url with its arguments filled in, URL-encoded, or the problems of the
 * arguments that cannot be: text that cannot be encoded (an unpaired
 * surrogate), and a path segment an argument would make `.`, `..` or empty,
 * which would reach another path than the one the tool names.
 */
export const renderUrl = (template: string, args: Arguments): Result.Result<string, ReadonlyArray<Problem>> => {
  const problems: Array<Problem> = []
  const encoded = (found: Found) => {
    if (found.placeholder._tag !== "Arg") return found.text
    const name = found.placeholder.name
    try {
      return encodeURIComponent(urlText(args[name]))
    } catch {
      problems.push({ path: [name], message: "Expected text without unpaired UTF-16 surrogates" })
      return ""
    }
  }
  const scheme = template.indexOf("://")
  const afterHost = template.slice(scheme + 3).search(/[/?#]/)
  const pathStart = afterHost === -1 ? template.length : scheme + 3 + afterHost
  const rest = template.slice(pathStart)
  const queryAt = rest.search(/[?#]/)
  const path = queryAt === -1 ? rest : rest.slice(0, queryAt)
  const query = queryAt === -1 ? "" : rest.slice(queryAt)
  const segments = path.split("/").map((segment) => {
    const filled = fill(segment, encoded)
    const named = placeholders(segment).flatMap(({ placeholder }) =>
      placeholder._tag === "Arg" ? [placeholder.name] : []
    )
    if (named.length > 0) {
      const shape = fill(segment, () => "x")
      if (isDotSegment(filled) && !isDotSegment(shape)) {
        problems.push({
          path: [named[0]!],
          message: `Expected a value that does not make the path segment ${JSON.stringify(filled)}`
        })
      } else if (filled === "" && shape !== "") {
        problems.push({ path: [named[0]!], message: "Expected a non-empty value: it is a segment of the url's path" })
      }
    }
    return filled
  })
  const url = `${template.slice(0, pathStart)}${segments.join("/")}${fill(query, encoded)}`
  return problems.length > 0 ? Result.fail(problems) : Result.succeed(url)
}

/** A string's content as a JSON string literal has it, without the quotes. */
const jsonEscaped = (value: string) => JSON.stringify(value).slice(1, -1)

/** The secrets a tool's headers and body name, once each. */
export const secretsOf = (settings: Pick<HttpSettings, "headers" | "body">): ReadonlyArray<string> => [
  ...new Set(
    [...Object.values(settings.headers), settings.body ?? ""].flatMap((template) =>
      placeholders(template).flatMap(({ placeholder }) => (placeholder._tag === "Secret" ? [placeholder.name] : []))
    )
  )
]

/**
 * Replaces every secret value in a text with `[secret NAME]`: the value
 * itself and the forms a request or an echo of it would carry it in (JSON
 * string, URL-encoded, form-encoded, base64 and base64url). One pass, longest
 * form first, so no marker is rewritten.
 */
export const scrubberOf = (secrets: ReadonlyMap<string, string>): ((text: string) => string) => {
  const markers = new Map<string, string>()
  for (const [name, value] of secrets) {
    const marker = `[secret ${name}]`
    const bytes = Buffer.from(value, "utf8")
    const forms = [
      value,
      jsonEscaped(value),
      bytes.toString("base64"),
      bytes.toString("base64").replace(/=+$/, ""),
      bytes.toString("base64url")
    ]
    try {
      const uri = encodeURIComponent(value)
      forms.push(uri, uri.replace(/%20/g, "+"))
    } catch {
      // A value with an unpaired surrogate has no URL-encoded form.
    }
    for (const form of forms) if (form !== "" && !markers.has(form)) markers.set(form, marker)
  }
  if (markers.size === 0) return (text) => text
  const pattern = new RegExp(
    [...markers.keys()]
      .sort((a, b) => b.length - a.length)
      .map((form) => form.replace(/[.*+?^${}()|[\]\\/-]/g, "\\$&"))
      .join("|"),
    "g"
  )
  // A text cut at a read limit may end inside a value: its start is masked too.
  const forms = [...markers.keys()].sort((a, b) => b.length - a.length)
  const maskTail = (text: string) => {
    for (const form of forms) {
      // The longest end of the text that starts the value: the earliest start that matches.
      for (let at = Math.max(0, text.length - form.length + 1); at <= text.length - minMaskedPrefix; at++) {
        if (text.charCodeAt(at) === form.charCodeAt(0) && form.startsWith(text.slice(at))) {
          return `${text.slice(0, at)}${markers.get(form)}`
        }
      }
    }
    return text
  }
  return (text) => maskTail(text.replace(pattern, (found) => markers.get(found) ?? found))
}

// Shorter prefixes of a value are too common in ordinary text to mask.
const minMaskedPrefix = 6

// A header value Node sends as given: no control characters but tab, nothing past Latin-1.
const isHeaderValue = (value: string) => /^[\t\u0020-\u007e\u0080-\u00ff]*$/.test(value)

const redirectStatuses = new Set([301, 302, 303, 307, 308])

/** A traceparent for a request sent while no span is exported: the current span's, or a new unsampled trace. */
const traceparentOf = Effect.map(Effect.option(Effect.currentParentSpan), (span) =>
  Option.isSome(span)
    ? `00-${span.value.traceId.padStart(32, "0")}-${span.value.spanId}-${span.value.sampled ? "01" : "00"}`
    : `00-${Crypto.randomBytes(16).toString("hex")}-${Crypto.randomBytes(8).toString("hex")}-00`
)

const normalHost = (url: URL) => url.hostname.toLowerCase().replace(/\.$/, "")

// ---------------------------------------------------------------------------
// The service
// ---------------------------------------------------------------------------

/** Compiled `parameters` kept, by tool id, the most recently used first out last. */
const compiledCapacity = 1_000

/** Calls tools: one call at a time, whatever its kind (docs/tools.md#calling-a-tool). */
export class ToolInvoker extends Context.Service<ToolInvoker>()("agent-host/ToolInvoker", {
  make: Effect.gen(function* () {
    const guard = yield* Guard.EgressGuard
    const secrets = yield* Secrets
    const knowledge = yield* KnowledgeSearch
    const agents = yield* AgentsRepo
    // Its own sessions, through this guard.
    const mcp = yield* McpClient.make
    // The operator's stdio servers: one process per server on this node, shared with Tools.
    const stdio = yield* McpStdio
    const oauth = yield* McpOAuth

    // A tool's schema is compiled once per version (its id and updatedAt); a new version replaces it. The model
    // tools of an mcp tool share its id: each is kept by its name too.
    const compiled = new Map<
      string,
      { readonly updatedAt: number; readonly validate: ReturnType<typeof compileParameters> }
    >()
    const validatorOf = (tool: Tool): Result.Result<Validate, ReadonlyArray<Problem>> => {
      const updatedAt = tool.updatedAt.getTime()
      const key = tool.settings.kind === "mcp" ? `${tool.id}/${tool.name}` : tool.id
      const kept = compiled.get(key)
      compiled.delete(key)
      const entry =
        kept !== undefined && kept.updatedAt === updatedAt
          ? kept
          : { updatedAt, validate: compileParameters(tool.parameters) }
      compiled.set(key, entry)
      if (compiled.size > compiledCapacity) compiled.delete(compiled.keys().next().value!)
      return entry.validate
    }

    // --- http ----------------------------------------------------------------

    const callHttp = (
      tool: Tool,
      settings: HttpSettings,
      args: Arguments,
      ctx: CallContext,
      hops: Array<HttpHop>,
      deadline: number
    ): Effect.Effect<Done> => {
      // Until the secrets are read there is nothing to scrub; then every output is scrubbed once, at the end.
      let scrub = (text: string) => text
      return Effect.gen(function* () {
        const rendered = renderUrl(settings.url, args)
        if (Result.isFailure(rendered)) return invalidArguments(tool, rendered.failure)
        const parsed = Guard.parseUrl(rendered.success)
        if (Result.isFailure(parsed)) return failed("refused", `Refused: ${parsed.failure}`)

        const names = secretsOf(settings)
        const resolved = yield* Effect.result(secrets.resolve(ctx.tenantId, names))
        if (Result.isFailure(resolved)) {
          return failed("error", `${resolved.failure.message}: the tool's headers or body name it. Nothing was sent.`)
        }
        const values = new Map([...resolved.success].map(([name, value]) => [name, Redacted.value(value)] as const))
        scrub = scrubberOf(values)
        const secretValue = (found: Found) =>
          found.placeholder._tag === "Secret" ? (values.get(found.placeholder.name) ?? "") : found.text

        const headers: Record<string, string> = {}
        for (const [name, template] of Object.entries(settings.headers)) {
          const value = fill(template, secretValue)
          if (!isHeaderValue(value)) {
            return failed(
              "error",
              `The header ${name} cannot be sent: a secret it names holds a control character or a character ` +
                "past Latin-1. Nothing was sent."
            )
          }
          headers[name.toLowerCase()] = value
        }
        let method: string = settings.method
        let body: string | undefined =
          settings.body !== undefined
            ? fill(settings.body, (found) =>
                found.placeholder._tag === "Arg"
                  ? JSON.stringify(args[found.placeholder.name] ?? null)
                  : found.placeholder._tag === "Secret"
                    ? jsonEscaped(values.get(found.placeholder.name) ?? "")
                    : found.text
              )
            : method === "GET" || method === "DELETE"
              ? undefined
              : JSON.stringify(args)
        if (method === "GET") body = undefined
        const common = {
          "user-agent": headers["user-agent"] ?? userAgent,
          "idempotency-key": idempotencyKey(ctx)
        }
        const traceparent = Traced.isExporting() ? undefined : yield* traceparentOf

        let url = parsed.success
        for (let hop = 0; ; hop++) {
          const host = normalHost(url)
          if (!settings.allowedHosts.includes(host)) {
            return failed(
              "refused",
              `Refused: ${hop === 0 ? "the url's" : "the redirect's"} host ${host} is not one of the tool's allowedHosts`
            )
          }
          const target = yield* Effect.result(guard.check(url))
          if (Result.isFailure(target)) {
            return failed("refused", `Refused${hop === 0 ? "" : ` (redirect to ${url.href})`}: ${target.failure}`)
          }
          const sent: Record<string, string> = {
            ...headers,
            ...(body === undefined ? {} : { "content-type": headers["content-type"] ?? "application/json" }),
            ...common,
            ...(traceparent === undefined ? {} : { traceparent })
          }
          const shown = (sentHeaders: Readonly<Record<string, string>>): SentRequest => ({
            method,
            // A redirect's Location is the receiver's to write, and may echo a secret.
            url: scrub(url.href),
            headers: Object.fromEntries(Object.entries(sentHeaders).map(([name, value]) => [name, scrub(value)])),
            body: body === undefined ? null : scrub(body)
          })
          // Recorded before it is sent: a call cut short by its time still shows what went out.
          const at = hops.push({
            request: shown({
              ...sent,
              host: url.host,
              ...(body === undefined ? {} : { "content-length": String(Buffer.byteLength(body)) })
            }),
            response: null
          })
          const now = yield* Clock.currentTimeMillis
          const answer = yield* Effect.result(
            Guard.request({
              method,
              url,
              address: target.success.addresses[0]!,
              headers: sent,
              body,
              timeout: Duration.millis(Math.max(1, deadline - now)),
              timeoutMessage: `No answer within ${tool.policy.timeoutMs} ms (the tool's policy.timeoutMs)`,
              maxBody: maxResponseBytes,
              // A redirect's URL may carry a secret the receiver echoed: masked in the span too.
              shownUrl: scrub(Guard.spanUrl(url))
            })
          )
          if (Result.isFailure(answer)) {
            return failed(answer.failure.reason === "timeout" ? "timeout" : "error", answer.failure.message)
          }
          const response = answer.success
          hops[at - 1] = {
            request: shown(response.sentHeaders),
            response: {
              status: response.status,
              headers: Object.fromEntries(
                Object.entries(response.headers).map(([name, value]) => [name, scrub(value)])
              ),
              body: scrub(response.body),
              truncated: response.truncated
            }
          }
          const redirect = redirectStatuses.has(response.status) && response.location !== undefined
          if (redirect && settings.followRedirects) {
            if (hop >= maxRedirects)
              return failed("error", `More than ${maxRedirects} redirects: the last not followed`)
            let next: URL
            try {
              next = new URL(response.location!, url)
            } catch {
              return failed("error", `The redirect's Location is not a URL: ${JSON.stringify(response.location!)}`)
            }
            const checked = Guard.parseUrl(next.href)
            if (Result.isFailure(checked))
              return failed("refused", `Refused (redirect to ${next.href}): ${checked.failure}`)
            // As browsers do: 303 (and 301/302 of anything but GET) goes on as a GET without the body.
            if (response.status === 303 || ((response.status === 301 || response.status === 302) && method !== "GET")) {
              method = "GET"
              body = undefined
            }
            url = checked.success
            continue
          }
          const output = JSON.stringify({
            status: response.status,
            contentType: response.headers["content-type"] ?? null,
            ...(redirect ? { location: response.location } : {}),
            body: response.body,
            ...(response.truncated ? { truncated: true } : {})
          })
          return response.status >= 200 && response.status < 300 ? succeeded(output) : failed("status", output)
        }
      }).pipe(Effect.map((done) => ({ ...done, output: scrub(done.output) })))
    }

    // --- knowledge ------------------------------------------------------------

    const callKnowledge = (
      settings: { readonly knowledgeIds: ReadonlyArray<string>; readonly topK: number },
      query: string,
      ctx: CallContext
    ) =>
      Effect.map(
        knowledge.search({ tenantId: ctx.tenantId, knowledgeIds: settings.knowledgeIds, query, topK: settings.topK }),
        (found) => ({
          found: found.length,
          done: succeeded(
            found.length === 0
              ? `No results for ${JSON.stringify(query)}.`
              : found
                  .map(toSource)
                  .map((source, i) => `[${i + 1}] (${source.label})\n${source.content.trim()}`)
                  .join("\n\n")
          )
        })
      )

    // --- agent ----------------------------------------------------------------

    const callAgent = (agentId: string, message: string, ctx: CallContext) =>
      Effect.gen(function* () {
        if (ctx.agentChain.includes(agentId)) {
          return failed(
            "refused",
            `Refused: agent ${agentId} is already asking in this chain (${ctx.agentChain.join(" → ")}); an agent ` +
              "cannot reach itself through others"
          )
        }
        if (ctx.agentChain.length >= maxAgentDepth) {
          return failed(
            "refused",
            `Refused: agents may ask others at most ${maxAgentDepth} levels deep (${ctx.agentChain.join(" → ")})`
          )
        }
        const agent = yield* agents.findById(ctx.tenantId, agentId)
        if (Option.isNone(agent)) return failed("error", `The agent ${agentId} this tool asks no longer exists`)
        if (agent.value.status !== "active") return failed("error", `The agent ${agentId} this tool asks is inactive`)
        if (ctx.askAgent === undefined) {
          return failed(
            "error",
            "An agent tool runs only inside a run (a chat, an execution or a team run), where there is an agent asking"
          )
        }
        const reply = yield* Effect.result(ctx.askAgent(agentId, message, [...ctx.agentChain, agentId]))
        return Result.isFailure(reply)
          ? failed("error", `The agent ${agentId} did not answer: ${reply.failure}`)
          : succeeded(reply.success)
      })

    // --- mcp ------------------------------------------------------------------

    /**
     * A `tools/call` of the server tool `name` (docs/mcp.md#agents-use-mcp-servers): its
     * content as text, and `isError` a failed call the model reads.
     */
    const callMcp = (
      tool: Tool,
      settings: McpSettings,
      name: string,
      args: Arguments,
      ctx: CallContext,
      hops: Array<HttpHop>,
      deadline: number,
      timeoutMs: number
    ): Effect.Effect<Done> => {
      let scrub = (text: string) => text
      return Effect.gen(function* () {
        const resolved = yield* Effect.result(secrets.resolve(ctx.tenantId, headerSecrets(settings.headers)))
        if (Result.isFailure(resolved)) {
          return failed("error", `${resolved.failure.message}: the tool's headers name it. Nothing was sent.`)
        }
        const values = new Map([...resolved.success].map(([name, value]) => [name, Redacted.value(value)] as const))
        scrub = scrubberOf(values)
        const headers = fillHeaders(settings.headers, values)
        const bad = Object.entries(headers).find(([, value]) => !isHeaderValue(value))
        if (bad !== undefined) {
          return failed(
            "error",
            `The header ${bad[0]} cannot be sent: a secret it names holds a control character or a character ` +
              "past Latin-1. Nothing was sent."
          )
        }
        const callWith = (credentials: Readonly<Record<string, string>>) =>
          mcp.callTool(
            { url: settings.url, allowedHosts: settings.allowedHosts, headers: { ...headers, ...credentials } },
            name,
            args,
            {
              deadline,
              timeoutMessage: `No answer within ${timeoutMs} ms (the tool's policy.timeoutMs)`,
              idempotencyKey: idempotencyKey(ctx),
              hops,
              scrub
            }
          )
        // With OAuth, the connection's token (renewed when near its expiry, or once on a 401), scrubbed like a secret.
        const tokens = new Map<string, string>()
        const result = yield* Effect.result(
          settings.auth === "oauth"
            ? oauth.withBearer(ctx.tenantId, oauthTargetOf(tool, settings), (token) => {
                tokens.set(tokens.size === 0 ? "OAUTH_ACCESS_TOKEN" : "OAUTH_ACCESS_TOKEN_RENEWED", token)
                scrub = scrubberOf(new Map([...values, ...tokens]))
                return callWith({ authorization: `Bearer ${token}` })
              })
            : callWith({})
        )
        if (Result.isFailure(result)) {
          const { reason, message } = result.failure
          return failed(reason, message)
        }
        const text = resultText(result.success)
        return (result.success as { readonly isError?: unknown } | null)?.isError === true
          ? failed("error", text === "" ? `The MCP tool ${name} failed` : text)
          : succeeded(text)
      }).pipe(Effect.map((done) => ({ ...done, output: scrub(done.output) })))
    }

    /**
     * A `tools/call` of the server tool `name` of a stdio server the operator
     * runs (McpStdio.ts): through its process, so no request is recorded (the
     * exchange's `requests` stay empty) and no secret is involved.
     */
    const callStdio = (
      settings: McpStdioSettings,
      name: string,
      args: Arguments,
      ctx: CallContext,
      deadline: number,
      timeoutMs: number
    ): Effect.Effect<Done> =>
      Effect.gen(function* () {
        const result = yield* Effect.result(
          stdio.callTool({ server: settings.server, tenantId: ctx.tenantId }, name, args, {
            deadline,
            timeoutMessage: `No answer within ${timeoutMs} ms (the tool's policy.timeoutMs)`
          })
        )
        if (Result.isFailure(result)) return failed(result.failure.reason, result.failure.message)
        const text = resultText(result.success)
        return (result.success as { readonly isError?: unknown } | null)?.isError === true
          ? failed("error", text === "" ? `The MCP tool ${name} failed` : text)
          : succeeded(text)
      })

    /** A call of a server tool, over HTTP or through the operator's stdio server the tool names. */
    const callServerTool = (
      tool: Tool,
      settings: McpSettings | McpStdioSettings,
      name: string,
      args: Arguments,
      ctx: CallContext,
      hops: Array<HttpHop>,
      deadline: number,
      timeoutMs: number
    ): Effect.Effect<Done> =>
      "server" in settings
        ? callStdio(settings, name, args, ctx, deadline, timeoutMs)
        : callMcp(tool, settings, name, args, ctx, hops, deadline, timeoutMs)

    // --- one call ---------------------------------------------------------------

    const requiredText = (tool: Tool, args: Arguments, name: string, what: string): Result.Result<string, Done> => {
      const value = args[name]
      return typeof value === "string" && value.trim() !== ""
        ? Result.succeed(value)
        : Result.fail(invalidArguments(tool, [{ path: [name], message: `Expected ${what}: a non-empty string` }]))
    }

    const run = (tool: Tool, raw: unknown, ctx: CallContext) =>
      Effect.gen(function* () {
        const started = yield* Clock.currentTimeMillis
        const deadline = started + tool.policy.timeoutMs
        const settings = tool.settings
        const hops: Array<HttpHop> = []
        let knowledgeFound = 0
        const parsed = argumentsObject(raw)
        const args: Arguments = Result.isSuccess(parsed) ? parsed.success : {}
        const textArg = (name: string) => (typeof args[name] === "string" ? (args[name] as string) : null)
        const exchange = (): Exchange => {
          switch (settings.kind) {
            case "http":
            case "mcp":
              // An MCP call is HTTP too: its POSTs (initialize, tools/call...) and their answers.
              return { kind: "http", requests: [...hops] }
            case "knowledge":
              return {
                kind: "knowledge",
                knowledgeIds: settings.knowledgeIds,
                query: textArg("query"),
                topK: settings.topK,
                found: knowledgeFound
              }
            case "agent":
              return {
                kind: "agent",
                agentId: settings.agentId,
                message: textArg("message"),
                chain: [...ctx.agentChain, settings.agentId]
              }
          }
        }

        const call = Effect.gen(function* () {
          if (Result.isFailure(parsed)) return failed("invalid_arguments", parsed.failure)
          const validate = validatorOf(tool)
          if (Result.isFailure(validate)) {
            return failed("error", `The tool's parameters do not compile: ${validate.failure[0]?.message ?? "unknown"}`)
          }
          const problems = validate.success(args)
          if (problems.length > 0) return invalidArguments(tool, problems)
          switch (settings.kind) {
            case "http":
              return yield* callHttp(tool, settings, args, ctx, hops, deadline)
            case "knowledge": {
              const query = requiredText(tool, args, "query", "the text to search for")
              if (Result.isFailure(query)) return query.failure
              const { done, found } = yield* callKnowledge(settings, query.success, ctx)
              knowledgeFound = found
              return done
            }
            case "agent": {
              const message = requiredText(tool, args, "message", "the message to the agent")
              if (Result.isFailure(message)) return message.failure
              return yield* callAgent(settings.agentId, message.success, ctx)
            }
            case "mcp": {
              const name = serverToolOf(tool)
              if (name !== undefined) {
                return yield* callServerTool(tool, settings, name, args, ctx, hops, deadline, tool.policy.timeoutMs)
              }
              // The tool itself, as the test route calls it: `tool` names one of its exposed server tools.
              const wanted = args.tool
              const found = settings.serverTools.find(
                (one) => one.exposedAs !== null && (one.name === wanted || one.exposedAs === wanted)
              )
              if (found === undefined) {
                const names = modelTools(tool).map((one) => one.name)
                return failed(
                  "invalid_arguments",
                  'Expected { "tool": NAME, "arguments": { ... } } naming one of the server\'s exposed tools: ' +
                    (names.length === 0 ? "none is exposed" : names.join(", "))
                )
              }
              const inner = isPlainObject(args.arguments) ? args.arguments : {}
              return yield* callServerTool(
                tool,
                settings,
                found.name,
                inner,
                ctx,
                hops,
                deadline,
                tool.policy.timeoutMs
              )
            }
          }
        }).pipe(
          Effect.catchCause((cause) =>
            Cause.hasInterrupts(cause)
              ? Effect.failCause(cause)
              : Effect.as(
                  Effect.logError("A tool call failed unexpectedly", cause),
                  failed("error", "The call failed: an internal error (logged)")
                )
          ),
          Effect.timeoutOrElse({
            duration: Duration.millis(tool.policy.timeoutMs),
            orElse: () =>
              Effect.succeed(
                failed("timeout", `No answer within ${tool.policy.timeoutMs} ms (the tool's policy.timeoutMs)`)
              )
          })
        )
        const done = yield* call
        const ended = yield* Clock.currentTimeMillis
        return {
          ok: done.ok,
          ...(done.errorKind === undefined ? {} : { errorKind: done.errorKind }),
          output: done.output,
          durationMs: ended - started,
          exchange: exchange()
        } satisfies InvokedOutcome as InvokedOutcome
      })

    /**
     * Makes one call of `tool` with the model's `args` (an object, or the
     * text of broken JSON). Never fails: every failure is an outcome. While
     * spans are exported it is an `execute_tool {name}` span (OpenTelemetry's
     * GenAI conventions) under the current one.
     */
    const invoke = (tool: Tool, args: unknown, ctx: CallContext): Effect.Effect<InvokedOutcome> =>
      run(tool, args, ctx).pipe(
        Effect.tap((outcome) =>
          Traced.isExporting()
            ? Effect.annotateCurrentSpan({
                "tool.outcome": outcome.ok ? "ok" : (outcome.errorKind ?? "error"),
                ...(outcome.ok ? {} : { "error.type": outcome.errorKind ?? "error" })
              })
            : Effect.void
        ),
        Traced.withSpan(`execute_tool ${tool.name}`, {
          attributes: {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool.name,
            "gen_ai.tool.call.id": ctx.callId,
            "gen_ai.tool.type": tool.settings.kind,
            "tenant.id": ctx.tenantId
          }
        })
      )

    /**
     * Whether the call would be refused as `invalid_arguments` by its parsing or
     * `tool`'s parameters, before anything is made: such a call is not put to a
     * person (docs/approvals.md). Parameters that do not compile are another
     * failure, not this one.
     */
    const refusesArguments = (tool: Tool, args: unknown): boolean => {
      const parsed = argumentsObject(args)
      if (Result.isFailure(parsed)) return true
      const validate = validatorOf(tool)
      return Result.isSuccess(validate) && validate.success(parsed.success).length > 0
    }

    return { invoke, refusesArguments } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make).pipe(
    Layer.provide([
      Secrets.layer,
      KnowledgeSearch.layer,
      AgentsRepo.layer,
      Guard.EgressGuard.layer,
      McpStdio.layer,
      McpOAuth.layer
    ])
  )
}
