import { type FormEvent, useEffect, useState } from "react"
import { AgentId, type ToolId } from "../../../src/Domain/Ids.ts"
import type { CallResult } from "../../../src/Tools/Call.ts"
import type { httpMethods, McpServerTool, Tool, ToolKind, ToolPolicy } from "../../../src/Tools/Tool.ts"
import { type ApprovalDraft, toolApprovalDraftOf, toolApprovalPayload } from "../approvals/ApprovalFields.tsx"
import { navigate, type Route, withQuery } from "../router.tsx"
import { ApiProblem, call } from "../shared/api.ts"
import { allPages, pageQuery, useLoad, usePaged, useSelected } from "../shared/data.ts"
import { idOf } from "../shared/ids.ts"
import { useOAuth } from "./oauth.ts"

// The form holds what is typed, as text: the JSON Schema and the test's
// arguments are parsed here before anything is sent, so a typing slip is
// named on its field rather than sent; everything else the service checks.

export type HttpMethod = (typeof httpMethods)[number]

/** Every tool of the tenant, for choosing an agent's tools; undefined until read. */
export const useAllTools = () => {
  const tools = useLoad(
    () => allPages((cursor, limit) => call((c) => c.tools.list({ query: pageQuery(cursor, limit) }))),
    []
  )
  return { tools: tools.data, error: tools.error }
}

/** Every knowledge base of the tenant, for a knowledge tool's choice; undefined until read. */
export const useAllKnowledgeBases = () =>
  useLoad(() => allPages((cursor, limit) => call((c) => c.knowledge.list({ query: pageQuery(cursor, limit) }))), [])
    .data

export interface ToolDraft {
  name: string
  description: string
  /** The JSON Schema as typed. */
  parameters: string
  kind: ToolKind
  method: HttpMethod
  url: string
  headers: Array<{ name: string; value: string }>
  body: string
  /** One host a line (or separated by commas). */
  allowedHosts: string
  followRedirects: boolean
  /** Whether an mcp tool's server is one the operator runs (stdio), named by `mcpServer`, rather than reached at `url`. */
  mcpStdio: boolean
  mcpServer: string
  /** How an mcp tool's server is authenticated: headers (which may name secrets), or an OAuth connection. */
  mcpAuth: "headers" | "oauth"
  /** Whether the model sees all of an mcp tool's server tools, or only those of `mcpTools`. */
  mcpAll: boolean
  /** The server tools exposed when not all of them, one name a line. */
  mcpTools: string
  knowledgeIds: Array<string>
  /** Empty: the service's default. */
  topK: string
  agentId: string
  /** Empty: the default on create, the bound as it is on update. */
  timeoutMs: string
  maxOutputBytes: string
  maxCallsPerRun: string
  /** The policy's approval fields, each on "tenant default" when the tool leaves it out. */
  approval: ApprovalDraft
}

const json = (value: unknown) => JSON.stringify(value, null, 2)

/** The arguments each kind reads, as a starting schema: a knowledge search's query, a question to an agent. */
export const starterParameters: Record<ToolKind, string> = {
  http: json({ type: "object", properties: {}, required: [] }),
  knowledge: json({
    type: "object",
    properties: { query: { type: "string", description: "What to look for" } },
    required: ["query"]
  }),
  agent: json({
    type: "object",
    properties: { message: { type: "string", description: "What to ask the agent" } },
    required: ["message"]
  }),
  // Not read: each of the server's tools has its own input schema.
  mcp: json({ type: "object" })
}

export const emptyDraft: ToolDraft = {
  name: "",
  description: "",
  parameters: starterParameters.http,
  kind: "http",
  method: "GET",
  url: "",
  headers: [],
  body: "",
  allowedHosts: "",
  followRedirects: false,
  mcpStdio: false,
  mcpServer: "",
  mcpAuth: "headers",
  mcpAll: true,
  mcpTools: "",
  knowledgeIds: [],
  topK: "",
  agentId: "",
  timeoutMs: "",
  maxOutputBytes: "",
  maxCallsPerRun: "",
  approval: toolApprovalDraftOf(undefined)
}

