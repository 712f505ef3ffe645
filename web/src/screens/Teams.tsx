import { type FormEvent, useEffect, useRef, useState } from "react"
import { runEventNames, type Team, type TeamRun } from "../../../src/Teams/Api.ts"
import { ApiProblem, call, urls } from "../api.ts"
import { ApiCall, CopyButton, Field, formatDate, ProblemMessage, useLoad } from "../components.tsx"
import { navigate, type Route, withQuery } from "../router.tsx"
import { followEvents } from "../sse.ts"

interface Draft {
  name: string
  description: string
  members: Array<{ agentId: string; role: string }>
  turnTaking: "round_robin" | "leader"
  leaderAgentId: string
  maxTurns: number
  webhookUrl: string
  webhookEnabled: boolean
}

const emptyDraft: Draft = { name: "", description: "", members: [], turnTaking: "round_robin", leaderAgentId: "", maxTurns: 12, webhookUrl: "", webhookEnabled: true }
const draftOf = (t: Team): Draft => ({
  name: t.name,
  description: t.description,
  members: t.members.map((m) => ({ agentId: m.agentId, role: m.role })),
  turnTaking: t.turnTaking,
  leaderAgentId: t.leaderAgentId ?? "",
  maxTurns: t.maxTurns,
  webhookUrl: t.room.outputWebhookUrl ?? "",
  webhookEnabled: t.room.webhookEnabled
})
const toPayload = (d: Draft) => ({
  name: d.name,
  description: d.description,
  members: d.members.map((m) => ({ agentId: m.agentId as never, role: m.role })),
  turnTaking: d.turnTaking,
  leaderAgentId: d.turnTaking === "leader" && d.leaderAgentId !== "" ? d.leaderAgentId as never : null,
  maxTurns: d.maxTurns,
  room: { outputWebhookUrl: d.webhookUrl === "" ? null : d.webhookUrl, webhookEnabled: d.webhookEnabled }
})

const final = new Set(["completed", "failed", "cancelled"])

/** A run and its transcript, read again at every (re)connection of its event stream and after each turn. */
const RunDetail = ({ teamId, runId, startedHere, onFinal }: {
  readonly teamId: string
  readonly runId: string
  /** The run was started from this screen: it may be finished by the time it is first read. */
  readonly startedHere: boolean
  readonly onFinal: () => void
}) => {
  const run = useLoad(() => call((c) => c.teams.getRun({ params: { id: teamId as never, runId } })), [teamId, runId])
  const [speaking, setSpeaking] = useState<string>()
  // `onFinal` once per run, when a run this screen started or saw unfinished
  // is read finished (from its final event or from a read again).
  const seenUnfinished = useRef<string>(undefined)
  const notified = useRef<string>(undefined)
  useEffect(() => {
    if (run.data === undefined || run.data.runId !== runId) return
    if (!final.has(run.data.status)) seenUnfinished.current = runId
    else if ((startedHere || seenUnfinished.current === runId) && notified.current !== runId) {
      notified.current = runId
      onFinal()
    }
  }, [run.data?.runId, run.data?.status, runId, startedHere])
  useEffect(() => {
    if (run.data && final.has(run.data.status)) return
    const close = followEvents(urls.teams.events({ params: { id: teamId as never, runId } }), runEventNames, {
      onOpen: run.reload,
      onEvent: (event) => {
        const data = event.data as { agentId?: string }
        if (event.event === "turn.started") setSpeaking(data.agentId)
        if (event.event === "turn.completed") {
          setSpeaking(undefined)
          run.reload()
        }
        if (event.event.startsWith("run.") && event.event !== "run.running" || event.event === "stream.end") {
          close()
          run.reload()
        }
      }
    })
    return close
  }, [teamId, runId, run.data !== undefined && final.has(run.data.status)])
  const r = run.data
  if (r === undefined) return run.error !== undefined ? <ProblemMessage problem={run.error} /> : <p role="status">Loading the run…</p>
  return (
    <div className="detail" data-testid="run-detail" data-status={r.status}>
      <p><strong>Mission:</strong> {r.mission}</p>
      <p>
        <span className={`status status-${r.status}`}>{r.status}</span>
        {r.stopReason && ` · stopped: ${r.stopReason}`} · {r.turns} turns · {r.tokensUsed} tokens
        {r.durationMs !== null && ` · ${r.durationMs} ms`}
      </p>
      {speaking && <p className="muted" role="status">Speaking: {speaking}</p>}
      <ol className="messages">
        {r.transcript.data.map((turn) => (
          <li key={turn.index}>
            <p><span className="who">{turn.role}</span> <span className="muted">({turn.agentId})</span></p>
            <p>{turn.content}</p>
            <p className="muted meta">{turn.tokens} tokens · {formatDate(turn.createdAt)}</p>
          </li>
        ))}
      </ol>
      {r.result !== null && <><h4>Result</h4><pre tabIndex={0} data-testid="run-result">{r.result}</pre></>}
      {r.error !== null && <p className="field-error">{r.error}</p>}
      {!final.has(r.status) && (
        <button type="button" className="danger" onClick={() => call((c) => c.teams.cancel({ params: { id: teamId as never, runId } })).then(run.reload, () => undefined)}>
          Cancel the run
        </button>
      )}
    </div>
  )
}

