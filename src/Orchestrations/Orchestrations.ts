import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import { Limits } from "../Billing/Limits.ts"
import { AppConfig } from "../Config.ts"
import type { OrchestrationId, TenantId } from "../Domain/Ids.ts"
import type { PageRequest } from "../Domain/Page.ts"
import { BadRequest, NotFound } from "../Domain/Problems.ts"
import type { WebhookState } from "../Webhooks/Api.ts"
import { ownedWebhook } from "../Webhooks/Owned.ts"
import { Webhooks } from "../Webhooks/Webhooks.ts"
import type { CreateOrchestration, Orchestration, OrchestrationView, Step, UpdateOrchestration } from "./Api.ts"
import { OrchestrationsRepo } from "./Repo.ts"
import { formatIssues } from "../Tools/ResponseFormatCheck.ts"
import * as Traced from "../Observability/Traced.ts"

// ---------------------------------------------------------------------------
// Templates
// ---------------------------------------------------------------------------

export type TemplatePart =
  | { readonly _tag: "Text"; readonly text: string }
  | { readonly _tag: "Input" }
  | { readonly _tag: "Variable"; readonly name: string }
  /** `fields`: the path into a JSON output (`{{steps.ID.output.a.b}}`); none: the whole output. */
  | { readonly _tag: "StepOutput"; readonly step: string; readonly fields?: ReadonlyArray<string> }
  | { readonly _tag: "Unknown"; readonly placeholder: string }

// A placeholder is `{{ ... }}` with no braces inside; a lone `{{` or `}}` is text.
const placeholderPattern = /\{\{([^{}]*)\}\}/g
const name = "[A-Za-z0-9_-]{1,64}"
const variablePattern = new RegExp(`^variables\\.(${name})$`)
/** The most fields a placeholder may go down into a step's JSON output. */
export const maxOutputFields = 16
const stepOutputPattern = new RegExp(`^steps\\.(${name})\\.output((?:\\.${name}){0,${maxOutputFields}})$`)

// Templates parsed lately: a run's steps and every execute request of an
// orchestration parse the same prompts again. Emptied when it holds a
// million characters of templates (a few MB).
const parsed = new Map<string, ReadonlyArray<TemplatePart>>()
let parsedChars = 0
const parsedCharsCap = 1_000_000

/** A template as text and placeholders, in order. */
export const parseTemplate = (template: string): ReadonlyArray<TemplatePart> => {
  const known = parsed.get(template)
  if (known !== undefined) return known
  const parts = parseTemplateNow(template)
  if (template.length <= parsedCharsCap) {
    if (parsedChars + template.length > parsedCharsCap) {
      parsed.clear()
      parsedChars = 0
    }
    parsed.set(template, parts)
    parsedChars += template.length
  }
  return parts
}

const parseTemplateNow = (template: string): ReadonlyArray<TemplatePart> => {
  const parts: Array<TemplatePart> = []
  let last = 0
  for (const match of template.matchAll(placeholderPattern)) {
    if (match.index > last) parts.push({ _tag: "Text", text: template.slice(last, match.index) })
    last = match.index + match[0].length
    const inner = match[1]!.trim()
    const variable = variablePattern.exec(inner)
    const stepOutput = stepOutputPattern.exec(inner)
    parts.push(
      inner === "input"
        ? { _tag: "Input" }
        : variable !== null
          ? { _tag: "Variable", name: variable[1]! }
          : stepOutput !== null
            ? {
                _tag: "StepOutput",
                step: stepOutput[1]!,
                ...(stepOutput[2] === "" ? {} : { fields: stepOutput[2]!.split(".").slice(1) })
              }
            : { _tag: "Unknown", placeholder: match[0] }
    )
  }
  if (last < template.length) parts.push({ _tag: "Text", text: template.slice(last) })
  return parts
}

/** The names the steps' prompts reference as `{{variables.NAME}}`: what an execution must be given. */
export const variablesUsed = (steps: ReadonlyArray<Pick<Step, "prompt">>): ReadonlySet<string> => {
  const names = new Set<string>()
  for (const step of steps) {
    for (const part of parseTemplate(step.prompt)) {
      if (part._tag === "Variable") names.add(part.name)
    }
  }
  return names
}

