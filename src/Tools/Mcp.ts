import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import { isSafeTextValue } from "../Domain/Input.ts"
import { compileParameters } from "./JsonSchema.ts"
import { placeholders } from "./Template.ts"
import {
  maxDescriptionChars,
  type McpServerTool,
  type McpSettings,
  maxServerTools,
  ParametersInput,
  type Tool,
  toolNamePattern
} from "./Tool.ts"

// An `mcp` tool (docs/mcp.md#agents-use-mcp-servers) is one tool of the tenant and several
// tools of the model: each exposed tool of its server is offered under its
// own name, `<toolName>__<serverToolName>`. The loop expands it (`modelTools`)
// and the invoker reads back which server tool a model tool stands for
// (`serverToolOf`).

/** The model's name for a server tool: the tool's name, `__`, the server's name with other characters as `_`. */
export const exposedName = (toolName: string, serverName: string): string | undefined => {
  const name = `${toolName}__${serverName.replace(/[^a-zA-Z0-9_-]/g, "_")}`
  return toolNamePattern.test(name) ? name : undefined
}

/** What a server's `tools/list` gave, as the tool stores it: bounded, each with the name the model sees it by. */
export const serverToolsOf = (
  listed: ReadonlyArray<unknown>,
  toolName: string,
  selection: McpSettings["tools"]
): ReadonlyArray<McpServerTool> => {
  const taken = new Set<string>()
  const kept: Array<McpServerTool> = []
  for (const raw of listed) {
    if (kept.length >= maxServerTools) break
    if (typeof raw !== "object" || raw === null) continue
    const entry = raw as { readonly name?: unknown; readonly description?: unknown; readonly inputSchema?: unknown }
    if (typeof entry.name !== "string" || entry.name === "" || entry.name.length > 128) continue
    if (!isSafeTextValue(entry.name)) continue
    const description =
      typeof entry.description === "string" && isSafeTextValue(entry.description)
        ? entry.description.slice(0, maxDescriptionChars)
        : ""
    const schemaOk =
      Schema.is(ParametersInput)(entry.inputSchema) &&
      Result.isSuccess(compileParameters(entry.inputSchema as { readonly [key: string]: unknown }))
    const inputSchema = schemaOk ? (entry.inputSchema as { readonly [key: string]: unknown }) : { type: "object" }
    const name = exposedName(toolName, entry.name)
    const reason =
      selection !== "all" && !selection.includes(entry.name)
        ? "not among the tool's `tools`"
        : name === undefined
          ? `the name ${toolName}__${entry.name} does not fit ^[a-zA-Z0-9_-]{1,64}$`
          : taken.has(name)
            ? `another of the server's tools is exposed as ${name}`
            : !schemaOk
              ? "its input schema is not an accepted JSON Schema of an object"
              : undefined
    if (reason === undefined) taken.add(name!)
    kept.push({
      name: entry.name,
      description,
      inputSchema,
      exposedAs: reason === undefined ? name! : null,
      ...(reason === undefined ? {} : { reason })
    })
  }
  return kept
}

// The model tools of each mcp tool as read (tools are cached as read), and the server tool each stands for.
const expanded = new WeakMap<Tool, ReadonlyArray<Tool>>()
const standsFor = new WeakMap<Tool, string>()

/** The tools the model sees for `tool`: itself, or for an `mcp` tool one per exposed server tool. */
export const modelTools = (tool: Tool): ReadonlyArray<Tool> => {
  const settings = tool.settings
  if (settings.kind !== "mcp") return [tool]
  let tools = expanded.get(tool)
  if (tools === undefined) {
    tools = settings.serverTools.flatMap((server) => {
      if (server.exposedAs === null) return []
      const one: Tool = Object.assign(Object.create(Object.getPrototypeOf(tool)), tool, {
        name: server.exposedAs,
        description:
          server.description === "" ? `${server.name} (a tool of the MCP server ${tool.name})` : server.description,
        parameters: server.inputSchema
      })
      standsFor.set(one, server.name)
      return [one]
    })
    expanded.set(tool, tools)
  }
  return tools
}

/** The server tool a model tool of an `mcp` tool calls; undefined for the `mcp` tool itself. */
export const serverToolOf = (tool: Tool): string | undefined => standsFor.get(tool)

/** The secrets an mcp tool's headers name, once each. */
export const headerSecrets = (headers: Readonly<Record<string, string>>): ReadonlyArray<string> => [
  ...new Set(
    Object.values(headers).flatMap((template) =>
      placeholders(template).flatMap(({ placeholder }) => (placeholder._tag === "Secret" ? [placeholder.name] : []))
    )
  )
]

/** The headers with each `{{secrets.NAME}}` replaced by its value. */
export const fillHeaders = (
  headers: Readonly<Record<string, string>>,
  values: ReadonlyMap<string, string>
): Record<string, string> => {
  const filled: Record<string, string> = {}
  for (const [name, template] of Object.entries(headers)) {
    let value = ""
    let at = 0
    for (const found of placeholders(template)) {
      value += template.slice(at, found.index)
      value += found.placeholder._tag === "Secret" ? (values.get(found.placeholder.name) ?? "") : found.text
      at = found.index + found.text.length
    }
    filled[name.toLowerCase()] = value + template.slice(at)
  }
  return filled
}

/**
 * A `tools/call` result as the model reads it: text blocks as text, an
 * image or audio as a reference to it (the model reads no bytes here), a
 * resource as its uri and text; `structuredContent` as JSON when there is no
 * text.
 */
export const resultText = (result: unknown): string => {
  if (typeof result !== "object" || result === null) return JSON.stringify(result ?? null)
  const { content, structuredContent } = result as { readonly content?: unknown; readonly structuredContent?: unknown }
  const parts: Array<string> = []
  for (const block of Array.isArray(content) ? content : []) {
    if (typeof block !== "object" || block === null) continue
    const b = block as Record<string, unknown>
    const str = (key: string) => (typeof b[key] === "string" ? (b[key] as string) : undefined)
    switch (b.type) {
      case "text":
        parts.push(str("text") ?? "")
        break
      case "image":
      case "audio":
        parts.push(
          `[${b.type}: ${str("mimeType") ?? "unknown type"}, ${Buffer.byteLength(str("data") ?? "", "base64")} bytes]`
        )
        break
      case "resource": {
        const resource = (typeof b.resource === "object" && b.resource !== null ? b.resource : {}) as Record<
          string,
          unknown
        >
        const uri = typeof resource.uri === "string" ? resource.uri : "unknown"
        parts.push(
          typeof resource.text === "string"
            ? `[resource: ${uri}]\n${resource.text}`
            : `[resource: ${uri}, ${typeof resource.mimeType === "string" ? resource.mimeType : "binary"}]`
        )
        break
      }
      case "resource_link":
        parts.push(`[resource link: ${str("uri") ?? "unknown"}${str("name") === undefined ? "" : ` (${str("name")})`}]`)
        break
      default:
        parts.push(JSON.stringify(block))
    }
  }
  const hasText = parts.some((part) => part.trim() !== "")
  if (!hasText && structuredContent !== undefined) return JSON.stringify(structuredContent)
  return parts.join("\n\n")
}
