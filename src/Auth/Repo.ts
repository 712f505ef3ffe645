import * as Context from "effect/Context"
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as SqlClient from "effect/sql/SqlClient"
import * as SqlSchema from "effect/sql/SqlSchema"
import { forEachChunk } from "../Database/Chunks.ts"
import { tenantPage } from "../Database/Page.ts"
import { CounterSql } from "../Database/Sql.ts"
import { ApiKeyId, newId, SessionId, TenantId, UserId } from "../Domain/Ids.ts"
import { type ApiKey, defaultScopes, Plan, Scope } from "./Api.ts"
import { normalizeEmail } from "./Email.ts"
import * as Traced from "../Observability/Traced.ts"

const UserRow = Schema.Struct({
  id: UserId,
  tenantId: TenantId,
  email: Schema.String,
  name: Schema.NullOr(Schema.String),
  passwordHash: Schema.String
})
export type UserRow = typeof UserRow.Type

const TenantRow = Schema.Struct({ id: TenantId, name: Schema.String, plan: Plan })
export type TenantRow = typeof TenantRow.Type

const SessionRow = Schema.Struct({
  id: SessionId,
  tenantId: TenantId,
  userId: UserId,
  expiresAt: Schema.Date
})
export type SessionRow = typeof SessionRow.Type

const ApiKeyRow = Schema.Struct({
  id: ApiKeyId,
  tenantId: TenantId,
  name: Schema.String,
  prefix: Schema.String,
  keyHash: Schema.String,
  scopes: Schema.NullOr(Schema.Array(Scope)),
  createdAt: Schema.Date,
  revokedAt: Schema.NullOr(Schema.Date),
  expiresAt: Schema.NullOr(Schema.Date),
  lastUsedAt: Schema.NullOr(Schema.Date)
})
export type ApiKeyRow = typeof ApiKeyRow.Type

const keyColumns = "id, tenant_id, name, prefix, key_hash, scopes, created_at, revoked_at, expires_at, last_used_at"

/** An e-mail that is already registered. */
export class EmailTaken extends Data.TaggedError("EmailTaken")<{}> {}

// Every lookup of a presented credential by its hash is one of these queries.
const credentialLookups = (credential: "api_key" | "session") =>
  Metric.counter("auth_credential_lookups_total", {
    description: "Database lookups of presented API keys and session tokens, by credential",
    incremental: true,
    attributes: { credential }
  })
const keyLookups = credentialLookups("api_key")
const sessionLookups = credentialLookups("session")

