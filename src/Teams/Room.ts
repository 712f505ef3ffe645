import { finalAnswerMarker, nextMarker, roomHeader } from "../Models/Conventions.ts"
import type { TurnTaking } from "./Api.ts"

/**
 * The room of a `chat` team: who speaks next, what each speaker is shown,
 * and how a turn says the mission is done or (the leader's) who speaks next.
 * Pure functions: the run calls them with what it has, and the built-in
 * `local` model reads the same prompt (src/Models/Local.ts).
 *
 * The protocol, as the prompt states it to every model:
 * - A line `FINAL ANSWER: <text>` (the text may go on over the next lines)
 *   declares the mission done; what follows the marker is the run's result.
 *   With `leader` turn-taking only the leader may end the run.
 * - The leader ends each of its other turns with a line `NEXT: <member name
 *   or agentId>` naming who speaks next. A missing or unknown pick, or the
 *   leader itself, falls back to round robin over the other members.
 */

export { finalAnswerMarker, nextMarker, roomHeader } from "../Models/Conventions.ts"

export interface RoomMember {
  readonly agentId: string
  readonly name: string
  readonly role: string
}

export interface SpokenTurn {
  readonly index: number
  readonly agentId: string
  readonly content: string
}

export interface Room {
  readonly members: ReadonlyArray<RoomMember>
  readonly turnTaking: TurnTaking
  readonly leaderAgentId: string | null
}

const markerLine = (marker: string) => new RegExp(`^[ \\t>*_#-]*${marker.replace(":", "\\s*:")}[ \\t]*`, "im")

/** The final answer a turn declares (the text after `FINAL ANSWER:`), if it declares one. */
export const finalAnswer = (content: string): string | undefined => {
  const match = markerLine("FINAL ANSWER:").exec(content)
  if (match === null) return undefined
  const answer = content.slice(match.index + match[0].length).trim()
  // A bare marker: the whole turn is the answer.
  return answer === "" ? content.slice(0, match.index).trim() : answer
}

