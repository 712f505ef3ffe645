import { useState } from "react"
import type { Schedule } from "../../../src/Schedules/Api.ts"
import { Link } from "../router.tsx"
import { ApiCall, Confirm, Field, LoadMore, ProblemMessage } from "../shared/components.tsx"
import { type ScheduleDraft, useScheduleRuns, useSchedules, useTargets } from "./hooks.ts"

// To the second: slots of an interval schedule may be a second apart.
const when = (iso: string | null, empty = "never") =>
  iso === null
    ? empty
    : `${new Date(iso).toLocaleString("en-GB", { dateStyle: "medium", timeStyle: "medium", timeZone: "UTC" })} UTC`

/** Where the dashboard shows a slot's run: the execution in its orchestration, the run in its team. */
const runLink = (schedule: Schedule, runId: string) =>
  "orchestrationId" in schedule.target
    ? `/orchestrations?orchestration=${schedule.target.orchestrationId}&execution=${runId}`
    : `/teams?team=${schedule.target.teamId}&run=${runId}`

const timingOf = (schedule: Schedule) =>
  schedule.cron !== null ? `cron ${schedule.cron} (${schedule.timezone})` : `every ${schedule.intervalSeconds} s`

/** The record of one schedule's slots: each slot's run, or why none. */
const ScheduleRuns = ({ schedule, version }: { readonly schedule: Schedule; readonly version: unknown }) => {
  const runs = useScheduleRuns(schedule.id, version)
  return (
    <section aria-labelledby="runs-title" className="detail">
      <h2 id="runs-title">Recent slots of {schedule.name || schedule.id}</h2>
      <p>
        Next five:{" "}
        {schedule.nextRuns.length === 0 ? "none while paused" : schedule.nextRuns.map((at) => when(at)).join(", ")}
      </p>
      {runs.error !== undefined && <ProblemMessage problem={runs.error} />}
      {runs.items && runs.items.length === 0 && <p>No slot has come yet.</p>}
      {runs.items && runs.items.length > 0 && (
        <table data-testid="schedule-runs">
          <caption className="visually-hidden">Slots</caption>
          <thead>
            <tr>
              <th scope="col">Slot</th>
              <th scope="col">Status</th>
              <th scope="col">Run</th>
              <th scope="col">Reason</th>
            </tr>
          </thead>
          <tbody>
            {runs.items.map((run) => (
              <tr key={run.id}>
                <td>{when(run.slotAt)}</td>
                <td>{run.status}</td>
                <td>
                  {run.runId === null ? (
                    <span className="muted">none</span>
                  ) : (
                    <Link to={runLink(schedule, run.runId)}>
                      <code>{run.runId}</code>
                    </Link>
                  )}
                </td>
                <td>{run.reason ?? ""}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <LoadMore list={runs} label="Load more slots" />
      <ApiCall call={{ method: "GET", path: `/api/schedules/${schedule.id}/runs` }} />
    </section>
  )
}

/** Schedules: the tenant's recurring runs with their next slot; create or edit, pause, resume, delete; recent slots. */
export const SchedulesScreen = () => {
  const { list, draft, setDraft, editing, edit, save, pause, resume, remove, problem, saved, fieldError } =
    useSchedules()
  const targets = useTargets()
  const [deleting, setDeleting] = useState<Schedule>()
  const [shown, setShown] = useState<Schedule>()
  const set = <K extends keyof ScheduleDraft>(key: K, value: ScheduleDraft[K]) => setDraft({ ...draft, [key]: value })
  const current = shown === undefined ? undefined : (list.items?.find((s) => s.id === shown.id) ?? shown)

  return (
    <>
      <h1>Schedules</h1>
      <p>
        Run an <Link to="/orchestrations">orchestration</Link> or a <Link to="/teams">team</Link> on a cron expression
        or every so many seconds. Each slot starts one run, once across the cluster, and counts against your plan's
        daily requests like an API call: over the limit, the slot is recorded as refused with the reason.
      </p>

      <section aria-labelledby="form-title">
        <h2 id="form-title">{editing === undefined ? "Create a schedule" : `Edit ${editing.name || editing.id}`}</h2>
        <form onSubmit={save} noValidate>
          <Field label="Name" error={fieldError("payload.name")}>
            {(props) => (
              <input {...props} maxLength={200} value={draft.name} onChange={(e) => set("name", e.target.value)} />
            )}
          </Field>
          <Field label="Runs" error={fieldError("payload.target")}>
            {(props) => (
              <select
                {...props}
                value={draft.targetKind}
                onChange={(e) => set("targetKind", e.target.value as ScheduleDraft["targetKind"])}
              >
                <option value="orchestration">An orchestration</option>
                <option value="team">A team</option>
              </select>
            )}
          </Field>
          {draft.targetKind === "orchestration" ? (
            <>
              <Field label="Orchestration" error={fieldError("payload.target.orchestrationId")}>
                {(props) => (
                  <select
                    {...props}
                    value={draft.orchestrationId}
                    onChange={(e) => set("orchestrationId", e.target.value)}
                  >
                    <option value="">Choose one</option>
                    {targets?.orchestrations.map((o) => (
                      <option key={o.id} value={o.id}>
                        {o.name}
                      </option>
                    ))}
                  </select>
                )}
              </Field>
              <Field label="Input" error={fieldError("payload.target.input")}>
                {(props) => <textarea {...props} value={draft.input} onChange={(e) => set("input", e.target.value)} />}
              </Field>
              <Field
                label="Variables"
                hint='A JSON object of strings, such as {"topic": "tides"}.'
                error={fieldError("payload.target.variables")}
              >
                {(props) => (
                  <textarea
                    {...props}
                    spellCheck={false}
                    value={draft.variables}
                    onChange={(e) => set("variables", e.target.value)}
                  />
                )}
              </Field>
            </>
          ) : (
            <>
              <Field label="Team" error={fieldError("payload.target.teamId")}>
                {(props) => (
                  <select {...props} value={draft.teamId} onChange={(e) => set("teamId", e.target.value)}>
                    <option value="">Choose one</option>
                    {targets?.teams.map((t) => (
                      <option key={t.id} value={t.id}>
                        {t.name}
                      </option>
                    ))}
                  </select>
                )}
              </Field>
              <Field label="Mission" error={fieldError("payload.target.mission")}>
                {(props) => (
                  <textarea {...props} value={draft.mission} onChange={(e) => set("mission", e.target.value)} />
                )}
              </Field>
            </>
          )}
          <Field label="Timing">
            {(props) => (
              <select
                {...props}
                value={draft.timing}
                onChange={(e) => set("timing", e.target.value as ScheduleDraft["timing"])}
              >
                <option value="cron">A cron expression</option>
                <option value="interval">Every so many seconds</option>
              </select>
            )}
          </Field>
          {draft.timing === "cron" ? (
            <Field
              label="Cron"
              hint="5 fields: minute hour day-of-month month weekday, such as 0 9 * * 1-5."
              error={fieldError("payload.cron")}
            >
              {(props) => (
                <input {...props} spellCheck={false} value={draft.cron} onChange={(e) => set("cron", e.target.value)} />
              )}
            </Field>
          ) : (
            <Field label="Every (seconds)" error={fieldError("payload.intervalSeconds") ?? fieldError("payload.cron")}>
              {(props) => (
                <input
                  {...props}
                  type="number"
                  min={1}
                  value={draft.intervalSeconds}
                  onChange={(e) => set("intervalSeconds", e.target.value)}
                />
              )}
            </Field>
          )}
          <Field
            label="Time zone"
            hint="An IANA name, such as Europe/Paris or UTC."
            error={fieldError("payload.timezone")}
          >
            {(props) => (
              <input
                {...props}
                spellCheck={false}
                value={draft.timezone}
                onChange={(e) => set("timezone", e.target.value)}
              />
            )}
          </Field>
          <Field label="After an outage" hint="What to do with slots that passed while the whole service was down.">
            {(props) => (
              <select
                {...props}
                value={draft.missedPolicy}
                onChange={(e) => set("missedPolicy", e.target.value as ScheduleDraft["missedPolicy"])}
              >
                <option value="skip">Skip them</option>
                <option value="run_once">Run once for all of them</option>
              </select>
            )}
          </Field>
          <div className="actions">
            <button type="submit">{editing === undefined ? "Create schedule" : "Save schedule"}</button>
            {editing !== undefined && (
              <button type="button" className="secondary" onClick={() => edit(undefined)}>
                Cancel
              </button>
            )}
          </div>
        </form>
        <ApiCall
          call={{
            method: "POST",
            path: "/api/schedules",
            body: { target: { orchestrationId: "...", input: "..." }, cron: draft.cron, timezone: draft.timezone }
          }}
        />
      </section>

      <ProblemMessage problem={problem} />
      <p role="status" className="saved">
        {saved}
      </p>

      <section aria-labelledby="list-title">
        <h2 id="list-title">Your schedules</h2>
        {list.error !== undefined && <ProblemMessage problem={list.error} />}
        {list.items && list.items.length === 0 && <p>No schedules yet.</p>}
        {list.items && list.items.length > 0 && (
          <table data-testid="schedules">
            <caption className="visually-hidden">Schedules</caption>
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Timing</th>
                <th scope="col">Status</th>
                <th scope="col">Next run</th>
                <th scope="col">Last slot</th>
                <th scope="col">
                  <span className="visually-hidden">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {list.items.map((schedule) => (
                <tr key={schedule.id}>
                  <th scope="row">{schedule.name || <code>{schedule.id}</code>}</th>
                  <td>{timingOf(schedule)}</td>
                  <td>{schedule.status}</td>
                  <td>{when(schedule.nextRunAt, "paused")}</td>
                  <td>{when(schedule.lastRunAt)}</td>
                  <td>
                    <div className="actions">
                      <button type="button" className="secondary" onClick={() => setShown(schedule)}>
                        Slots
                      </button>
                      <button type="button" className="secondary" onClick={() => edit(schedule)}>
                        Edit
                      </button>
                      {schedule.status === "active" ? (
                        <button type="button" className="secondary" onClick={() => void pause(schedule)}>
                          Pause
                        </button>
                      ) : (
                        <button type="button" className="secondary" onClick={() => void resume(schedule)}>
                          Resume
                        </button>
                      )}
                      <button type="button" className="danger" onClick={() => setDeleting(schedule)}>
                        Delete
                      </button>
                    </div>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
        <LoadMore list={list} label="Load more schedules" />
        <ApiCall call={{ method: "GET", path: "/api/schedules" }} />
      </section>

      {current !== undefined && <ScheduleRuns schedule={current} version={list.items} />}

      <Confirm
        open={deleting !== undefined}
        title={`Delete “${deleting?.name || deleting?.id || ""}”?`}
        confirmLabel="Delete schedule"
        onCancel={() => setDeleting(undefined)}
        onConfirm={() => {
          if (deleting === undefined) return
          setDeleting(undefined)
          if (shown?.id === deleting.id) setShown(undefined)
          if (editing?.id === deleting.id) edit(undefined)
          void remove(deleting)
        }}
      >
        <p>No more slots start; the runs it started stay. This cannot be undone.</p>
      </Confirm>
    </>
  )
}
