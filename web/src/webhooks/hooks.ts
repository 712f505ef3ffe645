import { useEffect, useState } from "react"
import type { TeamId } from "../../../src/Domain/Ids.ts"
import type { DeliveryAttempt } from "../../../src/Webhooks/Api.ts"
import { call } from "../shared/api.ts"
import { type Page, pageQuery, usePaged } from "../shared/data.ts"

// The delivery log of a feature's webhook (a team's room; orchestrations have
// the same routes), shown and redelivered the same way whoever owns it.

/** Where a delivery log is read and its events redelivered. */
export interface DeliverySource {
  /** Names the log: it is read from its first page again when this changes. */
  readonly key: string
  readonly page: (cursor: string | undefined) => Promise<Page<DeliveryAttempt>>
  readonly redeliver: (eventId: string) => Promise<unknown>
}

/** The delivery log of a team's room. */
export const roomDeliveries = (teamId: TeamId): DeliverySource => ({
  key: teamId,
  page: (cursor) => call((c) => c.teams.deliveries({ params: { id: teamId }, query: pageQuery(cursor, 20) })),
  redeliver: (eventId) => call((c) => c.teams.redeliver({ params: { id: teamId, eventId } }))
})

/**
 * A delivery log, newest first, a page at a time. `awaitNew` waits for an
 * event not logged yet (a run just ended: its delivery is logged once the
 * receiver has answered), reading the log again every second for up to a minute.
 */
export const useDeliveries = (source: DeliverySource | undefined) => {
  const log = usePaged(source?.page, [source?.key])
  const [problem, setProblem] = useState<unknown>()
  const [awaited, setAwaited] = useState<{ readonly known: ReadonlySet<string>; readonly until: number }>()
  useEffect(() => {
    if (awaited === undefined || log.loading) return
    const arrived = log.items?.some((d) => !awaited.known.has(d.eventId)) ?? false
    if (arrived || Date.now() > awaited.until) {
      setAwaited(undefined)
      return
    }
    const timer = setTimeout(log.reload, 1_000)
    return () => clearTimeout(timer)
  }, [awaited, log.loading, log.items])

  const awaitNew = () =>
    setAwaited({ known: new Set(log.items?.map((d) => d.eventId) ?? []), until: Date.now() + 60_000 })

  const redeliver = async (eventId: string) => {
    if (source === undefined) return
    setProblem(undefined)
    await source.redeliver(eventId).catch(setProblem)
    log.reload()
  }

  return { log, redeliver, awaitNew, problem }
}