/** Teams: members and turn-taking, the room's webhook (secret shown once, rotation), runs with transcripts, the delivery log. */
export const TeamsScreen = ({ route }: { readonly route: Route }) => {
  const teamId = route.query.get("team")
  const runId = route.query.get("run")
  const teams = useLoad(() => call((c) => c.teams.list({ query: { limit: 100 } })), [])
  const agents = useLoad(() => call((c) => c.agents.list({ query: { limit: 100 } })), [])
  const team = teams.data?.data.find((t) => t.id === teamId)
  const runs = useLoad(() => teamId ? call((c) => c.teams.runs({ params: { id: teamId as never }, query: { limit: 20 } })) : Promise.resolve(undefined), [teamId])
  const deliveries = useLoad(() => teamId ? call((c) => c.teams.deliveries({ params: { id: teamId as never }, query: { limit: 20 } })) : Promise.resolve(undefined), [teamId])
  // After a run ends, its delivery is logged once the receiver has answered:
  // the log is read again every second until an event not seen before
  // appears, for up to a minute.
  const [startedRun, setStartedRun] = useState<string>()
  const [awaitedDelivery, setAwaitedDelivery] = useState<{ readonly known: ReadonlySet<string>; readonly until: number }>()
  useEffect(() => {
    if (awaitedDelivery === undefined || deliveries.loading) return
    const arrived = deliveries.data?.data.some((d) => !awaitedDelivery.known.has(d.eventId)) ?? false
    if (arrived || Date.now() > awaitedDelivery.until) {
      setAwaitedDelivery(undefined)
      return
    }
    const timer = setTimeout(deliveries.reload, 1_000)
    return () => clearTimeout(timer)
  }, [awaitedDelivery, deliveries.loading, deliveries.data])
  const [draft, setDraft] = useState<Draft>(emptyDraft)
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
      teams.reload()
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

  const redeliver = async (eventId: string) => {
    if (!team) return
    await call((c) => c.teams.redeliver({ params: { id: team.id, eventId } })).catch(setProblem)
    deliveries.reload()
  }

  const member = (agentId: string) => draft.members.find((m) => m.agentId === agentId)
  const toggle = (agentId: string, on: boolean) =>
    setDraft((d) => ({ ...d, members: on ? [...d.members, { agentId, role: "" }] : d.members.filter((m) => m.agentId !== agentId) }))
  const fieldError = (field: string) => problem instanceof ApiProblem ? problem.messagesFor(`payload.${field}`)[0] : undefined

  return (
    <>
      <h1>Teams</h1>
      <div className="split">
        <section aria-labelledby="teams-list">
          <h2 id="teams-list">Your teams</h2>
          <button type="button" className="secondary" onClick={() => navigate(withQuery(route, { team: null, run: null }))}>New team</button>
          <ul className="list">
            {teams.data?.data.map((t) => (
              <li key={t.id}>
                <a
                  href={`/app/teams?team=${t.id}`}
                  aria-current={t.id === teamId ? "true" : undefined}
                  onClick={(e) => {
                    e.preventDefault()
                    setSecret(undefined)
                    navigate(withQuery(route, { team: t.id, run: null }))
                  }}
                >
                  <strong>{t.name}</strong> <span className="muted">{t.members.length} members · {t.turnTaking.replace("_", " ")}</span>
                </a>
              </li>
            ))}
          </ul>
        </section>
        <section aria-labelledby="team-form">
          <h2 id="team-form">{team ? `Edit ${team.name}` : "New team"}</h2>
          {secret && (
            <section className="reveal" aria-labelledby="secret-title">
              <h3 id="secret-title">The room's signing secret</h3>
              <p>Shown once: verify the webhook's signatures with it (Standard Webhooks).</p>
              <p><output className="secret" data-testid="signing-secret">{secret}</output></p>
              <CopyButton text={secret} label="Copy the secret" />
              <button type="button" className="secondary" onClick={() => setSecret(undefined)}>I have stored it</button>
            </section>
          )}
          <form onSubmit={save} noValidate>
            <Field label="Name" error={fieldError("name")}>
              {(props) => <input {...props} value={draft.name} onChange={(e) => setDraft({ ...draft, name: e.target.value })} />}
            </Field>
            <Field label="Description">
              {(props) => <input {...props} value={draft.description} onChange={(e) => setDraft({ ...draft, description: e.target.value })} />}
            </Field>
            <fieldset>
              <legend>Members, in speaking order</legend>
              {agents.data?.data.map((a) => (
                <div key={a.id} className="member">
                  <label className="check">
                    <input type="checkbox" checked={member(a.id) !== undefined} onChange={(e) => toggle(a.id, e.target.checked)} />
                    {a.name}
                  </label>
                  {member(a.id) && (
                    <input
                      aria-label={`Role of ${a.name}`}
                      placeholder="Role"
                      value={member(a.id)!.role}
                      onChange={(e) => setDraft((d) => ({ ...d, members: d.members.map((m) => m.agentId === a.id ? { ...m, role: e.target.value } : m) }))}
                    />
                  )}
                </div>
              ))}
              {fieldError("members") && <p className="field-error">{fieldError("members")}</p>}
            </fieldset>
            <Field label="Turn-taking">
              {(props) => (
                <select {...props} value={draft.turnTaking} onChange={(e) => setDraft({ ...draft, turnTaking: e.target.value as Draft["turnTaking"] })}>
                  <option value="round_robin">Round robin</option>
                  <option value="leader">A leader picks who speaks</option>
                </select>
              )}
            </Field>
            {draft.turnTaking === "leader" && (
              <Field label="Leader" error={fieldError("leaderAgentId")}>
                {(props) => (
                  <select {...props} value={draft.leaderAgentId} onChange={(e) => setDraft({ ...draft, leaderAgentId: e.target.value })}>
                    <option value="">Choose a member…</option>
                    {draft.members.map((m) => <option key={m.agentId} value={m.agentId}>{agents.data?.data.find((a) => a.id === m.agentId)?.name ?? m.agentId}</option>)}
                  </select>
                )}
              </Field>
            )}
            <Field label="Most turns" error={fieldError("maxTurns")}>
              {(props) => <input {...props} type="number" min={1} max={50} value={draft.maxTurns} onChange={(e) => setDraft({ ...draft, maxTurns: Number(e.target.value) })} />}
            </Field>
            <Field label="Output webhook URL" hint="Each finished run is sent here, signed." error={fieldError("room.outputWebhookUrl")}>
              {(props) => <input {...props} type="url" value={draft.webhookUrl} onChange={(e) => setDraft({ ...draft, webhookUrl: e.target.value })} />}
            </Field>
            <label className="check">
              <input type="checkbox" checked={draft.webhookEnabled} onChange={(e) => setDraft({ ...draft, webhookEnabled: e.target.checked })} />
              Webhook enabled
            </label>
            {team?.room.webhookDisabledReason && <p className="field-error">Disabled by the service: {team.room.webhookDisabledReason}</p>}
            <ProblemMessage problem={problem} />
            <p role="status" className="saved">{saved}</p>
            <div className="actions">
              <button type="submit">{team ? "Save" : "Create team"}</button>
              {team?.room.outputWebhookUrl && <button type="button" className="secondary" onClick={rotate}>Rotate the signing secret</button>}
            </div>
          </form>
          <ApiCall call={team ? { method: "PUT", path: `/api/teams/${team.id}`, body: toPayload(draft) } : { method: "POST", path: "/api/teams", body: toPayload(draft) }} />

          {team && (
            <>
              <h2 id="run-title">Run</h2>
              <form onSubmit={start} aria-labelledby="run-title" noValidate>
                <Field label="Mission" error={runProblem instanceof ApiProblem ? runProblem.messagesFor("payload.mission")[0] : undefined}>
                  {(props) => <textarea {...props} rows={2} value={mission} onChange={(e) => setMission(e.target.value)} />}
                </Field>
                <ProblemMessage problem={runProblem instanceof ApiProblem && runProblem.errors.length > 0 ? undefined : runProblem} />
                <button type="submit">Start the run</button>
              </form>
              <ApiCall call={{ method: "POST", path: `/api/public/teams/${team.id}/run`, body: { mission: mission || "..." }, credential: "key" }} />

              <h2>Runs</h2>
              {runs.data && runs.data.data.length === 0 && <p>No runs yet.</p>}
              <ul className="list">
                {runs.data?.data.map((r: TeamRun) => (
                  <li key={r.runId}>
                    <a
                      href={`/app${withQuery(route, { run: r.runId })}`}
                      aria-current={r.runId === runId ? "true" : undefined}
                      onClick={(e) => {
                        e.preventDefault()
                        navigate(withQuery(route, { run: r.runId === runId ? null : r.runId }))
                      }}
                    >
                      <span className={`status status-${r.status}`}>{r.status}</span> {r.mission.slice(0, 60)} <span className="muted">{formatDate(r.createdAt)}</span>
                    </a>
                  </li>
                ))}
              </ul>
              {runId && <RunDetail teamId={team.id} runId={runId} startedHere={runId === startedRun} onFinal={() => {
                runs.reload()
                if (team.room.outputWebhookUrl) {
                  setAwaitedDelivery({
                    known: new Set(deliveries.data?.data.map((d) => d.eventId) ?? []),
                    until: Date.now() + 60_000
                  })
                }
              }} />}

              <h2>Webhook deliveries</h2>
              <button type="button" className="secondary" onClick={deliveries.reload}>Refresh</button>
              {deliveries.data && deliveries.data.data.length === 0 && <p>No deliveries yet.</p>}
              {deliveries.data && deliveries.data.data.length > 0 && (
                <table data-testid="deliveries">
                  <caption className="visually-hidden">Webhook deliveries</caption>
                  <thead><tr><th scope="col">When</th><th scope="col">Event</th><th scope="col">Attempt</th><th scope="col">Answer</th><th scope="col"><span className="visually-hidden">Actions</span></th></tr></thead>
                  <tbody>
                    {deliveries.data.data.map((d) => (
                      <tr key={`${d.eventId}-${d.redelivery}-${d.attempt}`}>
                        <td>{formatDate(d.at)}</td>
                        <td>{d.type} <code className="muted">{d.eventId}</code></td>
                        <td>{d.attempt}{d.redelivery > 0 && ` (redelivery ${d.redelivery})`}</td>
                        <td>{d.httpStatus ?? d.error} <span className="muted">{d.durationMs} ms</span></td>
                        <td><button type="button" className="secondary" aria-label={`Redeliver ${d.eventId}`} onClick={() => redeliver(d.eventId)}>Redeliver</button></td>
                      </tr>
                    ))}
                  </tbody>
                </table>
              )}
            </>
          )}
        </section>
      </div>
    </>
  )
}
