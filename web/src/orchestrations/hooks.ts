import { type FormEvent, useEffect, useState } from "react"
import { AgentId, type OrchestrationId } from "../../../src/Domain/Ids.ts"
import { type Execution, executionEventNames, type OrchestrationView } from "../../../src/Orchestrations/Api.ts"
import { useAllAgents } from "../agents/hooks.ts"
import { navigate, type Route, withQuery } from "../router.tsx"
import { ApiProblem, call, urls } from "../shared/api.ts"
import { pageQuery, usePaged, useSelected } from "../shared/data.ts"
import { idOf } from "../shared/ids.ts"
import { followEvents } from "../shared/sse.ts"
import type { ToolCallRecord } from "../../../src/Tools/ToolCall.ts"

/** A tool call of an execution: on a retry, those of its carried steps say so. */
export type ExecutionToolCall = ToolCallRecord & { readonly carried?: boolean }

export interface StepDraft {
  id: string
  agentId: string
  prompt: string
  dependsOn: Array<string>
}

export interface OrchestrationDraft {
  name: string
  description: string
  steps: Array<StepDraft>
}

const newStep = (index: number, agentId = ""): StepDraft => ({
  id: `step${index + 1}`,
  agentId,
  prompt: "",
  dependsOn: []
})
const draftOf = (o: OrchestrationView): OrchestrationDraft => ({
  name: o.name,
  description: o.description,
  steps: o.steps.map((s) => ({ id: s.id, agentId: s.agentId, prompt: s.prompt, dependsOn: [...(s.dependsOn ?? [])] }))
})

/** The request body of a draft: each step's agent, picked in a select, decoded as an AgentId. */
export const toPayload = (d: OrchestrationDraft) => ({
  name: d.name,
  description: d.description,
  steps: d.steps.map((s) => ({
    id: s.id,
    agentId: idOf(AgentId, s.agentId),
    prompt: s.prompt,
    ...(s.dependsOn.length > 0 ? { dependsOn: s.dependsOn } : {})
  }))
})

export const finalStatuses = new Set(["completed", "failed", "cancelled"])

/**
 * An execution followed live: its stored state, read again at every
 * (re)connection of its event stream, updated by the events in between.
 */
export const useLiveExecution = (initial: Execution, onFinal: () => void) => {
  const [execution, setExecution] = useState(initial)
  const [log, setLog] = useState<Array<string>>([])
  // Counts the events after which the execution's tool calls read differently.
  const [callEvents, setCallEvents] = useState(0)
  useEffect(() => setExecution(initial), [initial])
  useEffect(() => {
    if (finalStatuses.has(initial.status)) return
    const reread = () =>
      call((c) => c.executions.get({ params: { id: initial.id } })).then(setExecution, () => undefined)
    const close = followEvents(urls.executions.events({ params: { id: initial.id } }), executionEventNames, {
      onOpen: reread,
      onEvent: (event) => {
        const data = event.data as { stepId?: string; tokens?: number; carried?: boolean }
        if (event.event !== "stream.end")
          setLog((l) => [
            ...l,
            data.stepId ? `${event.event} ${data.stepId}${data.carried ? " (carried)" : ""}` : event.event
          ])
        if (event.event === "execution.running") setExecution((e) => ({ ...e, status: "running" }))
        if (event.event.startsWith("tool.") || event.event === "step.completed") setCallEvents((n) => n + 1)
        if (
          (event.event.startsWith("execution.") && event.event !== "execution.running") ||
          event.event === "stream.end"
        ) {
          close()
          void reread().then(onFinal)
        }
      }
    })
    return close
  }, [initial.id])
  const cancel = () => call((c) => c.executions.cancel({ params: { id: execution.id } })).catch(() => undefined)
  /** A new execution of this failed or cancelled one, carrying its completed steps: its id. */
  const retry = () =>
    call((c) => c.executions.retry({ params: { id: execution.id }, headers: {} })).then(
      (started) => started.executionId
    )
  return { execution, log, cancel, retry, callEvents }
}

/**
 * The tool calls of a shown execution, by step (in the order first asked),
 * read again whenever `version` changes (a tool event, a step's end, the
 * execution's).
 */
export const useExecutionToolCalls = (executionId: string, version: unknown) => {
  const [calls, setCalls] = useState<ReadonlyArray<ExecutionToolCall>>()
  const [problem, setProblem] = useState<unknown>()
  useEffect(() => {
    let current = true
    call((c) => c.executions.toolCalls({ params: { id: executionId } })).then(
      (list) => {
        if (!current) return
        setCalls(list.data)
        setProblem(undefined)
      },
      (error) => current && setProblem(error)
    )
    return () => {
      current = false
    }
  }, [executionId, version])
  const steps = new Map<string, Array<ExecutionToolCall>>()
  for (const c of calls ?? []) steps.set(c.scope, [...(steps.get(c.scope) ?? []), c])
  const wholeResult = (c: ToolCallRecord) =>
    call((client) =>
      client.executions.toolCall({ params: { id: executionId, stepId: c.scope, callId: c.callId } })
    ).then((read) => read.fullResult)
  return { loaded: calls !== undefined, steps: [...steps], problem, wholeResult }
}