const draftOf = (tool: Tool): ToolDraft => {
  const s = tool.settings
  return {
    ...emptyDraft,
    name: tool.name,
    description: tool.description,
    parameters: json(tool.parameters),
    kind: s.kind,
    ...(s.kind === "http"
      ? {
          method: s.method,
          url: s.url,
          headers: Object.entries(s.headers).map(([name, value]) => ({ name, value })),
          body: s.body ?? "",
          allowedHosts: s.allowedHosts.join("\n"),
          followRedirects: s.followRedirects
        }
      : s.kind === "mcp"
        ? {
            ...("server" in s
              ? { mcpStdio: true, mcpServer: s.server }
              : {
                  url: s.url,
                  headers: Object.entries(s.headers).map(([name, value]) => ({ name, value })),
                  allowedHosts: s.allowedHosts.join("\n"),
                  mcpAuth: s.auth === "oauth" ? ("oauth" as const) : ("headers" as const)
                }),
            mcpAll: s.tools === "all",
            mcpTools: s.tools === "all" ? "" : s.tools.join("\n")
          }
        : s.kind === "knowledge"
          ? { knowledgeIds: [...s.knowledgeIds], topK: String(s.topK) }
          : { agentId: s.agentId }),
    timeoutMs: String(tool.policy.timeoutMs),
    maxOutputBytes: String(tool.policy.maxOutputBytes),
    maxCallsPerRun: String(tool.policy.maxCallsPerRun),
    approval: toolApprovalDraftOf(tool.policy)
  }
}

/** A problem found before sending, shown as the service shows its own: on the field it names. */
const localProblem = (errors: ReadonlyArray<{ readonly path: string; readonly message: string }>) =>
  new ApiProblem(400, {
    title: "Bad Request",
    detail: "Nothing was sent: fix the fields named",
    errors: errors.map((e) => ({ path: e.path.split("."), message: e.message }))
  })

/** A JSON object typed in a textarea; its problem, named under `path`, otherwise. */
export const parseObject = (
  text: string,
  path: string
): { readonly value: Record<string, unknown> } | { readonly problem: ApiProblem } => {
  let value: unknown
  try {
    value = JSON.parse(text)
  } catch (error) {
    return { problem: localProblem([{ path, message: `Not JSON: ${(error as Error).message}` }]) }
  }
  return typeof value === "object" && value !== null && !Array.isArray(value)
    ? { value: value as Record<string, unknown> }
    : { problem: localProblem([{ path, message: "Expected a JSON object: { ... }" }]) }
}

const hostsOf = (text: string) =>
  text
    .split(/[\s,]+/)
    .map((host) => host.trim())
    .filter((host) => host !== "")

/** Names one a line (or separated by commas), each once. */
export const namesOf = (text: string) => [...new Set(hostsOf(text))]

/** The server tools an mcp tool, as stored, exposes to the model: their names as the model calls them. */
export const exposedNames = (tool: Tool) =>
  tool.settings.kind === "mcp"
    ? tool.settings.serverTools.flatMap((one: McpServerTool) => (one.exposedAs === null ? [] : [one.exposedAs]))
    : []

/** A bound as typed: left out when empty, a number otherwise (the service names one out of range). */
const bound = (text: string) => (text.trim() === "" ? undefined : Number(text))

