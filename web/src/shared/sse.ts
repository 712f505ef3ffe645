import { ApiProblem } from "./api.ts"

// Server-sent events: a POST whose answer streams (chat), read from fetch, and
// a GET stream followed with EventSource (executions, team runs), which
// reconnects by itself with Last-Event-ID.

export interface SseEvent {
  readonly event: string
  readonly data: unknown
  readonly id?: string
}

/** Parses complete `event:`/`data:`/`id:` frames out of `buffer`; returns the events and the unfinished rest. */
const parseFrames = (buffer: string): [Array<SseEvent>, string] => {
  const events: Array<SseEvent> = []
  let rest = buffer
  let end = rest.indexOf("\n\n")
  while (end >= 0) {
    const frame = rest.slice(0, end)
    rest = rest.slice(end + 2)
    let event = "message"
    let id: string | undefined
    const data: Array<string> = []
    for (const line of frame.split("\n")) {
      if (line.startsWith("event:")) event = line.slice(6).trim()
      else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""))
      else if (line.startsWith("id:")) id = line.slice(3).trim()
    }
    if (data.length > 0) {
      const text = data.join("\n")
      let parsed: unknown = text
      try {
        parsed = JSON.parse(text)
      } catch {
        parsed = text
      }
      events.push(id === undefined ? { event, data: parsed } : { event, data: parsed, id })
    }
    end = rest.indexOf("\n\n")
  }
  return [events, rest]
}

/** POSTs `body` asking for events, and calls `onEvent` for each until the stream ends or `signal` aborts it. */
export const postEventStream = async (
  path: string,
  body: unknown,
  onEvent: (event: SseEvent) => void,
  signal: AbortSignal
): Promise<void> => {
  const response = await fetch(path, {
    method: "POST",
    headers: { "content-type": "application/json", accept: "text/event-stream" },
    body: JSON.stringify(body),
    signal
  })
  if (!response.ok || response.body === null) {
    const problem = await response.json().catch(() => ({}))
    throw new ApiProblem(response.status, problem as Record<string, unknown>)
  }
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader()
  let buffer = ""
  while (true) {
    const { done, value } = await reader.read()
    if (done) break
    const [events, rest] = parseFrames(buffer + value)
    buffer = rest
    events.forEach(onEvent)
  }
}

/**
 * Follows a GET event stream. `onOpen` runs at every (re)connection, so the
 * caller can read the stored state again: nothing is missed while away.
 * Returns a function that closes it.
 */
export const followEvents = (
  path: string,
  names: ReadonlyArray<string>,
  handlers: { readonly onEvent: (event: SseEvent) => void; readonly onOpen?: () => void; readonly onError?: () => void }
) => {
  const source = new EventSource(path)
  for (const name of names) {
    source.addEventListener(name, (message) => {
      let data: unknown = message.data
      try {
        data = JSON.parse(message.data)
      } catch {
        data = message.data
      }
      handlers.onEvent({ event: name, data, ...(message.lastEventId ? { id: message.lastEventId } : {}) })
    })
  }
  source.onopen = () => handlers.onOpen?.()
  source.onerror = () => handlers.onError?.()
  return () => source.close()
}
