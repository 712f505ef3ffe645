import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as SqlClient from "effect/sql/SqlClient"
import type { TenantId } from "../Domain/Ids.ts"
import * as Traced from "../Observability/Traced.ts"

// All SQL of `mcp` tools' OAuth connections (docs/mcp.md#oauth). Sealed
// columns hold what SecretVault.seal gives, all of a row under its
// `key_version`; every statement is scoped by tenant.

/** A tool's connection as stored: the client registered with the authorization server, then its tokens. */
export interface ConnectionRow {
  readonly toolId: string
  readonly tenantId: string
  /** The MCP server's URL the tokens are for: a tool whose url changed is no longer connected. */
  readonly resource: string
  readonly issuer: string
  readonly tokenEndpoint: string
  readonly clientId: string
  readonly clientSecret: string | null
  /** The redirect URI the client was registered with: a client is reused only for the same one. */
  readonly redirectUri: string
  readonly accessToken: string | null
  readonly refreshToken: string | null
  readonly keyVersion: number
  readonly expiresAt: Date | null
  readonly scope: string | null
  readonly connectedAt: Date | null
  readonly updatedAt: Date
}

/** An authorization started and not yet come back. */
export interface PendingRow {
  readonly stateHash: string
  readonly tenantId: string
  readonly toolId: string
  readonly resource: string
  readonly issuer: string
  readonly tokenEndpoint: string
  readonly clientId: string
  readonly clientSecret: string | null
  readonly verifier: string
  readonly keyVersion: number
  readonly redirectUri: string
  readonly createdAt: Date
}

/** The client a tool registered, as stored on its connection. */
export interface ClientFields {
  readonly resource: string
  readonly issuer: string
  readonly tokenEndpoint: string
  readonly clientId: string
  readonly clientSecret: string | null
  readonly redirectUri: string
  readonly keyVersion: number
}

/** Tokens as stored, sealed. */
export interface TokenFields {
  readonly accessToken: string
  readonly refreshToken: string | null
  readonly expiresAt: Date | null
  readonly scope: string | null
}

/** A connection's sealed values under its key version, as the re-seal pass reads and writes them. */
export interface SealedConnection {
  readonly toolId: string
  readonly tenantId: string
  readonly clientSecret: string | null
  readonly accessToken: string | null
  readonly refreshToken: string | null
  readonly keyVersion: number
}

/** A started authorization's sealed values under its key version, as the re-seal pass reads and writes them. */
export interface SealedPending {
  readonly stateHash: string
  readonly tenantId: string
  readonly toolId: string
  readonly clientSecret: string | null
  readonly verifier: string
  readonly keyVersion: number
}

/** How long a started authorization may come back. */
export const pendingMinutes = 10

const columns = `tool_id, tenant_id, resource, issuer, token_endpoint, client_id, client_secret, redirect_uri, access_token,
  refresh_token, key_version, expires_at, scope, connected_at, updated_at`

