import { type FormEvent, useEffect, useRef, useState } from "react"
import { AgentId, type TeamId } from "../../../src/Domain/Ids.ts"
import { runEventNames, type TeamRunWithTranscript, type TeamView as Team } from "../../../src/Teams/Api.ts"
import { useAllAgents } from "../agents/hooks.ts"
import { navigate, type Route, withQuery } from "../router.tsx"
import { ApiProblem, call, urls } from "../shared/api.ts"
import { pageQuery, usePaged, useSelected } from "../shared/data.ts"
import { idOf } from "../shared/ids.ts"
import { followEvents } from "../shared/sse.ts"
import { roomDeliveries, useDeliveries } from "../webhooks/hooks.ts"

type RunWithTranscript = typeof TeamRunWithTranscript.Type

export interface TeamDraft {
  name: string
  description: string
  members: Array<{ agentId: string; role: string }>
  turnTaking: "round_robin" | "leader"
  leaderAgentId: string
  maxTurns: number
  webhookUrl: string
  webhookEnabled: boolean
}

const emptyDraft: TeamDraft = {
  name: "",
  description: "",
  members: [],
  turnTaking: "round_robin",
  leaderAgentId: "",
  maxTurns: 12,
  webhookUrl: "",
  webhookEnabled: true
}
const draftOf = (t: Team): TeamDraft => ({
  name: t.name,
  description: t.description,
  members: t.members.map((m) => ({ agentId: m.agentId, role: m.role })),
  turnTaking: t.turnTaking,
  leaderAgentId: t.leaderAgentId ?? "",
  maxTurns: t.maxTurns,
  webhookUrl: t.room.outputWebhookUrl ?? "",
  webhookEnabled: t.room.webhookEnabled
})

/** The request body of a draft: the members and the leader, picked in the form, decoded as AgentIds. */
export const toPayload = (d: TeamDraft) => ({
  name: d.name,
  description: d.description,
  members: d.members.map((m) => ({ agentId: idOf(AgentId, m.agentId), role: m.role })),
  turnTaking: d.turnTaking,
  leaderAgentId: d.turnTaking === "leader" && d.leaderAgentId !== "" ? idOf(AgentId, d.leaderAgentId) : null,
  maxTurns: d.maxTurns,
  room: { outputWebhookUrl: d.webhookUrl === "" ? null : d.webhookUrl, webhookEnabled: d.webhookEnabled }
})

export const finalStatuses = new Set(["completed", "failed", "cancelled"])

/**
 * A run and its transcript (a page at a time: the first comes with the run),
 * read again at every (re)connection of its event stream and after each turn.
 * `onFinal` runs once, when a run this screen started or saw unfinished is
 * read finished.
 */
export const useTeamRun = (teamId: TeamId, runId: string, startedHere: boolean, onFinal: () => void) => {
  const [read, setRead] = useState<RunWithTranscript>()
  // Reads of the run may answer out of order: only a newer one replaces what is shown.
  const reads = useRef({ sent: 0, shown: 0 })
  const transcript = usePaged(
    (cursor) => {
      if (cursor !== undefined)
        return call((c) => c.teams.transcript({ params: { id: teamId, runId }, query: pageQuery(cursor) }))
      const sent = ++reads.current.sent
      return call((c) => c.teams.getRun({ params: { id: teamId, runId } })).then((run) => {
        if (sent > reads.current.shown) {
          reads.current.shown = sent
          setRead(run)
        }
        return run.transcript
      })
    },
    [teamId, runId]
  )
  const run = read?.runId === runId ? read : undefined
  const [speaking, setSpeaking] = useState<string>()
  const seenUnfinished = useRef<string>(undefined)
  const notified = useRef<string>(undefined)
  useEffect(() => {
    if (run === undefined) return
    if (!finalStatuses.has(run.status)) seenUnfinished.current = runId
    else if ((startedHere || seenUnfinished.current === runId) && notified.current !== runId) {
      notified.current = runId
      onFinal()
    }
  }, [run?.runId, run?.status, runId, startedHere])
  const finished = run !== undefined && finalStatuses.has(run.status)
  useEffect(() => {
    if (finished) return
    const close = followEvents(urls.teams.events({ params: { id: teamId, runId } }), runEventNames, {
      onOpen: transcript.reload,
      onEvent: (event) => {
        const data = event.data as { agentId?: string }
        if (event.event === "turn.started") setSpeaking(data.agentId)
        if (event.event === "turn.completed") {
          setSpeaking(undefined)
          transcript.reload()
        }
        if ((event.event.startsWith("run.") && event.event !== "run.running") || event.event === "stream.end") {
          close()
          transcript.reload()
        }
      }
    })
    return close
  }, [teamId, runId, finished])
  const cancel = () =>
    call((c) => c.teams.cancel({ params: { id: teamId, runId } })).then(transcript.reload, () => undefined)
  return { run, error: transcript.error, transcript, speaking, finished, cancel }
}