/** All SQL of accounts, sessions and API keys. Every tenant-owned read and write takes the tenant. */
export class AuthRepo extends Context.Service<AuthRepo>()("agent-host/AuthRepo", {
  make: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient

    const createAccount = Traced.fn("AuthRepo.createAccount")(
      function* (input: {
        readonly email: string
        readonly name: string | null
        readonly passwordHash: string
        readonly tenantName: string
      }) {
        const tenantId = TenantId.make(newId())
        const userId = UserId.make(newId())
        const [tenant] = yield* sql<{ plan: Plan; name: string }>`
        INSERT INTO tenants (id, name) VALUES (${tenantId}, ${input.tenantName}) RETURNING name, plan`
        yield* sql`
        INSERT INTO users (id, tenant_id, email, email_normalized, name, password_hash, role)
        VALUES (${userId}, ${tenantId}, ${input.email}, ${normalizeEmail(input.email)}, ${input.name},
                ${input.passwordHash}, 'owner')`
        return {
          user: { id: userId, email: input.email, name: input.name },
          tenant: { id: tenantId, name: tenant!.name, plan: tenant!.plan }
        }
      },
      sql.withTransaction,
      Effect.catch((error) =>
        error.reason._tag === "UniqueViolation" ? Effect.fail(new EmailTaken()) : Effect.die(error)
      )
    )

    // By the normalised e-mail; a row left without one by migration 0024 (its
    // normalised e-mail belongs to an older account) by its exact e-mail, first.
    const findUserByEmail = SqlSchema.findOneOption({
      Request: Schema.String,
      Result: UserRow,
      execute: (email) =>
        sql`SELECT id, tenant_id, email, name, password_hash FROM users
            WHERE email_normalized = ${normalizeEmail(email)} OR (email_normalized IS NULL AND email = ${email.trim()})
            ORDER BY email_normalized IS NULL DESC LIMIT 1`
    })

    const findAccount = SqlSchema.findOne({
      Request: UserId,
      Result: Schema.Struct({
        id: UserId,
        email: Schema.String,
        name: Schema.NullOr(Schema.String),
        tenantId: TenantId,
        tenantName: Schema.String,
        plan: Plan
      }),
      execute: (userId) =>
        sql`SELECT u.id, u.email, u.name, t.id AS tenant_id, t.name AS tenant_name, t.plan
            FROM users u JOIN tenants t ON t.id = u.tenant_id WHERE u.id = ${userId}`
    })

    const insertSession = (input: SessionRow & { readonly tokenHash: string }) =>
      sql`INSERT INTO sessions (id, tenant_id, user_id, token_hash, expires_at)
          VALUES (${input.id}, ${input.tenantId}, ${input.userId}, ${input.tokenHash}, ${input.expiresAt})`.pipe(
        Effect.asVoid,
        Effect.orDie,
        Traced.withSpan("AuthRepo.insertSession")
      )

    const findLiveSession = SqlSchema.findOneOption({
      Request: Schema.String,
      Result: SessionRow,
      execute: (tokenHash) =>
        sql`SELECT id, tenant_id, user_id, expires_at FROM sessions
            WHERE token_hash = ${tokenHash} AND revoked_at IS NULL AND expires_at > now()`
    })

    /** Revokes and returns the token's hash; every node hears of it at the commit (`session:<hash>`). */
    const revokeSession = (id: SessionId) =>
      sql<{ tokenHash: string }>`
        WITH revoked AS (
          UPDATE sessions SET revoked_at = now() WHERE id = ${id} AND revoked_at IS NULL RETURNING token_hash
        )
        SELECT token_hash, pg_notify(${credentialChannel}, 'session:' || token_hash) FROM revoked`.pipe(
        Effect.map((rows) => Option.fromNullishOr(rows[0]?.tokenHash)),
        Effect.orDie,
        Traced.withSpan("AuthRepo.revokeSession")
      )

    const insertApiKey = (input: {
      readonly tenantId: TenantId
      readonly name: string
      readonly prefix: string
      readonly keyHash: string
      readonly scopes: ReadonlyArray<Scope> | null
      readonly expiresAt: Date | null
    }) =>
      sql<{ id: string; createdAt: Date }>`
        INSERT INTO api_keys (id, tenant_id, name, prefix, key_hash, scopes, expires_at)
        VALUES (${newId()}, ${input.tenantId}, ${input.name}, ${input.prefix}, ${input.keyHash},
                ${input.scopes === null ? null : [...input.scopes]}, ${input.expiresAt})
        RETURNING id, created_at`.pipe(
        Effect.map(([row]) => ({ id: ApiKeyId.make(row!.id), createdAt: row!.createdAt })),
        Effect.orDie,
        Traced.withSpan("AuthRepo.insertApiKey")
      )

    /** A page of the tenant's keys that are not revoked, in id (so creation) order. */
    const listApiKeys = (tenantId: TenantId, page: { readonly after: string | null; readonly limit: number }) =>
      tenantPage({
        table: "api_keys",
        columns: keyColumns,
        row: ApiKeyRow,
        tenantId,
        filters: [sql`revoked_at IS NULL`],
        after: page.after,
        limit: page.limit
      }).pipe(Effect.provideService(SqlClient.SqlClient, sql), Effect.orDie, Traced.withSpan("AuthRepo.listApiKeys"))

    /** Revokes and returns the hash, so the caller can drop it from caches. */
    const revokeApiKey = (tenantId: TenantId, id: ApiKeyId) =>
      // The notification goes out with the commit, so every node drops the key
      // from its cache exactly when the revocation becomes visible.
      sql<{ keyHash: string }>`
        WITH revoked AS (
          UPDATE api_keys SET revoked_at = now()
          WHERE tenant_id = ${tenantId} AND id = ${id} AND revoked_at IS NULL
          RETURNING key_hash
        )
        SELECT key_hash, pg_notify(${credentialChannel}, key_hash) FROM revoked`.pipe(
        Effect.map((rows) => Option.fromNullishOr(rows[0]?.keyHash)),
        Effect.orDie,
        Traced.withSpan("AuthRepo.revokeApiKey")
      )

    /**
     * Records when keys were last used, many at once (1,000 keys a statement);
     * a time never moves back (two nodes may flush the same key in either
     * order), so a flush that fails part way can be made again whole.
     */
    const touchApiKeys = (uses: ReadonlyArray<readonly [ApiKeyId, Date]>) =>
      forEachChunk(
        uses,
        (chunk) =>
          sql`
          UPDATE api_keys AS k SET last_used_at = u.used_at
          FROM unnest(${chunk.map(([id]) => id)}::text[], ${chunk.map(([, at]) => at.toISOString())}::timestamptz[])
            AS u (id, used_at)
          WHERE k.id = u.id AND (k.last_used_at IS NULL OR k.last_used_at < u.used_at)`
      ).pipe(Effect.asVoid, Traced.withSpan("AuthRepo.touchApiKeys"))

    const findApiKeyByHash = SqlSchema.findOneOption({
      Request: Schema.String,
      Result: ApiKeyRow,
      execute: (keyHash) =>
        sql`SELECT ${sql.literal(keyColumns)} FROM api_keys
            WHERE key_hash = ${keyHash}`
    })

    return {
      createAccount,
      findUserByEmail: (email: string) => findUserByEmail(email).pipe(Effect.orDie),
      findAccount: (userId: UserId) => findAccount(userId).pipe(Effect.orDie),
      insertSession,
      findLiveSession: (tokenHash: string) =>
        findLiveSession(tokenHash).pipe(Effect.orDie, Effect.tap(Metric.update(sessionLookups, 1))),
      revokeSession,
      insertApiKey,
      listApiKeys,
      revokeApiKey,
      findApiKeyByHash: (keyHash: string) =>
        findApiKeyByHash(keyHash).pipe(Effect.orDie, Effect.tap(Metric.update(keyLookups, 1))),
      touchApiKeys
    } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make)
}

