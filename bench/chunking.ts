// Chunking throughput: the service's splitter (src/Knowledge/Splitter.ts, token
// bound, exact offsets) against @langchain/textsplitters' RecursiveCharacterTextSplitter
// on the same texts, in one run. The texts are generated: English prose in
// paragraphs with a Chinese and a Japanese paragraph every few.
//
// LangChain's splitter measures length in characters, so its size and overlap
// are ours in tokens times the characters per token of the text (counted once
// with the same tokenizer): the same chunk size on average, without the bound.
//
//   npm run bench:chunking       BENCH_CHUNK_SIZE=512 BENCH_CHUNK_OVERLAP=64 BENCH_CHUNK_MB=2 BENCH_CHUNK_RUNS=5
import { RecursiveCharacterTextSplitter } from "@langchain/textsplitters"
import { split } from "../src/Knowledge/Splitter.ts"
import { countTokens } from "../src/Models/Tokens.ts"

const chunkSize = Number(process.env.BENCH_CHUNK_SIZE ?? 512)
const chunkOverlap = Number(process.env.BENCH_CHUNK_OVERLAP ?? 64)
const megabytes = Number(process.env.BENCH_CHUNK_MB ?? 2)
const runs = Number(process.env.BENCH_CHUNK_RUNS ?? 5)

// A small seeded generator, so every run measures the same texts.
const random = (seed: number) => () => {
  seed = (seed + 0x6d2b79f5) | 0
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed)
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296
}
const vocabulary = (
  "the of and to in is was for that with on as by at from this which be are or it an have not were has " +
  "knowledge base document chunk splitter token boundary paragraph sentence search index retrieval agent " +
  "tenant workflow durable cluster postgres extraction offset overlap heading section language model answer " +
  "river mountain otter forest winter harbour lantern journey quietly suddenly carefully although because"
).split(" ")
const chinese = [
  "我们今天去公园散步，天气很好。",
  "知识库把文档切成小块，以便检索。",
  "这个系统支持多租户和持久化工作流。",
  "中文没有空格，所以需要按句子和词来切分。"
]
const japanese = [
  "日本語のテキストも少し含まれています。",
  "検索のために文書を小さな塊に分けます。",
  "これはテストの文章です。"
]

const makeText = (seed: number) => {
  const next = random(seed)
  const pick = <A>(items: ReadonlyArray<A>) => items[Math.floor(next() * items.length)]!
  const parts: Array<string> = []
  let length = 0
  let paragraph = 0
  while (length < megabytes * 1_000_000) {
    let text: string
    if (++paragraph % 6 === 0) {
      text = Array.from({ length: 3 + Math.floor(next() * 6) }, () =>
        pick(paragraph % 12 === 0 ? japanese : chinese)
      ).join("")
    } else {
      const sentences = Array.from({ length: 2 + Math.floor(next() * 7) }, () => {
        const words = Array.from({ length: 6 + Math.floor(next() * 18) }, () => pick(vocabulary))
        const sentence = words.join(" ")
        return sentence[0]!.toUpperCase() + sentence.slice(1) + pick([".", ".", ".", "?", "!"])
      })
      text = sentences.join(" ")
    }
    parts.push(text)
    length += text.length + 2
  }
  return parts.join("\n\n")
}

const median = (values: ReadonlyArray<number>) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!
const megabytesOf = (text: string) => Buffer.byteLength(text, "utf8") / 1_000_000

const warmUp = makeText(999)
const charsPerToken = warmUp.length / countTokens(warmUp)
const theirs = new RecursiveCharacterTextSplitter({
  chunkSize: Math.round(chunkSize * charsPerToken),
  chunkOverlap: Math.round(chunkOverlap * charsPerToken)
})
const settings = { strategy: "recursive" as const, chunkSize, chunkOverlap }
split({ text: warmUp }, settings)
await theirs.splitText(warmUp)

const ours: Array<number> = []
const baseline: Array<number> = []
let ourChunks = 0
let theirChunks = 0
let theirOverBound = 0
for (let run = 0; run < runs; run++) {
  const text = makeText(run + 1)
  const mb = megabytesOf(text)
  let startedAt = performance.now()
  const chunks = split({ text }, settings)
  ours.push(mb / ((performance.now() - startedAt) / 1000))
  ourChunks = chunks.length
  startedAt = performance.now()
  const pieces = await theirs.splitText(text)
  baseline.push(mb / ((performance.now() - startedAt) / 1000))
  theirChunks = pieces.length
  if (run === 0) theirOverBound = pieces.filter((piece) => countTokens(piece) > chunkSize).length
}

const a = median(ours)
const b = median(baseline)
console.log(
  `Chunking ${megabytes} MB texts (UTF-8; English with Chinese and Japanese paragraphs), median of ${runs} distinct texts`
)
console.log(
  `size ${chunkSize} tokens, overlap ${chunkOverlap} tokens; LangChain: ${Math.round(chunkSize * charsPerToken)} / ${Math.round(chunkOverlap * charsPerToken)} characters (${charsPerToken.toFixed(2)} characters per token)\n`
)
console.log(`${"splitter".padEnd(44)} ${"MB/s".padStart(8)} ${"chunks".padStart(8)} ${"over bound".padStart(11)}`)
console.log(
  `${"ours (token bound, offsets)".padEnd(44)} ${a.toFixed(1).padStart(8)} ${String(ourChunks).padStart(8)} ${"0".padStart(11)}`
)
console.log(
  `${"LangChain RecursiveCharacterTextSplitter".padEnd(44)} ${b.toFixed(1).padStart(8)} ${String(theirChunks).padStart(8)} ${String(theirOverBound).padStart(11)}`
)
console.log(`\nratio ours / LangChain: ${(a / b).toFixed(2)}x`)
