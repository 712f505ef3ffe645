import { TeamId } from "../../../src/Domain/Ids.ts"
import type { TeamRun } from "../../../src/Teams/Api.ts"
import { navigate, type Route, withQuery } from "../router.tsx"
import { ApiProblem } from "../shared/api.ts"
import { ApiCall, CopyButton, Field, formatDate, LoadMore, ProblemMessage } from "../shared/components.tsx"
import { queryId } from "../shared/ids.ts"
import { ToolCalls } from "../tools/ToolCalls.tsx"
import { DeliveryLog } from "../webhooks/DeliveryLog.tsx"
import { type TeamDraft, toPayload, useTeamRun, useTeams } from "./hooks.ts"

/** A run and its transcript, followed live. */
const RunDetail = ({
  teamId,
  runId,
  startedHere,
  onFinal
}: {
  readonly teamId: TeamId
  readonly runId: string
  /** The run was started from this screen: it may be finished by the time it is first read. */
  readonly startedHere: boolean
  readonly onFinal: () => void
}) => {
  const { run: r, error, transcript, speaking, finished, cancel } = useTeamRun(teamId, runId, startedHere, onFinal)
  if (r === undefined)
    return error !== undefined ? <ProblemMessage problem={error} /> : <p role="status">Loading the run…</p>
  return (
    <div className="detail" data-testid="run-detail" data-status={r.status}>
      <p>
        <strong>Mission:</strong> {r.mission}
      </p>
      <p>
        <span className={`status status-${r.status}`}>{r.status}</span>
        {r.stopReason && ` · stopped: ${r.stopReason}`} · {r.turns} turns · {r.tokensUsed} tokens
        {r.durationMs !== null && ` · ${r.durationMs} ms`}
      </p>
      {speaking && (
        <p className="muted" role="status">
          Speaking: {speaking}
        </p>
      )}
      <ol className="messages">
        {transcript.items?.map((turn) => (
          <li key={turn.index}>
            <p>
              <span className="who">{turn.role}</span> <span className="muted">({turn.agentId})</span>
            </p>
            <ToolCalls calls={turn.toolCalls} />
            <p>{turn.content}</p>
            <p className="muted meta">
              {turn.tokens} tokens · {formatDate(turn.createdAt)}
            </p>
          </li>
        ))}
      </ol>
      <LoadMore list={transcript} label="Load more turns" />
      {r.result !== null && (
        <>
          <h4>Result</h4>
          <pre tabIndex={0} data-testid="run-result">
            {r.result}
          </pre>
        </>
      )}
      {r.error !== null && <p className="field-error">{r.error}</p>}
      {!finished && (
        <button type="button" className="danger" onClick={cancel}>
          Cancel the run
        </button>
      )}
    </div>
  )
}