export class McpOAuthRepo extends Context.Service<McpOAuthRepo>()("agent-host/McpOAuthRepo", {
  make: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient

    const find = (tenantId: TenantId, toolId: string) =>
      sql<ConnectionRow>`SELECT ${sql.literal(columns)} FROM mcp_oauth_connections
        WHERE tenant_id = ${tenantId} AND tool_id = ${toolId}`.pipe(
        Effect.map((rows) => Option.fromNullishOr(rows[0])),
        Effect.orDie,
        Traced.withSpan("McpOAuthRepo.find")
      )

    /**
     * The connection, its row locked until the transaction `use` runs in
     * ends: refreshes of one connection wait for each other, on every node.
     */
    const withLocked = <A, E, R>(
      tenantId: TenantId,
      toolId: string,
      use: (row: Option.Option<ConnectionRow>) => Effect.Effect<A, E, R>
    ) =>
      sql
        .withTransaction(
          sql<ConnectionRow>`SELECT ${sql.literal(columns)} FROM mcp_oauth_connections
          WHERE tenant_id = ${tenantId} AND tool_id = ${toolId} FOR UPDATE`.pipe(
            Effect.orDie,
            Effect.flatMap((rows) => use(Option.fromNullishOr(rows[0])))
          )
        )
        .pipe(Effect.catchTag("SqlError", Effect.die), Traced.withSpan("McpOAuthRepo.withLocked"))

    /** Stores the client registered for the tool; tokens of another authorization server are dropped. */
    const saveClient = (tenantId: TenantId, toolId: string, client: ClientFields) =>
      sql`INSERT INTO mcp_oauth_connections
            (tool_id, tenant_id, resource, issuer, token_endpoint, client_id, client_secret, redirect_uri, key_version)
          VALUES (${toolId}, ${tenantId}, ${client.resource}, ${client.issuer}, ${client.tokenEndpoint},
                  ${client.clientId}, ${client.clientSecret}, ${client.redirectUri}, ${client.keyVersion})
          ON CONFLICT (tool_id) DO UPDATE SET
            resource = excluded.resource, issuer = excluded.issuer, token_endpoint = excluded.token_endpoint,
            client_id = excluded.client_id, client_secret = excluded.client_secret,
            redirect_uri = excluded.redirect_uri, key_version = excluded.key_version, access_token = NULL, refresh_token = NULL, expires_at = NULL,
            scope = NULL, connected_at = NULL, updated_at = now()
          WHERE mcp_oauth_connections.tenant_id = excluded.tenant_id`.pipe(
        Effect.asVoid,
        Effect.orDie,
        Traced.withSpan("McpOAuthRepo.saveClient")
      )

    /** Stores a new connection's client and tokens (an authorization that came back). */
    const connect = (tenantId: TenantId, toolId: string, client: ClientFields, tokens: TokenFields) =>
      sql`INSERT INTO mcp_oauth_connections
            (tool_id, tenant_id, resource, issuer, token_endpoint, client_id, client_secret, redirect_uri,
             key_version, access_token, refresh_token, expires_at, scope, connected_at)
          VALUES (${toolId}, ${tenantId}, ${client.resource}, ${client.issuer}, ${client.tokenEndpoint},
                  ${client.clientId}, ${client.clientSecret}, ${client.redirectUri}, ${client.keyVersion},
                  ${tokens.accessToken},
                  ${tokens.refreshToken}, ${tokens.expiresAt}, ${tokens.scope}, now())
          ON CONFLICT (tool_id) DO UPDATE SET
            resource = excluded.resource, issuer = excluded.issuer, token_endpoint = excluded.token_endpoint,
            client_id = excluded.client_id, client_secret = excluded.client_secret,
            redirect_uri = excluded.redirect_uri, key_version = excluded.key_version,
            access_token = excluded.access_token,
            refresh_token = excluded.refresh_token, expires_at = excluded.expires_at, scope = excluded.scope,
            connected_at = now(), updated_at = now()
          WHERE mcp_oauth_connections.tenant_id = excluded.tenant_id`.pipe(
        Effect.asVoid,
        Effect.orDie,
        Traced.withSpan("McpOAuthRepo.connect")
      )

    /** Replaces the tokens after a refresh (the client secret re-sealed with them, under one key version). */
    const saveTokens = (
      tenantId: TenantId,
      toolId: string,
      tokens: TokenFields & { readonly clientSecret: string | null; readonly keyVersion: number }
    ) =>
      sql`UPDATE mcp_oauth_connections SET access_token = ${tokens.accessToken},
            refresh_token = ${tokens.refreshToken}, expires_at = ${tokens.expiresAt}, scope = ${tokens.scope},
            client_secret = ${tokens.clientSecret}, key_version = ${tokens.keyVersion}, updated_at = now()
          WHERE tenant_id = ${tenantId} AND tool_id = ${toolId}`.pipe(
        Effect.asVoid,
        Effect.orDie,
        Traced.withSpan("McpOAuthRepo.saveTokens")
      )

    /** The authorization server refused the refresh: the connection is kept, expired, with no refresh token. */
    const expire = (tenantId: TenantId, toolId: string) =>
      sql`UPDATE mcp_oauth_connections SET refresh_token = NULL, expires_at = LEAST(expires_at, now()),
            updated_at = now()
          WHERE tenant_id = ${tenantId} AND tool_id = ${toolId}`.pipe(
        Effect.asVoid,
        Effect.orDie,
        Traced.withSpan("McpOAuthRepo.expire")
      )

    /** Forgets the tokens (the registered client is kept, for the next connection); whether there were any. */
    const forget = (tenantId: TenantId, toolId: string) =>
      sql`UPDATE mcp_oauth_connections SET access_token = NULL, refresh_token = NULL, expires_at = NULL,
            scope = NULL, connected_at = NULL, updated_at = now()
          WHERE tenant_id = ${tenantId} AND tool_id = ${toolId}`.pipe(
        Effect.asVoid,
        Effect.orDie,
        Traced.withSpan("McpOAuthRepo.forget")
      )

    /** Records a started authorization, and drops those too old to come back. */
    const addPending = (pending: Omit<PendingRow, "createdAt">) =>
      Effect.gen(function* () {
        yield* sql`DELETE FROM mcp_oauth_pending
                   WHERE created_at < now() - make_interval(mins => ${pendingMinutes})`
        yield* sql`INSERT INTO mcp_oauth_pending
                     (state_hash, tenant_id, tool_id, resource, issuer, token_endpoint, client_id, client_secret,
                      verifier, key_version, redirect_uri)
                   VALUES (${pending.stateHash}, ${pending.tenantId}, ${pending.toolId}, ${pending.resource},
                           ${pending.issuer}, ${pending.tokenEndpoint}, ${pending.clientId}, ${pending.clientSecret},
                           ${pending.verifier}, ${pending.keyVersion}, ${pending.redirectUri})`
      }).pipe(Effect.orDie, Traced.withSpan("McpOAuthRepo.addPending"))

    /** Takes the authorization of this state: once, and only within `pendingMinutes` of its start. */
    const takePending = (stateHash: string) =>
      sql<PendingRow & { readonly fresh: boolean }>`DELETE FROM mcp_oauth_pending WHERE state_hash = ${stateHash}
        RETURNING *, created_at > now() - make_interval(mins => ${pendingMinutes}) AS fresh`.pipe(
        Effect.map((rows) => Option.fromNullishOr(rows[0])),
        Effect.orDie,
        Traced.withSpan("McpOAuthRepo.takePending")
      )

    // The re-seal pass (SecretVault's `resealInBackground`) reads every tenant's rows; it keeps its SQL errors to
    // be tried again.

    /** Up to `limit` connections after the tool `after` sealed under another key version than `current`. */
    const connectionsUnderOtherKeys = (current: number, after: string, limit: number) =>
      sql<SealedConnection>`SELECT tool_id, tenant_id, client_secret, access_token, refresh_token, key_version
        FROM mcp_oauth_connections
        WHERE (key_version < ${current} OR key_version > ${current}) AND tool_id > ${after}
        ORDER BY tool_id LIMIT ${limit}`.pipe(Traced.withSpan("McpOAuthRepo.connectionsUnderOtherKeys"))

    /**
     * Writes the re-sealed values if the connection still holds what was read
     * (a refresh or a new connection meanwhile wins); whether it did.
     */
    const resealConnection = (read: SealedConnection, value: Omit<SealedConnection, "toolId" | "tenantId">) =>
      sql<{ tool_id: string }>`UPDATE mcp_oauth_connections
        SET client_secret = ${value.clientSecret}, access_token = ${value.accessToken},
            refresh_token = ${value.refreshToken}, key_version = ${value.keyVersion}
        WHERE tenant_id = ${read.tenantId} AND tool_id = ${read.toolId} AND key_version = ${read.keyVersion}
          AND client_secret IS NOT DISTINCT FROM ${read.clientSecret}
          AND access_token IS NOT DISTINCT FROM ${read.accessToken}
          AND refresh_token IS NOT DISTINCT FROM ${read.refreshToken}
        RETURNING tool_id`.pipe(
        Effect.map((rows) => rows.length > 0),
        Traced.withSpan("McpOAuthRepo.resealConnection")
      )

    /**
     * Up to `limit` authorizations after the state hash `after` sealed under
     * another key version than `current`, of those that may still come back
     * (the others are refused unopened).
     */
    const pendingUnderOtherKeys = (current: number, after: string, limit: number) =>
      sql<SealedPending>`SELECT state_hash, tenant_id, tool_id, client_secret, verifier, key_version
        FROM mcp_oauth_pending
        WHERE (key_version < ${current} OR key_version > ${current}) AND state_hash > ${after}
          AND created_at > now() - make_interval(mins => ${pendingMinutes})
        ORDER BY state_hash LIMIT ${limit}`.pipe(Traced.withSpan("McpOAuthRepo.pendingUnderOtherKeys"))

    /** Writes the re-sealed values if the authorization is still there as it was read; whether it was. */
    const resealPending = (
      read: SealedPending,
      value: Pick<SealedPending, "clientSecret" | "verifier" | "keyVersion">
    ) =>
      sql<{ state_hash: string }>`UPDATE mcp_oauth_pending
        SET client_secret = ${value.clientSecret}, verifier = ${value.verifier}, key_version = ${value.keyVersion}
        WHERE tenant_id = ${read.tenantId} AND state_hash = ${read.stateHash} AND key_version = ${read.keyVersion}
          AND verifier = ${read.verifier}
        RETURNING state_hash`.pipe(
        Effect.map((rows) => rows.length > 0),
        Traced.withSpan("McpOAuthRepo.resealPending")
      )

    return {
      find,
      withLocked,
      saveClient,
      connect,
      saveTokens,
      expire,
      forget,
      addPending,
      takePending,
      connectionsUnderOtherKeys,
      resealConnection,
      pendingUnderOtherKeys,
      resealPending
    } as const
  })
}) {
  static readonly layer = Layer.effect(this, this.make)
}