export interface RenderContext {
  readonly input: string
  readonly variables: Readonly<Record<string, string>>
  /** Outputs of the steps done so far, by step id. */
  readonly outputs: Readonly<Record<string, string>>
}

// Own properties only: a step called `constructor` must not find Object.prototype's.
const lookup = (record: Readonly<Record<string, string>>, key: string) =>
  Object.hasOwn(record, key) ? record[key]! : ""

const noValue = Symbol("noValue")

/** A step's output read as JSON, or `noValue` when it is not JSON. */
const parseOutput = (output: string): unknown => {
  try {
    return JSON.parse(output)
  } catch {
    return noValue
  }
}

/**
 * The field at `fields` of a JSON value, as prompt text: a string as it is,
 * an object or array as its JSON, a number or boolean as written; "" when
 * absent or null. Own properties only, and array items by index.
 */
const fieldText = (value: unknown, fields: ReadonlyArray<string>): string => {
  let at = value
  for (const field of fields) {
    if (Array.isArray(at) && /^\d+$/.test(field)) at = at[Number(field)]
    else if (typeof at === "object" && at !== null && !Array.isArray(at) && Object.hasOwn(at, field))
      at = (at as Record<string, unknown>)[field]
    else return ""
  }
  if (at === null || at === undefined || at === noValue) return ""
  return typeof at === "string" ? at : typeof at === "object" ? JSON.stringify(at) : String(at)
}

/** `valueOf` for one rendering: each output addressed by field is parsed once. */
const valuesOf = (context: RenderContext) => {
  const parsedOutputs = new Map<string, unknown>()
  return (part: TemplatePart): string => {
    switch (part._tag) {
      case "Text":
        return part.text
      case "Input":
        return context.input
      case "Variable":
        return lookup(context.variables, part.name)
      case "StepOutput": {
        if (part.fields === undefined) return lookup(context.outputs, part.step)
        if (!Object.hasOwn(context.outputs, part.step)) return ""
        let value = parsedOutputs.get(part.step)
        if (value === undefined) {
          value = parseOutput(context.outputs[part.step]!)
          parsedOutputs.set(part.step, value)
        }
        return fieldText(value, part.fields)
      }
      case "Unknown":
        return part.placeholder
    }
  }
}

/**
 * The template with its placeholders replaced, in one pass: text coming from
 * the input, a variable or an output is never read as a template itself.
 * A value that is absent renders as the empty string: the engine checks
 * `variablesUsed` before starting, and `plan` runs a step only after its
 * ancestors, so with a validated definition nothing is absent.
 * Unknown placeholders (refused when a definition is saved) stay as written.
 * A field of an output (`{{steps.ID.output.a.b}}`) is read from the output
 * as JSON: a string as it is, an object or array as JSON, and "" when the
 * output is not JSON or has no such field (docs/orchestrations.md).
 *
 * Past `maxChars` it stops and fails with the length reached so far: the
 * pieces are only measured until then, so a template that repeats a large
 * value thousands of times never builds its huge result.
 */
export const renderWithin = (
  template: string,
  context: RenderContext,
  maxChars: number
): Result.Result<string, { readonly atLeast: number }> => {
  const pieces: Array<string> = []
  let length = 0
  const valueOf = valuesOf(context)
  for (const part of parseTemplate(template)) {
    const piece = valueOf(part)
    length += piece.length
    if (length > maxChars) return Result.fail({ atLeast: length })
    pieces.push(piece)
  }
  return Result.succeed(pieces.join(""))
}

/** `renderWithin` with no bound. */
export const render = (template: string, context: RenderContext): string =>
  Result.getOrThrow(renderWithin(template, context, Number.POSITIVE_INFINITY))

/** The sizes that bound what a step's prompt can render to. */
export interface PromptLimits {
  readonly maxPromptChars: number
  /** Largest execution input. */
  readonly maxInputChars: number
  readonly maxVariableChars: number
}

