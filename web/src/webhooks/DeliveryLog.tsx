import { formatDate, LoadMore, ProblemMessage } from "../shared/components.tsx"
import type { useDeliveries } from "./hooks.ts"

/** A delivery log: each attempt with its answer, a button to send its event again, and "Load more". */
export const DeliveryLog = ({ deliveries }: { readonly deliveries: ReturnType<typeof useDeliveries> }) => {
  const { log, redeliver, problem } = deliveries
  return (
    <>
      <h2>Webhook deliveries</h2>
      <button type="button" className="secondary" onClick={log.reload}>
        Refresh
      </button>
      <ProblemMessage problem={problem} />
      {log.items && log.items.length === 0 && <p>No deliveries yet.</p>}
      {log.items && log.items.length > 0 && (
        <table data-testid="deliveries">
          <caption className="visually-hidden">Webhook deliveries</caption>
          <thead>
            <tr>
              <th scope="col">When</th>
              <th scope="col">Event</th>
              <th scope="col">Attempt</th>
              <th scope="col">Answer</th>
              <th scope="col">
                <span className="visually-hidden">Actions</span>
              </th>
            </tr>
          </thead>
          <tbody>
            {log.items.map((d) => (
              <tr key={`${d.eventId}-${d.redelivery}-${d.attempt}`}>
                <td>{formatDate(d.at)}</td>
                <td>
                  {d.type} <code className="muted">{d.eventId}</code>
                </td>
                <td>
                  {d.attempt}
                  {d.redelivery > 0 && ` (redelivery ${d.redelivery})`}
                </td>
                <td>
                  {d.httpStatus ?? d.error} <span className="muted">{d.durationMs} ms</span>
                </td>
                <td>
                  <button
                    type="button"
                    className="secondary"
                    aria-label={`Redeliver ${d.eventId}`}
                    onClick={() => redeliver(d.eventId)}
                  >
                    Redeliver
                  </button>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <LoadMore list={log} label="Load more deliveries" />
    </>
  )
}