/**
 * Channel on which every node hears of credential changes: a revoked key's
 * hash, `session:<hash>` for a revoked session, `issued:<hash>` for a new key
 * or session (CredentialGuard.ts). Named when it carried key revocations only.
 */
export const credentialChannel = "api_key_revoked"

/** A key as clients see it: without its tenant, hash and revocation. */
export const toApiKey = ({ tenantId: _tenant, keyHash: _hash, revokedAt: _revoked, ...key }: ApiKeyRow): ApiKey => ({
  ...key,
  // No stored list means the default scopes.
  scopes: key.scopes ?? defaultScopes
})

/**
 * The leaky buckets of login and register throttling, on the counting pool
 * (losing the last fraction of a second in a database crash only forgets a
 * few attempts).
 */
export class ThrottleRepo extends Context.Service<ThrottleRepo>()("agent-host/ThrottleRepo", {
  make: Effect.gen(function* () {
    const sql = yield* CounterSql

    /**
     * One attempt against the bucket `key` (at most `capacity` attempts,
     * draining at `perSecond`), in one statement: the row lock of the upsert
     * makes attempts from any number of nodes add up exactly. A refused
     * attempt does not fill the bucket. `level` is the bucket after it.
     */
    const attempt = (key: string, capacity: number, perSecond: number) =>
      sql<{ level: number; refused: boolean }>`
        INSERT INTO auth_throttle AS b (key, level, refused, updated_at)
        VALUES (${key}, 1, false, now())
        ON CONFLICT (key) DO UPDATE SET
          level = CASE
            WHEN GREATEST(0, b.level - EXTRACT(EPOCH FROM now() - b.updated_at)::float8 * ${perSecond}) + 1 <= ${capacity}
            THEN GREATEST(0, b.level - EXTRACT(EPOCH FROM now() - b.updated_at)::float8 * ${perSecond}) + 1
            ELSE GREATEST(0, b.level - EXTRACT(EPOCH FROM now() - b.updated_at)::float8 * ${perSecond}) END,
          refused = GREATEST(0, b.level - EXTRACT(EPOCH FROM now() - b.updated_at)::float8 * ${perSecond}) + 1 > ${capacity},
          updated_at = now()
        RETURNING level, refused`.pipe(
        Effect.map((rows) => rows[0]!),
        Effect.orDie,
        Traced.withSpan("ThrottleRepo.attempt")
      )

    /**
     * Gives one attempt back to the bucket `key` (drained to now first), for
     * an attempt that turned out not to be a failure.
     */
    const release = (key: string, perSecond: number) =>
      sql`
        UPDATE auth_throttle AS b SET
          level = GREATEST(0, b.level - EXTRACT(EPOCH FROM now() - b.updated_at)::float8 * ${perSecond} - 1),
          updated_at = now()
        WHERE key = ${key}`.pipe(Effect.asVoid, Effect.orDie, Traced.withSpan("ThrottleRepo.release"))

    /** Buckets untouched for `seconds` are empty: forget them. */
    const forgetIdle = (seconds: number) =>
      sql`DELETE FROM auth_throttle WHERE updated_at < now() - make_interval(secs => ${seconds})`.pipe(
        Effect.asVoid,
        Effect.orDie,
        Traced.withSpan("ThrottleRepo.forgetIdle")
      )

    return { attempt, release, forgetIdle } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make)
}
