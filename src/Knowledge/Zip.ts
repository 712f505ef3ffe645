import * as Zlib from "node:zlib"

/**
 * A zip archive's central directory, read before any parser opens the
 * archive (a DOCX is a zip): the sizes each entry declares are checked
 * against bounds, and each entry is then inflated with a cap at the size it
 * declares, so that neither a declared nor an undeclared bomb reaches the
 * parser. Only what DOCX readers need is supported: stored and deflated
 * entries, Zip64 sizes, one disk.
 */

export interface ZipEntry {
  readonly name: string
  /** 0 stored, 8 deflated. */
  readonly method: number
  readonly compressedSize: number
  readonly uncompressedSize: number
  readonly localHeaderOffset: number
}

export interface ZipLimits {
  /** The most bytes one entry may declare, uncompressed. */
  readonly maxEntryBytes: number
  /** The most bytes all entries together may declare, uncompressed. */
  readonly maxTotalBytes: number
  /** The highest uncompressed-to-compressed ratio of an entry larger than `ratioFloorBytes`. */
  readonly maxRatio: number
  /** Entries this small are not held to the ratio: tiny repetitive parts (styles) compress far. */
  readonly ratioFloorBytes: number
  /** The most entries an archive may hold. */
  readonly maxEntries: number
}

export const defaultZipLimits: ZipLimits = {
  maxEntryBytes: 50 * 1024 * 1024,
  maxTotalBytes: 100 * 1024 * 1024,
  maxRatio: 100,
  ratioFloorBytes: 1024 * 1024,
  maxEntries: 10_000
}

/** Why an archive is refused: `damaged` for a malformed one, `too_large` for one over a bound. */
export interface ZipProblem {
  readonly kind: "damaged" | "too_large"
  readonly message: string
}

const endOfDirectory = 0x06054b50
const zip64Locator = 0x07064b50
const zip64EndOfDirectory = 0x06064b50
const directoryHeader = 0x02014b50
const localHeader = 0x04034b50

const damaged = (message: string): ZipProblem => ({ kind: "damaged", message: `The archive is damaged: ${message}.` })
const tooLarge = (message: string): ZipProblem => ({ kind: "too_large", message })

const formatBytes = (bytes: number) =>
  bytes >= 1024 * 1024 ? `${Math.round((bytes / (1024 * 1024)) * 10) / 10} MB` : `${bytes} bytes`

// Numbers past 2^53 are no sizes a real archive has; they are treated as huge.
const uint64 = (view: DataView, at: number) => {
  const value = view.getBigUint64(at, true)
  return value > BigInt(Number.MAX_SAFE_INTEGER) ? Number.MAX_SAFE_INTEGER : Number(value)
}

/** The entries of the archive's central directory, or why it cannot be read. */
export const readDirectory = (
  bytes: Uint8Array,
  maxEntries = defaultZipLimits.maxEntries
): ReadonlyArray<ZipEntry> | ZipProblem => {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength)
  const length = bytes.byteLength
  // The end record is the last 22 bytes, unless a comment (at most 65,535 bytes) follows it.
  let end = -1
  for (let at = length - 22; at >= 0 && at >= length - 22 - 0xffff; at--) {
    if (view.getUint32(at, true) === endOfDirectory && at + 22 + view.getUint16(at + 20, true) === length) {
      end = at
      break
    }
  }
  if (end < 0) return damaged("no end of central directory record")
  let count = view.getUint16(end + 10, true)
  let directorySize = view.getUint32(end + 12, true)
  let directoryOffset = view.getUint32(end + 16, true)
  if (view.getUint16(end + 4, true) !== 0 || view.getUint16(end + 6, true) !== 0) {
    return damaged("archives spanning several disks are not read")
  }
  if (count === 0xffff || directorySize === 0xffffffff || directoryOffset === 0xffffffff) {
    const locator = end - 20
    if (locator < 0 || view.getUint32(locator, true) !== zip64Locator) return damaged("no Zip64 locator")
    const record = uint64(view, locator + 8)
    if (record + 56 > locator || view.getUint32(record, true) !== zip64EndOfDirectory) {
      return damaged("no Zip64 end of central directory record")
    }
    count = uint64(view, record + 32)
    directorySize = uint64(view, record + 40)
    directoryOffset = uint64(view, record + 48)
  }
  if (count > maxEntries) return tooLarge(`The archive holds ${count} entries; at most ${maxEntries} are accepted.`)
  if (directoryOffset + directorySize > end) return damaged("the central directory lies outside the file")
  const entries: Array<ZipEntry> = []
  let at = directoryOffset
  for (let index = 0; index < count; index++) {
    if (at + 46 > directoryOffset + directorySize || view.getUint32(at, true) !== directoryHeader) {
      return damaged(`entry ${index + 1} of the central directory is malformed`)
    }
    const method = view.getUint16(at + 10, true)
    let compressedSize = view.getUint32(at + 20, true)
    let uncompressedSize = view.getUint32(at + 24, true)
    const nameLength = view.getUint16(at + 28, true)
    const extraLength = view.getUint16(at + 30, true)
    const commentLength = view.getUint16(at + 32, true)
    let localHeaderOffset = view.getUint32(at + 42, true)
    const next = at + 46 + nameLength + extraLength + commentLength
    if (next > directoryOffset + directorySize)
      return damaged(`entry ${index + 1} of the central directory is cut short`)
    const name = Buffer.from(bytes.buffer, bytes.byteOffset + at + 46, nameLength).toString("utf8")
    // Sizes that do not fit 32 bits are in the Zip64 extra field, in this order.
    if (uncompressedSize === 0xffffffff || compressedSize === 0xffffffff || localHeaderOffset === 0xffffffff) {
      let extra = at + 46 + nameLength
      const extraEnd = extra + extraLength
      let found = false
      while (extra + 4 <= extraEnd) {
        const id = view.getUint16(extra, true)
        const size = view.getUint16(extra + 2, true)
        if (id === 0x0001) {
          let field = extra + 4
          const fieldEnd = field + size
          const take = () => {
            if (field + 8 > fieldEnd) return undefined
            const value = uint64(view, field)
            field += 8
            return value
          }
          if (uncompressedSize === 0xffffffff) uncompressedSize = take() ?? -1
          if (compressedSize === 0xffffffff) compressedSize = take() ?? -1
          if (localHeaderOffset === 0xffffffff) localHeaderOffset = take() ?? -1
          found = true
          break
        }
        extra += 4 + size
      }
      if (!found || uncompressedSize < 0 || compressedSize < 0 || localHeaderOffset < 0) {
        return damaged(`the Zip64 sizes of ${name} are missing`)
      }
    }
    entries.push({ name, method, compressedSize, uncompressedSize, localHeaderOffset })
    at = next
  }
  return entries
}