/**
 * The most characters `template` can render to from the input and variables
 * alone (each placeholder at its largest allowed value), and whether it also
 * uses step outputs, whose size only the run knows.
 */
export const largestRendering = (template: string, limits: PromptLimits) => {
  let chars = 0
  let inputs = 0
  let variables = 0
  for (const part of parseTemplate(template)) {
    if (part._tag === "Text") chars += part.text.length
    else if (part._tag === "Unknown") chars += part.placeholder.length
    else if (part._tag === "Input") inputs++
    else if (part._tag === "Variable") variables++
  }
  return { chars: chars + inputs * limits.maxInputChars + variables * limits.maxVariableChars, inputs, variables }
}

// ---------------------------------------------------------------------------
// The dependency graph
// ---------------------------------------------------------------------------

export interface Plan {
  /**
   * Step ids by depth: a step with no dependencies is in layer 0, any other
   * one layer after its deepest dependency. The steps of a layer can run in
   * parallel once the earlier layers are done; within a layer, list order.
   */
  readonly layers: ReadonlyArray<ReadonlyArray<string>>
  /** Every step each step depends on, directly or through other steps. */
  readonly ancestors: ReadonlyMap<string, ReadonlySet<string>>
}

export type PlanError =
  | { readonly _tag: "DuplicateStep"; readonly step: string }
  | { readonly _tag: "UnknownDependency"; readonly step: string; readonly dependency: string }
  /** The steps of one cycle, each depending on the next and the last on the first. */
  | { readonly _tag: "Cycle"; readonly steps: ReadonlyArray<string> }

/** The layers and ancestor sets of a definition's steps, or why they do not form a DAG. */
export const plan = (steps: ReadonlyArray<Pick<Step, "id" | "dependsOn">>): Result.Result<Plan, PlanError> => {
  const dependencies = new Map<string, ReadonlyArray<string>>()
  for (const step of steps) {
    if (dependencies.has(step.id)) return Result.fail({ _tag: "DuplicateStep", step: step.id })
    dependencies.set(step.id, step.dependsOn ?? [])
  }
  for (const step of steps) {
    for (const dependency of step.dependsOn ?? []) {
      if (!dependencies.has(dependency)) {
        return Result.fail({ _tag: "UnknownDependency", step: step.id, dependency })
      }
    }
  }

  // Depth-first along dependsOn; meeting a step still on the path closes a cycle.
  const done = new Set<string>()
  const path: Array<string> = []
  const onPath = new Set<string>()
  const findCycle = (id: string): ReadonlyArray<string> | undefined => {
    if (done.has(id)) return undefined
    if (onPath.has(id)) return path.slice(path.indexOf(id))
    path.push(id)
    onPath.add(id)
    for (const dependency of dependencies.get(id)!) {
      const cycle = findCycle(dependency)
      if (cycle !== undefined) return cycle
    }
    path.pop()
    onPath.delete(id)
    done.add(id)
    return undefined
  }
  for (const step of steps) {
    const cycle = findCycle(step.id)
    if (cycle !== undefined) return Result.fail({ _tag: "Cycle", steps: cycle })
  }

  // Acyclic from here, so these recursions end; memoised, each step is computed once.
  const depths = new Map<string, number>()
  const ancestors = new Map<string, Set<string>>()
  const visit = (id: string): void => {
    if (depths.has(id)) return
    let depth = 0
    const all = new Set<string>()
    for (const dependency of dependencies.get(id)!) {
      visit(dependency)
      depth = Math.max(depth, depths.get(dependency)! + 1)
      all.add(dependency)
      for (const ancestor of ancestors.get(dependency)!) all.add(ancestor)
    }
    depths.set(id, depth)
    ancestors.set(id, all)
  }
  const layers: Array<Array<string>> = []
  for (const step of steps) {
    visit(step.id)
    const depth = depths.get(step.id)!
    while (layers.length <= depth) layers.push([])
  }
  for (const step of steps) layers[depths.get(step.id)!]!.push(step.id)
  return Result.succeed({ layers, ancestors })
}

