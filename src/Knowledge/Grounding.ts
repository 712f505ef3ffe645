import * as Schema from "effect/Schema"
import { ChatSource } from "../Agents/Api.ts"
import { countTokens } from "../Models/Tokens.ts"
import type { ScoredChunk } from "./SearchRepo.ts"
import { sourcesHeader } from "../Models/Conventions.ts"

// Grounding: an agent with knowledge bases gets the chunks retrieved for what
// it is asked as numbered sources at the end of its system prompt, and the
// answer names the sources it was given. The block's first line is fixed, so
// the built-in `local` model can find the sources and answer from them.

/** What a model is given of a retrieved chunk: its place, for the label, and its text. */
export const GroundingSource = Schema.Struct({
  ...ChatSource.fields,
  label: Schema.String,
  content: Schema.String
})
export type GroundingSource = typeof GroundingSource.Type

/** A retrieved chunk as a source: labelled by its document and headings (and page). */
export const toSource = (chunk: ScoredChunk): GroundingSource => ({
  chunkId: chunk.id,
  documentId: chunk.documentId,
  knowledgeId: chunk.knowledgeId,
  score: chunk.score,
  label: [chunk.filename, ...chunk.headingPath].join(" › ") + (chunk.page === null ? "" : `, page ${chunk.page}`),
  content: chunk.content
})

/** The sources as a chat response names them. */
export const citations = (sources: ReadonlyArray<GroundingSource>): Array<ChatSource> =>
  sources.map(({ chunkId, documentId, knowledgeId, score }) => ({ chunkId, documentId, knowledgeId, score }))

/**
 * The sources, best first, that fit in `budget` tokens beside the block's
 * header: the system prompt must leave room for the conversation. A source
 * that does not fit is left out, and so are those after it, so the numbers
 * the model sees are the ranks it was given.
 */
export const fitSources = (sources: ReadonlyArray<GroundingSource>, budget: number): Array<GroundingSource> => {
  const kept: Array<GroundingSource> = []
  let used = countTokens(sourcesHeader)
  for (const source of sources) {
    const cost = countTokens(renderSource(kept.length + 1, source)) + 1
    if (used + cost > budget) break
    used += cost
    kept.push(source)
  }
  return kept
}

const renderSource = (n: number, source: GroundingSource) => `[${n}] (${source.label})\n${source.content.trim()}`

/** The system prompt with the sources after the instructions; unchanged without sources. */
export const withSources = (system: string, sources: ReadonlyArray<GroundingSource>): string =>
  sources.length === 0
    ? system
    : `${system.trimEnd()}${system.trim() === "" ? "" : "\n\n"}${sourcesHeader}\n\n${sources
        .map((source, i) => renderSource(i + 1, source))
        .join("\n\n")}`