/** The settings of a draft, as the service takes them. */
const settingsOf = (d: ToolDraft) => {
  switch (d.kind) {
    case "http": {
      const headers = Object.fromEntries(
        d.headers.filter((h) => h.name.trim() !== "" || h.value !== "").map((h) => [h.name.trim(), h.value])
      )
      return {
        kind: "http" as const,
        method: d.method,
        url: d.url.trim(),
        headers,
        // An empty body is left out: the arguments are then sent as JSON. A GET has none.
        ...(d.body === "" || d.method === "GET" ? {} : { body: d.body }),
        allowedHosts: hostsOf(d.allowedHosts),
        followRedirects: d.followRedirects
      }
    }
    case "knowledge": {
      const topK = bound(d.topK)
      return { kind: "knowledge" as const, knowledgeIds: d.knowledgeIds, ...(topK === undefined ? {} : { topK }) }
    }
    case "agent":
      return { kind: "agent" as const, agentId: idOf(AgentId, d.agentId) }
    case "mcp": {
      // None named is sent as such: the service names the field, rather than all being exposed unasked.
      const tools = d.mcpAll ? ("all" as const) : namesOf(d.mcpTools)
      if (d.mcpStdio) return { kind: "mcp" as const, server: d.mcpServer.trim(), tools }
      return {
        kind: "mcp" as const,
        url: d.url.trim(),
        headers: Object.fromEntries(
          d.headers.filter((h) => h.name.trim() !== "" || h.value !== "").map((h) => [h.name.trim(), h.value])
        ),
        auth: d.mcpAuth,
        allowedHosts: hostsOf(d.allowedHosts),
        tools
      }
    }
  }
}

/**
 * The request body of a draft, or the problem that keeps it from being sent. `stored` is the policy of the tool
 * edited: an approval field it has, put back on "tenant default", is sent as null to remove it.
 */
export const toPayload = (d: ToolDraft, stored?: ToolPolicy) => {
  const parameters = parseObject(d.parameters, "payload.parameters")
  if ("problem" in parameters) return parameters
  const duplicates = d.headers
    .map((h) => h.name.trim().toLowerCase())
    .filter((name, i, all) => name !== "" && all.indexOf(name) !== i)
  if ((d.kind === "http" || (d.kind === "mcp" && !d.mcpStdio)) && duplicates.length > 0) {
    return {
      problem: localProblem([{ path: "payload.settings.headers", message: `Header ${duplicates[0]} is given twice` }])
    }
  }
  const policy = Object.fromEntries(
    (["timeoutMs", "maxOutputBytes", "maxCallsPerRun"] as const).flatMap((key) => {
      const value = bound(d[key])
      return value === undefined ? [] : [[key, value]]
    })
  )
  return {
    value: {
      name: d.name,
      description: d.description,
      parameters: parameters.value,
      settings: settingsOf(d),
      policy: { ...policy, ...toolApprovalPayload(d.approval, stored) }
    }
  }
}

/** A skeleton of arguments from a JSON Schema's properties, to start a test from. */
export const sampleArguments = (parameters: Record<string, unknown>) => {
  const properties = parameters.properties
  if (typeof properties !== "object" || properties === null) return "{}"
  const sample = (schema: unknown): unknown => {
    const type = typeof schema === "object" && schema !== null ? (schema as { type?: unknown }).type : undefined
    switch (Array.isArray(type) ? type[0] : type) {
      case "string":
        return ""
      case "number":
      case "integer":
        return 0
      case "boolean":
        return false
      case "array":
        return []
      case "object":
        return {}
      default:
        return null
    }
  }
  return json(Object.fromEntries(Object.entries(properties).map(([key, schema]) => [key, sample(schema)])))
}

/**
 * The tools screen's data: the list, the tool selected in the URL (`?tool=`)
 * in a form to edit, or a new one's form; saving, (de)activating, deleting,
 * and test calls with their outcome.
 */