// ---------------------------------------------------------------------------
// Validation of a definition
// ---------------------------------------------------------------------------

export interface Issue {
  readonly path: ReadonlyArray<string | number>
  readonly message: string
}

const placeholderHelp =
  "expected {{input}}, {{variables.NAME}}, {{steps.STEP_ID.output}} or {{steps.STEP_ID.output.FIELD}}"

/**
 * What is wrong with a list of steps that already has the right shape (the
 * request schema checked ids, lengths and counts): duplicate ids, unknown or
 * self dependencies, a cycle, and templates using unknown placeholders or
 * outputs of steps that do not run before them. Paths start at the payload.
 */
export const stepIssues = (steps: ReadonlyArray<Step>): ReadonlyArray<Issue> => {
  const at = (index: number, ...rest: ReadonlyArray<string | number>) => ["payload", "steps", index, ...rest]
  const structure: Array<Issue> = []
  const firstIndex = new Map<string, number>()
  steps.forEach((step, index) => {
    const first = firstIndex.get(step.id)
    if (first === undefined) firstIndex.set(step.id, index)
    else structure.push({ path: at(index, "id"), message: `Duplicate step id \`${step.id}\` (also step ${first})` })
  })
  steps.forEach((step, index) => {
    ;(step.dependsOn ?? []).forEach((dependency, position) => {
      if (dependency === step.id) {
        structure.push({
          path: at(index, "dependsOn", position),
          message: `Step \`${step.id}\` cannot depend on itself`
        })
      } else if (!firstIndex.has(dependency)) {
        structure.push({
          path: at(index, "dependsOn", position),
          message: `No step \`${dependency}\` in this orchestration`
        })
      }
    })
  })

  let ancestors: ReadonlyMap<string, ReadonlySet<string>> | undefined
  if (structure.length === 0) {
    const planned = plan(steps)
    if (Result.isSuccess(planned)) {
      ancestors = planned.success.ancestors
    } else if (planned.failure._tag === "Cycle") {
      const cycle = planned.failure.steps
      structure.push({
        path: at(firstIndex.get(cycle[0]!)!, "dependsOn"),
        message: `Dependency cycle: ${[...cycle, cycle[0]].map((id) => `\`${id}\``).join(" depends on ")}`
      })
    }
  }

  const templates: Array<Issue> = []
  steps.forEach((step, index) => {
    const seen = new Set<string>()
    const report = (message: string) => {
      if (seen.has(message)) return
      seen.add(message)
      templates.push({ path: at(index, "prompt"), message })
    }
    for (const part of parseTemplate(step.prompt)) {
      if (part._tag === "Unknown") {
        report(`Unknown placeholder \`${part.placeholder}\`: ${placeholderHelp}`)
      } else if (part._tag === "StepOutput") {
        if (!firstIndex.has(part.step)) {
          report(`No step \`${part.step}\` in this orchestration`)
        } else if (part.step === step.id) {
          report(`Step \`${step.id}\` cannot use its own output`)
        } else if (ancestors !== undefined && !ancestors.get(step.id)!.has(part.step)) {
          // Only a step's ancestors are sure to have finished when it starts.
          report(
            `Step \`${step.id}\` cannot use the output of \`${part.step}\`: ` +
              `it must depend on \`${part.step}\`, directly or through other steps`
          )
        }
      }
    }
  })
  return [...structure, ...templates]
}

/**
 * Steps over `maxSteps`, and prompts that could render past `maxPromptChars`
 * from the input and variables alone: a certain risk, refused when saved.
 * Prompts that reach the bound only through step outputs fail at run time.
 */