/**
 * The teams screen's data: the list, the team selected in the URL (`?team=`)
 * in a form (members, turn-taking, the room's webhook), or a new one's; its
 * signing secret when one is shown; starting a run, its runs and its room's
 * delivery log, each a page at a time.
 */
export const useTeams = (route: Route, teamId: TeamId | null) => {
  const list = usePaged((cursor) => call((c) => c.teams.list({ query: pageQuery(cursor) })), [])
  const { agents } = useAllAgents()
  const selection = useSelected(list, teamId, (id) => call((c) => c.teams.get({ params: { id } })))
  const team = selection.item
  const runs = usePaged(
    teamId
      ? (cursor) => call((c) => c.teams.runs({ params: { id: teamId }, query: pageQuery(cursor, 20) }))
      : undefined,
    [teamId]
  )
  const deliveries = useDeliveries(teamId ? roomDeliveries(teamId) : undefined)
  const [startedRun, setStartedRun] = useState<string>()
  const [draft, setDraft] = useState<TeamDraft>(emptyDraft)
  const [problem, setProblem] = useState<unknown>()
  const [secret, setSecret] = useState<string>()
  const [saved, setSaved] = useState("")
  const [mission, setMission] = useState("")
  const [runProblem, setRunProblem] = useState<unknown>()

  useEffect(() => {
    setDraft(team ? draftOf(team) : emptyDraft)
    setProblem(undefined)
  }, [team?.id, team?.updatedAt.getTime()])

  const save = async (event: FormEvent) => {
    event.preventDefault()
    setProblem(undefined)
    setSaved("")
    try {
      const result = team
        ? await call((c) => c.teams.update({ params: { id: team.id }, payload: toPayload(draft) }))
        : await call((c) => c.teams.create({ payload: toPayload(draft) }))
      if (result.room.signingSecret !== undefined) setSecret(result.room.signingSecret)
      setSaved(team ? "Saved." : "Created.")
      list.reload()
      selection.reload()
      if (!team) navigate(withQuery(route, { team: result.id, run: null }), { replace: true })
    } catch (error) {
      setProblem(error)
    }
  }

  const rotate = async () => {
    if (!team) return
    try {
      setSecret((await call((c) => c.teams.rotateSecret({ params: { id: team.id } }))).signingSecret)
    } catch (error) {
      setProblem(error)
    }
  }

  const start = async (event: FormEvent) => {
    event.preventDefault()
    if (!team) return
    setRunProblem(undefined)
    try {
      const started = await call((c) => c.teams.run({ params: { id: team.id }, headers: {}, payload: { mission } }))
      setStartedRun(started.runId)
      navigate(withQuery(route, { run: started.runId }), { replace: true })
      runs.reload()
    } catch (error) {
      setRunProblem(error)
    }
  }

  /** A run ended: the runs are read again, and the room's log until its delivery shows. */
  const runFinished = () => {
    runs.reload()
    if (team?.room.outputWebhookUrl) deliveries.awaitNew()
  }

  const member = (agentId: string) => draft.members.find((m) => m.agentId === agentId)
  const toggleMember = (agentId: string, on: boolean) =>
    setDraft((d) => ({
      ...d,
      members: on ? [...d.members, { agentId, role: "" }] : d.members.filter((m) => m.agentId !== agentId)
    }))
  const setRole = (agentId: string, role: string) =>
    setDraft((d) => ({ ...d, members: d.members.map((m) => (m.agentId === agentId ? { ...m, role } : m)) }))
  const fieldError = (field: string) =>
    problem instanceof ApiProblem ? problem.messagesFor(`payload.${field}`)[0] : undefined

  return {
    list,
    agents,
    team,
    runs,
    deliveries,
    draft,
    setDraft,
    member,
    toggleMember,
    setRole,
    save,
    saved,
    problem,
    fieldError,
    secret,
    dismissSecret: () => setSecret(undefined),
    rotate,
    mission,
    setMission,
    start,
    startedRun,
    runProblem,
    runFinished
  }
}
