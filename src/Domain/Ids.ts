import { Schema } from "effect"
import * as Crypto from "node:crypto"
import { Text } from "./Input.ts"

// Ids are UUIDv7 strings: time-ordered, so the id alone is a stable cursor for
// keyset pagination and keeps primary-key inserts at the end of the index.
// Ids arrive in paths and bodies, so they are request text like any other.
export const TenantId = Text.pipe(Schema.brand("TenantId"))
export type TenantId = typeof TenantId.Type

export const UserId = Text.pipe(Schema.brand("UserId"))
export type UserId = typeof UserId.Type

export const SessionId = Text.pipe(Schema.brand("SessionId"))
export type SessionId = typeof SessionId.Type

export const ApiKeyId = Text.pipe(Schema.brand("ApiKeyId"))
export type ApiKeyId = typeof ApiKeyId.Type

export const AgentId = Text.pipe(Schema.brand("AgentId"))
export type AgentId = typeof AgentId.Type

export const OrchestrationId = Text.pipe(Schema.brand("OrchestrationId"))
export type OrchestrationId = typeof OrchestrationId.Type

export const TeamId = Text.pipe(Schema.brand("TeamId"))
export type TeamId = typeof TeamId.Type

export const KnowledgeId = Text.pipe(Schema.brand("KnowledgeId"))
export type KnowledgeId = typeof KnowledgeId.Type

export const DocumentId = Text.pipe(Schema.brand("DocumentId"))
export type DocumentId = typeof DocumentId.Type

/** A new UUIDv7 (RFC 9562): 48-bit millisecond timestamp, then random bits. */
export const newId = (): string => {
  const bytes = Crypto.randomBytes(16)
  const now = Date.now()
  bytes.writeUIntBE(now, 0, 6)
  bytes[6] = 0x70 | (bytes[6]! & 0x0f)
  bytes[8] = 0x80 | (bytes[8]! & 0x3f)
  const hex = bytes.toString("hex")
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`
}

const uuidPattern = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/

/** Whether a string can be one of our ids; anything else cannot exist. */
export const isId = (value: string): boolean => uuidPattern.test(value)
