/**
 * Text from outside the request path (a model's reply, an error message) made
 * storable: Postgres refuses NUL in text and jsonb, and a lone surrogate cannot
 * be encoded, so both become U+FFFD rather than failing the write.
 */
export const storable = (text: string): string => text.replaceAll("\u0000", "\uFFFD").toWellFormed()