/** Where an entry's data starts, from its local header, or why it cannot be found. */
const dataStart = (view: DataView, entry: ZipEntry, limit: number): number | ZipProblem => {
  const at = entry.localHeaderOffset
  if (at + 30 > limit || view.getUint32(at, true) !== localHeader)
    return damaged(`the local header of ${entry.name} is missing`)
  const start = at + 30 + view.getUint16(at + 26, true) + view.getUint16(at + 28, true)
  if (start + entry.compressedSize > limit) return damaged(`the data of ${entry.name} lies outside the file`)
  return start
}

/**
 * Checks an archive before it is opened: the sizes its entries declare
 * (each, in total, and their compression ratios) against `limits`, then the
 * entries themselves, each inflated with a cap at the size it declares, so
 * that one whose headers claim little but which inflates far is caught
 * after at most its declared size. `undefined` when the archive is fine.
 */
export const checkArchive = (bytes: Uint8Array, limits: ZipLimits = defaultZipLimits): ZipProblem | undefined => {
  const entries = readDirectory(bytes, limits.maxEntries)
  if (!Array.isArray(entries)) return entries as ZipProblem
  let total = 0
  for (const entry of entries) {
    if (entry.uncompressedSize > limits.maxEntryBytes) {
      return tooLarge(
        `The archive's entry ${entry.name} declares ${formatBytes(entry.uncompressedSize)} uncompressed; ` +
          `at most ${formatBytes(limits.maxEntryBytes)} an entry are accepted (EXTRACTION_ZIP_MAX_ENTRY_BYTES).`
      )
    }
    total += entry.uncompressedSize
    if (entry.uncompressedSize > limits.ratioFloorBytes) {
      const ratio = entry.uncompressedSize / Math.max(1, entry.compressedSize)
      if (ratio > limits.maxRatio) {
        return tooLarge(
          `The archive's entry ${entry.name} expands ${Math.round(ratio)} times (${formatBytes(entry.compressedSize)} to ` +
            `${formatBytes(entry.uncompressedSize)}); at most ${limits.maxRatio} times is accepted (EXTRACTION_ZIP_MAX_RATIO).`
        )
      }
    }
  }
  if (total > limits.maxTotalBytes) {
    return tooLarge(
      `The archive's entries declare ${formatBytes(total)} uncompressed together; ` +
        `at most ${formatBytes(limits.maxTotalBytes)} are accepted.`
    )
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength)
  for (const entry of entries) {
    if (entry.name.endsWith("/") && entry.uncompressedSize === 0) continue
    const start = dataStart(view, entry, bytes.byteLength)
    if (typeof start !== "number") return start
    const data = bytes.subarray(start, start + entry.compressedSize)
    if (entry.method === 0) {
      if (entry.compressedSize !== entry.uncompressedSize)
        return damaged(`the stored entry ${entry.name} has two sizes`)
      continue
    }
    if (entry.method !== 8) return damaged(`the entry ${entry.name} uses compression method ${entry.method}`)
    let inflatedPast = false
    try {
      // One byte past the declared size is enough to know the declaration is false.
      const inflated = Zlib.inflateRawSync(data, {
        maxOutputLength: entry.uncompressedSize + 1,
        finishFlush: Zlib.constants.Z_SYNC_FLUSH
      })
      inflatedPast = inflated.length > entry.uncompressedSize
    } catch (cause) {
      if ((cause as { code?: string }).code !== "ERR_BUFFER_TOO_LARGE")
        return damaged(`the entry ${entry.name} cannot be inflated`)
      inflatedPast = true
    }
    if (inflatedPast) {
      return tooLarge(
        `The archive's entry ${entry.name} inflates past the ${formatBytes(entry.uncompressedSize)} its headers declare.`
      )
    }
  }
  return undefined
}