export const boundIssues = (
  steps: ReadonlyArray<Pick<Step, "id" | "prompt">>,
  limits: PromptLimits & { readonly maxSteps: number }
): ReadonlyArray<Issue> => {
  const issues: Array<Issue> = []
  if (steps.length > limits.maxSteps) {
    issues.push({ path: ["payload", "steps"], message: `Expected at most ${limits.maxSteps} steps (MAX_STEPS)` })
  }
  steps.forEach((step, index) => {
    const largest = largestRendering(step.prompt, limits)
    if (largest.chars > limits.maxPromptChars) {
      issues.push({
        path: ["payload", "steps", index, "prompt"],
        message:
          `Step \`${step.id}\` can render to ${largest.chars} characters ` +
          `(${largest.inputs} {{input}} of up to ${limits.maxInputChars}, ` +
          `${largest.variables} variables of up to ${limits.maxVariableChars}), ` +
          `over the ${limits.maxPromptChars} allowed (MAX_PROMPT_CHARS)`
      })
    }
  })
  return issues
}

/** The 400 listing every issue; its detail names the first. */
export const invalidSteps = (issues: ReadonlyArray<Issue>): BadRequest => {
  const first = issues[0]!
  const more = issues.length > 1 ? ` (and ${issues.length - 1} more)` : ""
  return new BadRequest({
    detail: `${first.path.join(".")}: ${first.message}${more}`,
    errors: issues.map((issue) => ({ path: [...issue.path], message: issue.message }))
  })
}

// ---------------------------------------------------------------------------
// The service
// ---------------------------------------------------------------------------

const notFound = (id: string) => new NotFound({ detail: `No orchestration ${id}` })

const noWebhook: WebhookState = { outputWebhookUrl: null, webhookEnabled: false, webhookDisabledReason: null }

