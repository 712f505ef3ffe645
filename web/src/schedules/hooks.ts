import { type FormEvent, useState } from "react"
import type { Schedule } from "../../../src/Schedules/Api.ts"
import { ApiProblem, call } from "../shared/api.ts"
import { allPages, pageQuery, useLoad, usePaged } from "../shared/data.ts"

// The schedules screen's data: the tenant's schedules, what its form may
// target (active orchestrations and teams), and the record of a schedule's slots.

export interface ScheduleDraft {
  readonly name: string
  readonly targetKind: "orchestration" | "team"
  readonly orchestrationId: string
  readonly input: string
  /** JSON object of variables, as typed. */
  readonly variables: string
  readonly teamId: string
  readonly mission: string
  readonly timing: "cron" | "interval"
  readonly cron: string
  readonly intervalSeconds: string
  readonly timezone: string
  readonly missedPolicy: "skip" | "run_once"
}

export const emptyDraft: ScheduleDraft = {
  name: "",
  targetKind: "orchestration",
  orchestrationId: "",
  input: "",
  variables: "{}",
  teamId: "",
  mission: "",
  timing: "cron",
  cron: "0 9 * * 1-5",
  intervalSeconds: "3600",
  timezone: Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC",
  missedPolicy: "skip"
}

export const draftOf = (schedule: Schedule): ScheduleDraft => {
  const target = schedule.target
  return {
    name: schedule.name,
    targetKind: "orchestrationId" in target ? "orchestration" : "team",
    orchestrationId: "orchestrationId" in target ? target.orchestrationId : "",
    input: "orchestrationId" in target ? target.input : "",
    variables: "orchestrationId" in target ? JSON.stringify(target.variables ?? {}, null, 2) : "{}",
    teamId: "teamId" in target ? target.teamId : "",
    mission: "teamId" in target ? target.mission : "",
    timing: schedule.cron !== null ? "cron" : "interval",
    cron: schedule.cron ?? emptyDraft.cron,
    intervalSeconds: String(schedule.intervalSeconds ?? emptyDraft.intervalSeconds),
    timezone: schedule.timezone,
    missedPolicy: schedule.missedPolicy
  }
}

/** The payload of a draft; a variables field that is not a JSON object of strings is sent as it is, for the API to name. */
const toPayload = (d: ScheduleDraft) => {
  let variables: Record<string, string> | undefined
  try {
    variables = JSON.parse(d.variables === "" ? "{}" : d.variables)
  } catch {
    variables = d.variables as never
  }
  return {
    name: d.name,
    target:
      d.targetKind === "orchestration"
        ? { orchestrationId: d.orchestrationId as never, input: d.input, variables: variables as never }
        : { teamId: d.teamId as never, mission: d.mission },
    ...(d.timing === "cron" ? { cron: d.cron } : { intervalSeconds: Number(d.intervalSeconds) }),
    timezone: d.timezone,
    missedPolicy: d.missedPolicy
  }
}

/** The active orchestrations and teams a schedule may run; undefined until read. */
export const useTargets = () =>
  useLoad(async () => {
    const [orchestrations, teams] = await Promise.all([
      allPages((cursor, limit) => call((c) => c.orchestrations.list({ query: pageQuery(cursor, limit) }))),
      allPages((cursor, limit) => call((c) => c.teams.list({ query: pageQuery(cursor, limit) })))
    ])
    return {
      orchestrations: orchestrations.filter((o) => o.status === "active"),
      teams: teams.filter((t) => t.status === "active")
    }
  }, []).data

/** A schedule's slots, newest first, a page at a time. */
export const useScheduleRuns = (scheduleId: string | undefined, version: unknown) =>
  usePaged(
    scheduleId === undefined
      ? undefined
      : (cursor) => call((c) => c.schedules.runs({ params: { id: scheduleId as never }, query: pageQuery(cursor) })),
    [scheduleId, version]
  )

/** The tenant's schedules, with creating, changing, pausing, resuming and deleting one. */
export const useSchedules = () => {
  const list = usePaged((cursor) => call((c) => c.schedules.list({ query: pageQuery(cursor) })), [])
  const [draft, setDraft] = useState<ScheduleDraft>(emptyDraft)
  const [editing, setEditing] = useState<Schedule>()
  const [problem, setProblem] = useState<unknown>()
  const [saved, setSaved] = useState("")

  const act = async (what: () => Promise<unknown>, done: string) => {
    setProblem(undefined)
    setSaved("")
    try {
      await what()
      setSaved(done)
      list.reload()
      return true
    } catch (error) {
      setProblem(error)
      return false
    }
  }

  const save = async (event: FormEvent) => {
    event.preventDefault()
    const payload = toPayload(draft)
    const ok = await act(
      () =>
        editing === undefined
          ? call((c) => c.schedules.create({ payload }))
          : call((c) => c.schedules.update({ params: { id: editing.id as never }, payload })),
      editing === undefined ? "Schedule created." : "Schedule saved."
    )
    if (ok) {
      setEditing(undefined)
      setDraft(emptyDraft)
    }
  }

  const edit = (schedule: Schedule | undefined) => {
    setEditing(schedule)
    setDraft(schedule === undefined ? emptyDraft : draftOf(schedule))
    setProblem(undefined)
  }

  const pause = (schedule: Schedule) =>
    act(() => call((c) => c.schedules.pause({ params: { id: schedule.id as never } })), "Schedule paused.")
  const resume = (schedule: Schedule) =>
    act(() => call((c) => c.schedules.resume({ params: { id: schedule.id as never } })), "Schedule resumed.")
  const remove = (schedule: Schedule) =>
    act(() => call((c) => c.schedules.remove({ params: { id: schedule.id as never } })), "Schedule deleted.")

  const fieldError = (path: string) => (problem instanceof ApiProblem ? problem.messagesFor(path)[0] : undefined)

  return { list, draft, setDraft, editing, edit, save, pause, resume, remove, problem, saved, fieldError }
}