/**
 * The orchestrations screen's data: the list, the one selected in the URL
 * (`?orchestration=`) in a step editor, or a new one's; saving, deleting,
 * executing, and the selected one's executions (a page at a time).
 */
export const useOrchestrations = (route: Route, selected: OrchestrationId | null) => {
  const list = usePaged((cursor) => call((c) => c.orchestrations.list({ query: pageQuery(cursor) })), [])
  const { agents } = useAllAgents()
  const selection = useSelected(list, selected, (id) => call((c) => c.orchestrations.get({ params: { id } })))
  const current = selection.item
  const executions = usePaged(
    selected
      ? (cursor) => call((c) => c.executions.list({ query: { ...pageQuery(cursor, 20), orchestrationId: selected } }))
      : undefined,
    [selected]
  )
  const [draft, setDraft] = useState<OrchestrationDraft>({ name: "", description: "", steps: [newStep(0)] })
  const [problem, setProblem] = useState<unknown>()
  const [saved, setSaved] = useState("")
  const [input, setInput] = useState("")
  const [variables, setVariables] = useState<Array<{ name: string; value: string }>>([])
  const [runProblem, setRunProblem] = useState<unknown>()

  const firstAgentId = agents?.[0]?.id ?? ""
  useEffect(() => {
    setDraft(current ? draftOf(current) : { name: "", description: "", steps: [newStep(0, firstAgentId)] })
    setProblem(undefined)
  }, [current?.id, current?.updatedAt.getTime()])
  // The agents arrive after the form may have been filled in: they only give
  // a new orchestration's steps that have none their default agent, and never
  // reset what was typed.
  useEffect(() => {
    if (current || firstAgentId === "") return
    setDraft((d) =>
      d.steps.some((s) => s.agentId === "")
        ? { ...d, steps: d.steps.map((s) => (s.agentId === "" ? { ...s, agentId: firstAgentId } : s)) }
        : d
    )
  }, [firstAgentId])

  const save = async (event: FormEvent) => {
    event.preventDefault()
    setProblem(undefined)
    setSaved("")
    try {
      if (current) {
        await call((c) => c.orchestrations.update({ params: { id: current.id }, payload: toPayload(draft) }))
        setSaved("Saved.")
      } else {
        const made = await call((c) => c.orchestrations.create({ payload: toPayload(draft) }))
        setSaved("Created.")
        navigate(withQuery(route, { orchestration: made.id }), { replace: true })
      }
      list.reload()
      selection.reload()
    } catch (error) {
      setProblem(error)
    }
  }

  const execute = async (event: FormEvent) => {
    event.preventDefault()
    if (!current) return
    setRunProblem(undefined)
    try {
      const vars = Object.fromEntries(variables.filter((v) => v.name !== "").map((v) => [v.name, v.value]))
      const started = await call((c) =>
        c.orchestrations.execute({
          params: { id: current.id },
          headers: {},
          payload: { input, ...(Object.keys(vars).length > 0 ? { variables: vars } : {}) }
        })
      )
      navigate(withQuery(route, { execution: started.executionId }), { replace: true })
      executions.reload()
    } catch (error) {
      setRunProblem(error)
    }
  }

  const remove = async () => {
    if (!current) return
    await call((c) => c.orchestrations.remove({ params: { id: current.id } })).catch(setProblem)
    navigate(withQuery(route, { orchestration: null, execution: null }), { replace: true })
    list.reload()
  }

  const setStep = (index: number, change: Partial<StepDraft>) =>
    setDraft((d) => ({ ...d, steps: d.steps.map((s, i) => (i === index ? { ...s, ...change } : s)) }))
  const addStep = () => setDraft((d) => ({ ...d, steps: [...d.steps, newStep(d.steps.length, firstAgentId)] }))
  const removeStep = (index: number) => setDraft((d) => ({ ...d, steps: d.steps.filter((_, i) => i !== index) }))
  const stepErrors = (index: number) =>
    problem instanceof ApiProblem ? problem.messagesFor(`payload.steps.${index}`) : []
  const fieldError = (field: string) =>
    problem instanceof ApiProblem ? problem.messagesFor(`payload.${field}`)[0] : undefined
  const generalErrors =
    problem instanceof ApiProblem ? problem.errors.filter((e) => !/^payload\.steps\.\d+/.test(e.path)) : []

  return {
    list,
    agents,
    current,
    executions,
    draft,
    setDraft,
    setStep,
    addStep,
    removeStep,
    save,
    saved,
    problem,
    stepErrors,
    fieldError,
    generalErrors,
    remove,
    run: { input, setInput, variables, setVariables, execute, problem: runProblem }
  }
}
