// Postgres's text-search parsers split words at spaces and punctuation, so a
// Chinese, Japanese or Thai sentence would be one giant "word" that no query
// matches. Before a chunk is indexed, and before a query is parsed, runs of
// those scripts are cut into words with Intl.Segmenter (ICU's dictionaries)
// and the words separated by spaces; the rest of the text is left as it is.

// Scripts written without spaces between words.
const unspaced =
  /[\p{Script=Han}\p{Script=Hiragana}\p{Script=Katakana}\p{Script=Thai}\p{Script=Lao}\p{Script=Khmer}\p{Script=Myanmar}\u30fc]+/gu

const words = new Intl.Segmenter(undefined, { granularity: "word" })

/** The text with every run of an unspaced script split into space-separated words; other text is kept as it is. */
export const searchText = (text: string): string =>
  text.replace(unspaced, (run) => {
    const parts: Array<string> = []
    for (const segment of words.segment(run)) {
      if (segment.isWordLike) parts.push(segment.segment)
    }
    return ` ${parts.join(" ")} `
  })
