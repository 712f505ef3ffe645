/**
 * A fake authoritative name server: a real DNS server over UDP on 127.0.0.1
 * (an ephemeral port) that answers A and AAAA questions from a table and
 * records every question as it arrived.
 *
 * ```ts
 * const dns = yield* FakeDns.make({ "a.test": { a: ["93.184.215.14"] }, "slow.test": "silent" })
 * dns.address            // 127.0.0.1:<port>, for Resolver#setServers
 * dns.queries            // every question so far: { name, type, at }
 * ```
 *
 * A name not in the table is NXDOMAIN; a name without records of the type
 * asked is an empty answer; a `"silent"` name is never answered.
 */
import { Effect } from "effect"
import ipaddr from "ipaddr.js"
import * as Dgram from "node:dgram"

export type Zone = Readonly<
  Record<string, { readonly a?: ReadonlyArray<string>; readonly aaaa?: ReadonlyArray<string> } | "silent">
>

export interface Query {
  readonly name: string
  readonly type: "A" | "AAAA" | "other"
  /** When it arrived (ms since the epoch). */
  readonly at: number
}

export interface FakeDns {
  readonly address: string
  readonly queries: ReadonlyArray<Query>
}

const typeA = 1
const typeAaaa = 28

/** The question's name, type and where the question section ends, or undefined when the packet is not one. */
const question = (packet: Buffer) => {
  let offset = 12
  const labels: Array<string> = []
  while (offset < packet.length) {
    const length = packet[offset]!
    offset += 1
    if (length === 0) break
    labels.push(packet.subarray(offset, offset + length).toString("ascii"))
    offset += length
  }
  if (offset + 4 > packet.length) return undefined
  return { name: labels.join(".").toLowerCase(), type: packet.readUInt16BE(offset), end: offset + 4 }
}

export const make = (zone: Zone) =>
  Effect.gen(function* () {
    const queries: Array<Query> = []
    const socket = Dgram.createSocket("udp4")
    socket.on("message", (packet, peer) => {
      if (packet.length < 12) return
      const asked = question(packet)
      if (asked === undefined) return
      queries.push({
        name: asked.name,
        type: asked.type === typeA ? "A" : asked.type === typeAaaa ? "AAAA" : "other",
        at: Date.now()
      })
      const entry = zone[asked.name]
      if (entry === "silent") return
      const addresses =
        entry === undefined
          ? []
          : ((asked.type === typeA ? entry.a : asked.type === typeAaaa ? entry.aaaa : undefined) ?? [])
      const header = Buffer.alloc(12)
      header.writeUInt16BE(packet.readUInt16BE(0), 0)
      // A response, recursion desired and available; NXDOMAIN for a name not in the zone.
      header.writeUInt16BE(0x8180 | (entry === undefined ? 3 : 0), 2)
      header.writeUInt16BE(1, 4)
      header.writeUInt16BE(addresses.length, 6)
      const answers = addresses.map((address) => {
        const bytes = Buffer.from(ipaddr.parse(address).toByteArray())
        const record = Buffer.alloc(12)
        record.writeUInt16BE(0xc00c, 0) // the name: a pointer to the question's
        record.writeUInt16BE(asked.type, 2)
        record.writeUInt16BE(1, 4) // IN
        record.writeUInt32BE(60, 6)
        record.writeUInt16BE(bytes.length, 10)
        return Buffer.concat([record, bytes])
      })
      socket.send(Buffer.concat([header, packet.subarray(12, asked.end), ...answers]), peer.port, peer.address)
    })
    const port = yield* Effect.acquireRelease(
      Effect.callback<number>((resume) => {
        socket.bind(0, "127.0.0.1", () => resume(Effect.succeed(socket.address().port)))
      }),
      () =>
        Effect.callback<void>((resume) => {
          socket.close(() => resume(Effect.void))
        })
    )
    return {
      address: `127.0.0.1:${port}`,
      get queries() {
        return queries
      }
    } satisfies FakeDns as FakeDns
  })