/** Orchestration definitions of a tenant. */
export class Orchestrations extends Context.Service<Orchestrations>()("agent-host/Orchestrations", {
  make: Effect.gen(function* () {
    const repo = yield* OrchestrationsRepo
    const config = yield* AppConfig
    const limits = {
      maxPromptChars: config.maxPromptChars,
      maxInputChars: config.maxMessageChars,
      maxVariableChars: config.maxVariableChars,
      maxSteps: config.maxSteps
    }
    const webhooks = yield* Webhooks
    const quotas = yield* Limits

    /**
     * The whole definition is checked whenever steps are written. Every agent
     * must be one of the tenant's; an inactive agent is accepted here (it may
     * be reactivated before a run, and one can be deactivated after saving
     * anyway), so executions check agents again when they start.
     */
    const checkSteps = Traced.fn("Orchestrations.checkSteps")(function* (
      tenantId: TenantId,
      steps: ReadonlyArray<Step>
    ) {
      const issues = [
        ...boundIssues(steps, limits),
        ...stepIssues(steps),
        ...steps.flatMap((step, index) =>
          formatIssues(step.responseFormat, ["payload", "steps", index, "responseFormat"])
        )
      ]
      const known = yield* repo.existingAgents(tenantId, [...new Set(steps.map((step) => step.agentId))])
      steps.forEach((step, index) => {
        const agentTools = known.get(step.agentId)
        if (agentTools === undefined) {
          issues.push({ path: ["payload", "steps", index, "agentId"], message: `No agent ${step.agentId}` })
          return
        }
        // A step narrows its agent's tools; it cannot add any.
        step.toolIds?.forEach((toolId, i) => {
          if (!agentTools.has(toolId)) {
            issues.push({
              path: ["payload", "steps", index, "toolIds", i],
              message: `Tool ${JSON.stringify(toolId)} is not one of agent ${step.agentId}'s tools`
            })
          }
        })
      })
      if (issues.length > 0) return yield* invalidSteps(issues)
    })

    /** A page of the tenant's orchestrations; the key-authenticated list shows the active ones only. */
    const list = (tenantId: TenantId, page: PageRequest, options?: { readonly activeOnly: boolean }) =>
      repo.list(tenantId, page, options?.activeOnly ? "active" : undefined)

    const ownerOf = (id: string) => ({ kind: "orchestration" as const, id })

    const withWebhook = (
      orchestration: Orchestration,
      webhook: { readonly state: WebhookState; readonly signingSecret: string | null }
    ): OrchestrationView => ({
      ...orchestration,
      ...webhook.state,
      ...(webhook.signingSecret === null ? {} : { signingSecret: webhook.signingSecret })
    })

    const webhookChange = (input: { readonly outputWebhookUrl?: string | null; readonly webhookEnabled?: boolean }) =>
      input.outputWebhookUrl === undefined && input.webhookEnabled === undefined
        ? undefined
        : { url: input.outputWebhookUrl, enabled: input.webhookEnabled }

    /** The management routes' list: each orchestration with its webhook. */
    const listViews = Traced.fn("Orchestrations.listViews")(function* (tenantId: TenantId, query: PageRequest) {
      const page = yield* list(tenantId, query)
      const states = yield* webhooks.states(
        tenantId,
        "orchestration",
        page.data.map((orchestration) => orchestration.id)
      )
      return {
        ...page,
        data: page.data.map((orchestration) =>
          withWebhook(orchestration, { state: states.get(orchestration.id)!, signingSecret: null })
        )
      }
    })

    // The webhook is set once the orchestration exists; a URL it refuses
    // (400) takes the new orchestration away again.
    const create = Traced.fn("Orchestrations.create")(function* (tenantId: TenantId, input: CreateOrchestration) {
      const { outputWebhookUrl: _url, webhookEnabled: _enabled, ...fields } = input
      yield* checkSteps(tenantId, input.steps)
      const orchestration = yield* quotas.admit(tenantId, "orchestrations", repo.insert(tenantId, fields))
      const change = webhookChange(input)
      if (change === undefined) return withWebhook(orchestration, { state: noWebhook, signingSecret: null })
      const webhook = yield* webhooks
        .configure(tenantId, ownerOf(orchestration.id), change, ["payload", "outputWebhookUrl"])
        .pipe(Effect.tapError(() => repo.remove(tenantId, orchestration.id)))
      return withWebhook(orchestration, webhook)
    })

    const get = Traced.fn("Orchestrations.get")(function* (tenantId: TenantId, id: OrchestrationId) {
      const orchestration = yield* repo.findById(tenantId, id)
      if (Option.isNone(orchestration)) return yield* notFound(id)
      return orchestration.value
    })

    const view = Traced.fn("Orchestrations.view")(function* (tenantId: TenantId, id: OrchestrationId) {
      const orchestration = yield* get(tenantId, id)
      return withWebhook(orchestration, { state: yield* webhooks.state(tenantId, ownerOf(id)), signingSecret: null })
    })

    // Invalid steps are refused before the lookup, the same way for a missing
    // orchestration and another tenant's: the answer tells nothing about either.
    const update = Traced.fn("Orchestrations.update")(function* (
      tenantId: TenantId,
      id: OrchestrationId,
      input: UpdateOrchestration
    ) {
      if (input.steps !== undefined) yield* checkSteps(tenantId, input.steps)
      const change = webhookChange(input)
      // A refused webhook URL changes nothing else: it is set (and checked) first, on an orchestration that exists.
      const webhook =
        change === undefined
          ? { state: yield* webhooks.state(tenantId, ownerOf(id)), signingSecret: null }
          : yield* Effect.andThen(
              get(tenantId, id),
              webhooks.configure(tenantId, ownerOf(id), change, ["payload", "outputWebhookUrl"])
            )
      const orchestration = yield* repo.update(tenantId, id, input)
      if (Option.isNone(orchestration)) return yield* notFound(id)
      return withWebhook(orchestration.value, webhook)
    })

    const remove = Traced.fn("Orchestrations.remove")(function* (tenantId: TenantId, id: OrchestrationId) {
      const removed = yield* repo.remove(tenantId, id)
      if (!removed) return yield* notFound(id)
      yield* webhooks.remove(tenantId, ownerOf(id))
    })

    const webhook = ownedWebhook({ service: "Orchestrations", webhooks, owner: ownerOf, find: get })

    return { list, listViews, create, get, view, update, remove, ...webhook } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make).pipe(Layer.provide([OrchestrationsRepo.layer, Limits.layer]))
}