/** The member a leader's turn names after `NEXT:` (by agentId or name, in any case), if any. */
export const pickedNext = (room: Room, content: string): string | undefined => {
  const matches = [...content.matchAll(/^[ \t>*_#-]*NEXT\s*:[ \t]*(.+)$/gim)]
  const last = matches.at(-1)
  if (last === undefined) return undefined
  const named = last[1]!
    .replace(/[*_`"'.]+/g, " ")
    .trim()
    .toLowerCase()
  const member =
    room.members.find((m) => m.agentId.toLowerCase() === named) ??
    room.members.find((m) => m.name.trim().toLowerCase() === named)
  return member?.agentId
}

/** The member after `agentId` in member order, skipping `skip`. */
const after = (members: ReadonlyArray<RoomMember>, agentId: string | undefined, skip?: string) => {
  const candidates = members.filter((m) => m.agentId !== skip)
  if (candidates.length === 0) return members[0]!.agentId
  if (agentId === undefined) return candidates[0]!.agentId
  const position = members.findIndex((m) => m.agentId === agentId)
  for (let step = 1; step <= members.length; step++) {
    const next = members[(position + step) % members.length]!
    if (next.agentId !== skip) return next.agentId
  }
  return candidates[0]!.agentId
}

/**
 * Who speaks at turn `turns.length`. `round_robin`: member order. `leader`:
 * the leader opens and speaks after every member; after the leader comes the
 * member it picked, or, when the pick is missing, unknown or the leader
 * itself, the next member (other than the leader) after the last one who
 * spoke. Never the same agent twice in a row, unless the room has one member.
 */
export const nextSpeaker = (room: Room, turns: ReadonlyArray<SpokenTurn>): string => {
  const last = turns.at(-1)
  if (room.turnTaking === "round_robin" || room.leaderAgentId === null) {
    return after(room.members, last?.agentId)
  }
  const leader = room.leaderAgentId
  if (last === undefined || last.agentId !== leader) return leader
  const pick = pickedNext(room, last.content)
  if (pick !== undefined && pick !== leader) return pick
  const lastMember = turns.findLast((turn) => turn.agentId !== leader)?.agentId
  return after(room.members, lastMember, leader)
}

/** Who writes the closing turn at a limit: the leader, or the next speaker in order. */
export const closingSpeaker = (room: Room, turns: ReadonlyArray<SpokenTurn>): string =>
  room.turnTaking === "leader" && room.leaderAgentId !== null ? room.leaderAgentId : nextSpeaker(room, turns)

/** Whether a turn by `agentId` may end the run. */
export const mayFinish = (room: Room, agentId: string) =>
  room.turnTaking !== "leader" || room.leaderAgentId === null || room.leaderAgentId === agentId

const nameOf = (room: Room, agentId: string) => room.members.find((m) => m.agentId === agentId)?.name ?? agentId

const describe = (room: Room, member: RoomMember) =>
  `- ${member.name} (agentId ${member.agentId})${member.agentId === room.leaderAgentId && room.turnTaking === "leader" ? " [leader]" : ""}: ${
    member.role === "" ? "no role given" : member.role
  }`

/** The transcript as the prompt shows it. */
export const transcriptLine = (room: Room, turn: SpokenTurn) =>
  `[${turn.index}] ${nameOf(room, turn.agentId)}: ${turn.content}`

export interface PromptInput {
  readonly room: Room
  readonly mission: string
  readonly speaker: string
  /** The transcript lines kept (the newest that fit the context budget), oldest first. */
  readonly transcript: ReadonlyArray<string>
  /** Turns left out from the start of the transcript to fit the budget. */
  readonly omitted: number
  readonly turns: ReadonlyArray<SpokenTurn>
  /** The closing turn at a limit: write the final answer now. */
  readonly closing?: { readonly reason: string } | undefined
}

/** The system prompt of a speaker: its own instructions, then the room's rules. */
export const systemPrompt = (instructions: string, room: Room, speaker: string) => {
  const isLeader = room.turnTaking === "leader" && room.leaderAgentId === speaker
  const rules = [
    `You are ${nameOf(room, speaker)}, a member of a team working on a mission together in a shared room.`,
    "Contribute briefly and build on what the others wrote; do not repeat them.",
    room.turnTaking === "leader"
      ? isLeader
        ? `You lead the room. End each turn with a line \`${nextMarker} <member name>\` naming who speaks next. ` +
          `When the mission is accomplished, write a line starting with \`${finalAnswerMarker}\` followed by the final answer.`
        : "The leader decides who speaks and writes the final answer."
      : `When the mission is accomplished, write a line starting with \`${finalAnswerMarker}\` followed by the final answer.`
  ].join(" ")
  return instructions.trim() === "" ? rules : `${instructions.trim()}\n\n${rules}`
}

/** The message a speaker answers: the mission, the members and roles, the transcript so far, whose turn it is. */
export const userPrompt = (input: PromptInput) => {
  const { room, speaker } = input
  const spoken = new Set(input.turns.map((turn) => turn.agentId))
  const waiting = room.members.filter((m) => m.agentId !== speaker && !spoken.has(m.agentId)).map((m) => m.name)
  const isLeader = room.turnTaking === "leader" && room.leaderAgentId === speaker
  const lines = [
    roomHeader,
    `Turn-taking: ${room.turnTaking}`,
    "",
    "## Mission",
    input.mission,
    "",
    "## Members",
    ...room.members.map((member) => describe(room, member)),
    "",
    "## Transcript",
    ...(input.omitted > 0 ? [`(${input.omitted} earlier turns omitted)`] : []),
    ...(input.transcript.length === 0 ? ["(nobody has spoken yet)"] : input.transcript),
    "",
    "## Your turn",
    `You are: ${nameOf(room, speaker)} (agentId ${speaker})${isLeader ? " [leader]" : ""}`,
    `Members who have not spoken yet: ${waiting.length === 0 ? "none" : waiting.join(", ")}`
  ]
  if (input.closing !== undefined) {
    lines.push(
      `The room has reached its limit (${input.closing.reason}). Close the mission now: in a few sentences, ` +
        `write a line starting with \`${finalAnswerMarker}\` followed by the best final answer the transcript supports.`
    )
  } else if (isLeader) {
    lines.push(
      `Lead the room: end with \`${nextMarker} <member name>\`, or with \`${finalAnswerMarker} <answer>\` once the mission is accomplished.`
    )
  } else if (mayFinish(room, speaker)) {
    lines.push(`Add your contribution. Once the mission is accomplished, add \`${finalAnswerMarker} <answer>\`.`)
  } else {
    lines.push("Add your contribution.")
  }
  return lines.join("\n")
}

/**
 * The transcript lines that fit in `budget` tokens, dropping the oldest
 * first; and how many were dropped.
 */
export const trimTranscript = (
  lines: ReadonlyArray<string>,
  budget: number,
  countTokens: (text: string) => number
): { readonly kept: ReadonlyArray<string>; readonly omitted: number } => {
  let used = 0
  let first = lines.length
  while (first > 0) {
    const cost = countTokens(lines[first - 1]!) + 1
    if (used + cost > budget) break
    used += cost
    first--
  }
  return { kept: lines.slice(first), omitted: first }
}
