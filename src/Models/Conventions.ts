/**
 * The shapes of prompt that features write and the built-in `local` model
 * reads back: the knowledge sources block of a grounded chat and a team
 * room's turn. They live here so that Models/ depends on no feature; the
 * features import them.
 */

// ---------------------------------------------------------------------------
// Grounding
// ---------------------------------------------------------------------------

export const sourcesHeader =
  "Knowledge sources (numbered, best first). Answer from them when they hold the answer, cite them as [n], " +
  "and say so when they do not:"

/** The sources of a system prompt built by `withSources`, in order: what the local model reads. */
export const sourcesIn = (
  system: string
): Array<{ readonly n: number; readonly label: string; readonly content: string }> => {
  const at = system.lastIndexOf(sourcesHeader)
  if (at === -1) return []
  const block = system.slice(at + sourcesHeader.length)
  const found: Array<{ n: number; label: string; content: string }> = []
  const entry = /\n\[(\d+)\] \((.*)\)\n/g
  let match = entry.exec(block)
  while (match !== null) {
    const start = match.index + match[0].length
    const next = entry.exec(block)
    // A chunk's own text may hold something shaped like an entry; only the next number in sequence starts one.
    if (next !== null && Number(next[1]) !== found.length + 2) continue
    found.push({
      n: Number(match[1]),
      label: match[2]!,
      content: block.slice(start, next === null ? undefined : next.index).trim()
    })
    match = next
  }
  return found
}

// ---------------------------------------------------------------------------
// Team rooms
// ---------------------------------------------------------------------------

export const finalAnswerMarker = "FINAL ANSWER:"
export const nextMarker = "NEXT:"
/** The first line of every room prompt: how the local model knows a room turn from a chat. */
export const roomHeader = "# Team room"

/**
 * The built-in `local` model's room turn, read back from the room prompt (Teams/Room.ts):
 * it says who it is and what it works on; as leader it picks the first member
 * who has not spoken yet; it declares the mission done once every member has
 * spoken (with `leader`, only the leader does). At a limit it closes.
 * Deterministic: the same prompt always gives the same turn.
 */
export const localRoomTurn = (message: string): string | undefined => {
  if (!message.startsWith(roomHeader)) return undefined
  const section = (title: string) => {
    const start = message.indexOf(`\n## ${title}\n`)
    if (start === -1) return ""
    const rest = message.slice(start + title.length + 5)
    const end = rest.indexOf("\n## ")
    return (end === -1 ? rest : rest.slice(0, end)).trim()
  }
  const mission = section("Mission").replace(/\s+/g, " ")
  const turn = section("Your turn")
  const me = /^You are: (.*?) \(agentId [^)]*\)( \[leader\])?$/m.exec(turn)
  const name = me?.[1] ?? "A member"
  const leader = me?.[2] !== undefined
  const waiting = /^Members who have not spoken yet: (.*)$/m.exec(turn)?.[1] ?? "none"
  const pending = waiting === "none" ? [] : waiting.split(", ")
  const roundRobin = /^Turn-taking: round_robin$/m.test(message)
  const short = mission.length <= 120 ? mission : `${mission.slice(0, 119)}…`
  const said = `${name} here: my part of "${short}" is noted.`
  if (/has reached its limit/.test(turn)) return `${said}\n${finalAnswerMarker} ${name} closes the mission "${short}".`
  if (leader && pending.length > 0) return `${said}\n${nextMarker} ${pending[0]}`
  if (pending.length === 0 && (roundRobin || leader)) {
    return `${said}\n${finalAnswerMarker} Every member has spoken on "${short}".`
  }
  return said
}