export const useTools = (route: Route, selected: ToolId | null) => {
  const list = usePaged((cursor) => call((c) => c.tools.list({ query: pageQuery(cursor) })), [])
  const selection = useSelected(list, selected, (id) => call((c) => c.tools.get({ params: { id } })))
  const tool = selection.item
  const [draft, setDraft] = useState<ToolDraft>(emptyDraft)
  const [problem, setProblem] = useState<unknown>()
  const [saved, setSaved] = useState("")
  const [testArguments, setTestArguments] = useState("{}")
  const [testing, setTesting] = useState(false)
  const [testResult, setTestResult] = useState<CallResult>()
  const [testProblem, setTestProblem] = useState<unknown>()

  useEffect(() => {
    setDraft(tool ? draftOf(tool) : emptyDraft)
    setProblem(undefined)
  }, [tool?.id, tool?.updatedAt.getTime()])

  // Another tool: its own arguments to test with, no earlier outcome.
  useEffect(() => {
    setTestArguments(tool ? sampleArguments(tool.parameters) : "{}")
    setTestResult(undefined)
    setTestProblem(undefined)
  }, [tool?.id])

  const refresh = () => {
    list.reload()
    selection.reload()
  }

  const oauth = useOAuth(route, selected, tool, { problem: setProblem, saved: setSaved })

  const [listing, setListing] = useState(false)
  /** Lists an mcp tool's server tools again; a failure is the form's problem, as a save's is. */
  const listAgain = async (target: Tool) => {
    setProblem(undefined)
    setSaved("")
    setListing(true)
    try {
      const listed = await call((c) => c.tools.refresh({ params: { id: target.id } }))
      const count = listed.settings.kind === "mcp" ? listed.settings.serverTools.length : 0
      setSaved(`Listed ${count} tool${count === 1 ? "" : "s"} of ${listed.name}'s server.`)
      refresh()
    } catch (error) {
      setProblem(error)
    } finally {
      setListing(false)
    }
  }

  const save = async (event: FormEvent) => {
    event.preventDefault()
    setProblem(undefined)
    setSaved("")
    const payload = toPayload(draft, tool?.policy)
    if ("problem" in payload) {
      setProblem(payload.problem)
      return
    }
    try {
      if (tool) {
        await call((c) => c.tools.update({ params: { id: tool.id }, payload: payload.value }))
        setSaved(`Saved ${draft.name}.`)
      } else {
        const made = await call((c) => c.tools.create({ payload: payload.value }))
        setSaved(`Created ${made.name}.`)
        navigate(withQuery(route, { tool: made.id }), { replace: true })
      }
      refresh()
    } catch (error) {
      setProblem(error)
    }
  }

  const setStatus = async (target: Tool, status: Tool["status"]) => {
    setProblem(undefined)
    setSaved("")
    try {
      await call((c) => c.tools.update({ params: { id: target.id }, payload: { status } }))
      setSaved(status === "active" ? `Activated ${target.name}.` : `Deactivated ${target.name}.`)
      refresh()
    } catch (error) {
      setProblem(error)
    }
  }

  const remove = async (target: Tool) => {
    setProblem(undefined)
    setSaved("")
    try {
      await call((c) => c.tools.remove({ params: { id: target.id } }))
      navigate(withQuery(route, { tool: null }), { replace: true })
      list.reload()
    } catch (error) {
      // 409 while agents have it: the problem names them.
      setProblem(error)
    }
  }

  const runTest = async (event: FormEvent) => {
    event.preventDefault()
    if (!tool) return
    setTestProblem(undefined)
    setTestResult(undefined)
    const args = parseObject(testArguments, "payload.arguments")
    if ("problem" in args) {
      setTestProblem(args.problem)
      return
    }
    setTesting(true)
    try {
      setTestResult(await call((c) => c.tools.test({ params: { id: tool.id }, payload: { arguments: args.value } })))
    } catch (error) {
      setTestProblem(error)
    } finally {
      setTesting(false)
    }
  }

  const set =
    <K extends keyof ToolDraft>(key: K) =>
    (value: ToolDraft[K]) =>
      setDraft((d) => ({ ...d, [key]: value }))

  /** Another kind: its settings, and its starter schema when the schema is still another kind's starter. */
  const setKind = (kind: ToolKind) =>
    setDraft((d) => ({
      ...d,
      kind,
      parameters: Object.values(starterParameters).includes(d.parameters) ? starterParameters[kind] : d.parameters
    }))

  const fieldError = (path: string) => (problem instanceof ApiProblem ? problem.messagesFor(path)[0] : undefined)

  return {
    list,
    tool,
    draft,
    set,
    setDraft,
    setKind,
    save,
    setStatus,
    remove,
    listAgain,
    listing,
    oauth,
    problem,
    saved,
    fieldError,
    test: {
      arguments: testArguments,
      setArguments: setTestArguments,
      run: runTest,
      running: testing,
      result: testResult,
      problem: testProblem
    }
  }
}
