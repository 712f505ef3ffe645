import * as Schema from "effect/Schema"
import { Text } from "./Input.ts"

// Ids are UUIDv7 strings: time-ordered, so the id alone is a stable cursor for
// keyset pagination and keeps primary-key inserts at the end of the index.
// Ids arrive in paths and bodies, so they are request text like any other,
// branded so that one kind of id cannot be passed for another.
const brandedId = <B extends string>(brand: Parameters<typeof Schema.brand<B>>[0]) => Text.pipe(Schema.brand<B>(brand))

export const TenantId = brandedId("TenantId")
export const UserId = brandedId("UserId")
export const SessionId = brandedId("SessionId")
export const ApiKeyId = brandedId("ApiKeyId")
export const AgentId = brandedId("AgentId")
export const OrchestrationId = brandedId("OrchestrationId")
export const TeamId = brandedId("TeamId")
export const KnowledgeId = brandedId("KnowledgeId")
export const DocumentId = brandedId("DocumentId")
export const ToolId = brandedId("ToolId")
export const SecretId = brandedId("SecretId")

export type TenantId = typeof TenantId.Type
export type UserId = typeof UserId.Type
export type SessionId = typeof SessionId.Type
export type ApiKeyId = typeof ApiKeyId.Type
export type AgentId = typeof AgentId.Type
export type OrchestrationId = typeof OrchestrationId.Type
export type TeamId = typeof TeamId.Type
export type KnowledgeId = typeof KnowledgeId.Type
export type DocumentId = typeof DocumentId.Type
export type ToolId = typeof ToolId.Type
export type SecretId = typeof SecretId.Type

const hex = Array.from({ length: 256 }, (_, byte) => byte.toString(16).padStart(2, "0"))

/**
 * A new UUIDv7 (RFC 9562): 48-bit millisecond timestamp, then random bits.
 * Web Crypto, so the schemas that use ids load in a browser too.
 */
// Random bytes are drawn 4 KiB at a time: one draw per id costs more than the rest of it.
const pool = new Uint8Array(4096)
let pooled = 0

export const newId = (): string => {
  if (pooled < 16) {
    globalThis.crypto.getRandomValues(pool)
    pooled = pool.length
  }
  pooled -= 16
  const bytes = pool.subarray(pooled, pooled + 16)
  let now = Date.now()
  for (let i = 5; i >= 0; i--) {
    bytes[i] = now % 256
    now = Math.floor(now / 256)
  }
  bytes[6] = 0x70 | (bytes[6]! & 0x0f)
  bytes[8] = 0x80 | (bytes[8]! & 0x3f)
  let id = ""
  for (let i = 0; i < 16; i++) id += (i === 4 || i === 6 || i === 8 || i === 10 ? "-" : "") + hex[bytes[i]!]
  return id
}

const uuidPattern = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/

/** Whether a string can be one of our ids; anything else cannot exist. */
export const isId = (value: string): boolean => uuidPattern.test(value)
