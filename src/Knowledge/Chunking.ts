import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"

// Chunking settings and their validation: schemas only, so the API
// declaration that uses them loads in a browser (the splitter does not).

export const ChunkingStrategy = Schema.Literals(["auto", "recursive", "markdown", "sentence"])
export type ChunkingStrategy = typeof ChunkingStrategy.Type

export const minChunkSize = 64
export const maxChunkSize = 4096
export const defaultChunkSize = 512
export const defaultChunkOverlap = 64

export interface Chunking {
  readonly strategy: ChunkingStrategy
  /** Hard upper bound on the tokens of every chunk. */
  readonly chunkSize: number
  /** Upper bound on the tokens two consecutive chunks share. */
  readonly chunkOverlap: number
}

export const defaultChunking: Chunking = {
  strategy: "auto",
  chunkSize: defaultChunkSize,
  chunkOverlap: defaultChunkOverlap
}

export class InvalidChunking extends Data.TaggedError("InvalidChunking")<{
  readonly message: string
  readonly problems: ReadonlyArray<string>
}> {}

export interface ChunkingInput {
  readonly strategy?: string | undefined
  readonly chunkSize?: number | undefined
  readonly chunkOverlap?: number | undefined
}

const strategies: ReadonlyArray<string> = ChunkingStrategy.literals

/** What is wrong with these settings, one sentence per problem; empty when they are valid. */
export const chunkingProblems = (input: ChunkingInput): Array<string> => {
  const problems: Array<string> = []
  const size = input.chunkSize ?? defaultChunkSize
  const overlap = input.chunkOverlap ?? defaultChunkOverlap
  if (input.strategy !== undefined && !strategies.includes(input.strategy)) {
    problems.push(`strategy must be one of ${strategies.join(", ")}`)
  }
  const sizeValid = Number.isInteger(size) && size >= minChunkSize && size <= maxChunkSize
  if (!sizeValid) problems.push(`chunkSize must be an integer from ${minChunkSize} to ${maxChunkSize} tokens`)
  if (!Number.isInteger(overlap) || overlap < 0) {
    problems.push("chunkOverlap must be an integer of at least 0 tokens")
  } else if (sizeValid && overlap > Math.floor(size / 2)) {
    problems.push(`chunkOverlap must be at most half of chunkSize (${Math.floor(size / 2)} tokens for ${size})`)
  }
  return problems
}

/** The settings with their defaults filled in, or `InvalidChunking` naming every problem. */
export const validateChunking = (input: ChunkingInput): Effect.Effect<Chunking, InvalidChunking> => {
  const problems = chunkingProblems(input)
  return problems.length > 0
    ? Effect.fail(new InvalidChunking({ message: `Invalid chunking: ${problems.join("; ")}.`, problems }))
    : Effect.succeed({
        strategy: (input.strategy ?? "auto") as ChunkingStrategy,
        chunkSize: input.chunkSize ?? defaultChunkSize,
        chunkOverlap: input.chunkOverlap ?? defaultChunkOverlap
      })
}