/** Teams: members and turn-taking, the room's webhook (secret shown once, rotation), runs with transcripts, the delivery log. */
export const TeamsScreen = ({ route }: { readonly route: Route }) => {
  const teamId = queryId(route, "team", TeamId)
  const runId = route.query.get("run")
  const {
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
    dismissSecret,
    rotate,
    mission,
    setMission,
    start,
    startedRun,
    runProblem,
    runFinished
  } = useTeams(route, teamId)

  return (
    <>
      <h1>Teams</h1>
      <div className="split">
        <section aria-labelledby="teams-list">
          <h2 id="teams-list">Your teams</h2>
          <button
            type="button"
            className="secondary"
            onClick={() => navigate(withQuery(route, { team: null, run: null }))}
          >
            New team
          </button>
          <ul className="list">
            {list.items?.map((t) => (
              <li key={t.id}>
                <a
                  href={`/app/teams?team=${t.id}`}
                  aria-current={t.id === teamId ? "true" : undefined}
                  onClick={(e) => {
                    e.preventDefault()
                    dismissSecret()
                    navigate(withQuery(route, { team: t.id, run: null }))
                  }}
                >
                  <strong>{t.name}</strong>{" "}
                  <span className="muted">
                    {t.members.length} members · {t.turnTaking.replace("_", " ")}
                  </span>
                </a>
              </li>
            ))}
          </ul>
          <LoadMore list={list} label="Load more teams" />
        </section>
        <section aria-labelledby="team-form">
          <h2 id="team-form">{team ? `Edit ${team.name}` : "New team"}</h2>
          {secret && (
            <section className="reveal" aria-labelledby="secret-title">
              <h3 id="secret-title">The room's signing secret</h3>
              <p>Shown once: verify the webhook's signatures with it (Standard Webhooks).</p>
              <p>
                <output className="secret" data-testid="signing-secret">
                  {secret}
                </output>
              </p>
              <CopyButton text={secret} label="Copy the secret" />
              <button type="button" className="secondary" onClick={dismissSecret}>
                I have stored it
              </button>
            </section>
          )}
          <form onSubmit={save} noValidate>
            <Field label="Name" error={fieldError("name")}>
              {(props) => (
                <input {...props} value={draft.name} onChange={(e) => setDraft({ ...draft, name: e.target.value })} />
              )}
            </Field>
            <Field label="Description">
              {(props) => (
                <input
                  {...props}
                  value={draft.description}
                  onChange={(e) => setDraft({ ...draft, description: e.target.value })}
                />
              )}
            </Field>
            <fieldset>
              <legend>Members, in speaking order</legend>
              {agents?.map((a) => (
                <div key={a.id} className="member">
                  <label className="check">
                    <input
                      type="checkbox"
                      checked={member(a.id) !== undefined}
                      onChange={(e) => toggleMember(a.id, e.target.checked)}
                    />
                    {a.name}
                  </label>
                  {member(a.id) && (
                    <input
                      aria-label={`Role of ${a.name}`}
                      placeholder="Role"
                      value={member(a.id)!.role}
                      onChange={(e) => setRole(a.id, e.target.value)}
                    />
                  )}
                </div>
              ))}
              {fieldError("members") && <p className="field-error">{fieldError("members")}</p>}
            </fieldset>
            <Field label="Turn-taking">
              {(props) => (
                <select
                  {...props}
                  value={draft.turnTaking}
                  onChange={(e) => setDraft({ ...draft, turnTaking: e.target.value as TeamDraft["turnTaking"] })}
                >
                  <option value="round_robin">Round robin</option>
                  <option value="leader">A leader picks who speaks</option>
                </select>
              )}
            </Field>
            {draft.turnTaking === "leader" && (
              <Field label="Leader" error={fieldError("leaderAgentId")}>
                {(props) => (
                  <select
                    {...props}
                    value={draft.leaderAgentId}
                    onChange={(e) => setDraft({ ...draft, leaderAgentId: e.target.value })}
                  >
                    <option value="">Choose a member…</option>
                    {draft.members.map((m) => (
                      <option key={m.agentId} value={m.agentId}>
                        {agents?.find((a) => a.id === m.agentId)?.name ?? m.agentId}
                      </option>
                    ))}
                  </select>
                )}
              </Field>
            )}
            <Field label="Most turns" error={fieldError("maxTurns")}>
              {(props) => (
                <input
                  {...props}
                  type="number"
                  min={1}
                  max={50}
                  value={draft.maxTurns}
                  onChange={(e) => setDraft({ ...draft, maxTurns: Number(e.target.value) })}
                />
              )}
            </Field>
            <Field
              label="Output webhook URL"
              hint="Each finished run is sent here, signed."
              error={fieldError("room.outputWebhookUrl")}
            >
              {(props) => (
                <input
                  {...props}
                  type="url"
                  value={draft.webhookUrl}
                  onChange={(e) => setDraft({ ...draft, webhookUrl: e.target.value })}
                />
              )}
            </Field>
            <label className="check">
              <input
                type="checkbox"
                checked={draft.webhookEnabled}
                onChange={(e) => setDraft({ ...draft, webhookEnabled: e.target.checked })}
              />
              Webhook enabled
            </label>
            {team?.room.webhookDisabledReason && (
              <p className="field-error">Disabled by the service: {team.room.webhookDisabledReason}</p>
            )}
            <ProblemMessage problem={problem} />
            <p role="status" className="saved">
              {saved}
            </p>
            <div className="actions">
              <button type="submit">{team ? "Save" : "Create team"}</button>
              {team?.room.outputWebhookUrl && (
                <button type="button" className="secondary" onClick={rotate}>
                  Rotate the signing secret
                </button>
              )}
            </div>
          </form>
          <ApiCall
            call={
              team
                ? { method: "PUT", path: `/api/teams/${team.id}`, body: toPayload(draft) }
                : { method: "POST", path: "/api/teams", body: toPayload(draft) }
            }
          />

          {team && (
            <>
              <h2 id="run-title">Run</h2>
              <form onSubmit={start} aria-labelledby="run-title" noValidate>
                <Field
                  label="Mission"
                  error={runProblem instanceof ApiProblem ? runProblem.messagesFor("payload.mission")[0] : undefined}
                >
                  {(props) => (
                    <textarea {...props} rows={2} value={mission} onChange={(e) => setMission(e.target.value)} />
                  )}
                </Field>
                <ProblemMessage
                  problem={runProblem instanceof ApiProblem && runProblem.errors.length > 0 ? undefined : runProblem}
                />
                <button type="submit">Start the run</button>
              </form>
              <ApiCall
                call={{
                  method: "POST",
                  path: `/api/public/teams/${team.id}/run`,
                  body: { mission: mission || "..." },
                  credential: "key"
                }}
              />

              <h2>Runs</h2>
              {runs.items && runs.items.length === 0 && <p>No runs yet.</p>}
              <ul className="list">
                {runs.items?.map((r: TeamRun) => (
                  <li key={r.runId}>
                    <a
                      href={`/app${withQuery(route, { run: r.runId })}`}
                      aria-current={r.runId === runId ? "true" : undefined}
                      onClick={(e) => {
                        e.preventDefault()
                        navigate(withQuery(route, { run: r.runId === runId ? null : r.runId }))
                      }}
                    >
                      <span className={`status status-${r.status}`}>{r.status}</span> {r.mission.slice(0, 60)}{" "}
                      <span className="muted">{formatDate(r.createdAt)}</span>
                    </a>
                  </li>
                ))}
              </ul>
              <LoadMore list={runs} label="Load more runs" />
              {runId && (
                <RunDetail teamId={team.id} runId={runId} startedHere={runId === startedRun} onFinal={runFinished} />
              )}

              <DeliveryLog deliveries={deliveries} />
            </>
          )}
        </section>
      </div>
    </>
  )
}
