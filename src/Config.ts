import * as Config from "effect/Config"
import { SourceError } from "effect/ConfigProvider"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type * as LogLevel from "effect/LogLevel"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import * as NodePath from "node:path"

/**
 * Every setting the service reads, in one place. Defaults make `npm start`
 * work offline with nothing installed; docs/configuration.md lists each
 * variable (test/Project/ConfigurationDoc.test.ts keeps the two in step).
 */
export interface AppSettings {
  /** HTTP port of the API. */
  readonly port: number
  /** Address the HTTP server binds to. */
  readonly host: string
  /** External PostgreSQL; when absent an embedded server is started. */
  readonly databaseUrl: Option.Option<Redacted.Redacted<string>>
  /**
   * Directory for the embedded PostgreSQL's files. Absent: `./.data/postgres`,
   * or, as root when the OS user that runs PostgreSQL cannot reach the project
   * directory, a stable directory under /var/lib/agent-host (see Embedded.ts).
   */
  readonly embeddedPostgresDataDir: Option.Option<string>
  /**
   * Port of the embedded PostgreSQL; a taken one stops the start. Absent: 54329, or
   * when that is taken a free port, remembered in the data directory (see Embedded.ts).
   */
  readonly embeddedPostgresPort: Option.Option<number>
  /** OS user the embedded PostgreSQL runs as when the service runs as root. */
  readonly embeddedPostgresUser: string
  readonly databasePoolSize: number
  /** Bound on one SQL statement (Postgres statement_timeout on every pooled connection). */
  readonly databaseStatementTimeout: Duration.Duration
  /** Bound on opening a connection to Postgres. */
  readonly databaseConnectTimeout: Duration.Duration
  /** Largest request body accepted, in bytes. */
  readonly maxBodyBytes: number
  readonly sessionTtl: Duration.Duration
  /**
   * The session cookie: undefined (unset) picks per request, `__Host-session`
   * with `Secure` unless the request is plain-HTTP localhost; true always
   * `__Host-session` with `Secure` (and HSTS); false always `session` without it.
   */
  readonly cookieSecure: boolean | undefined
  /** How long a verified API key is trusted before it is checked again. */
  readonly apiKeyCacheTtl: Duration.Duration
  /** How long a live session is trusted before it is checked again (logout drops it at once, on every node). */
  readonly sessionCacheTtl: Duration.Duration
  /**
   * Rejected API keys and session tokens remembered (their hashes, at most
   * REJECTED_CREDENTIALS_CACHE_SIZE, each for REJECTED_CREDENTIALS_CACHE_TTL),
   * so a repeated bad credential is refused without a database query.
   */
  readonly rejectedCredentialsCacheTtl: Duration.Duration
  readonly rejectedCredentialsCacheSize: number
  /**
   * Failed credentials (API keys, session tokens) per client address per
   * CREDENTIAL_FAILURES_WINDOW on each node; past it, credentials this node has
   * not verified recently get 429 before any lookup.
   */
  readonly credentialFailuresPerAddress: number
  readonly credentialFailuresWindow: Duration.Duration
  /** How often the keys used since the last flush have their `lastUsedAt` written (one statement for all). */
  readonly apiKeyLastUsedFlush: Duration.Duration
  /** Model given to agents created without one. */
  readonly defaultModel: string
  /** Grace period for in-flight requests on SIGTERM. */
  readonly shutdownGrace: Duration.Duration
  /** Longest chat message, and longest execution input, accepted, in characters. */
  readonly maxMessageChars: number
  /** Longest prompt a step may render to, in characters (a definition that could exceed it is refused). */
  readonly maxPromptChars: number
  /** Most steps in one orchestration. */
  readonly maxSteps: number
  /** Most variables in one execute request. */
  readonly maxVariables: number
  /** Longest variable name accepted, in characters. */
  readonly maxVariableNameChars: number
  /** Longest variable value accepted, in characters. */
  readonly maxVariableChars: number
  /** OpenAI-compatible Chat Completions endpoint (OpenAI, Ollama, vLLM, LM Studio, llama.cpp). */
  readonly openaiBaseUrl: string
  readonly openaiApiKey: Option.Option<Redacted.Redacted<string>>
  /** Anthropic Messages API endpoint. */
  readonly anthropicBaseUrl: string
  readonly anthropicApiKey: Option.Option<Redacted.Redacted<string>>
  /** Bound on one model call, retries excluded. */
  readonly modelTimeout: Duration.Duration
  /** Retries of a model call after a 429, a 5xx or a connection error. */
  readonly modelMaxRetries: number
  /** Tokens of conversation history sent to a model, system prompt included. */
  readonly modelContextTokens: number
  /** Off: API-key requests are neither counted nor limited (a deployment that does not bill). */
  readonly enforceDailyLimits: boolean
  /** API-key requests per UTC day of each plan; business is unlimited. */
  readonly freeDailyLimit: number
  readonly proDailyLimit: number
  /** Model tokens (input plus output) per UTC day of each plan, across chat, executions and team runs; business is unlimited. */
  readonly freeDailyTokens: number
  readonly proDailyTokens: number
  /**
   * The most output tokens (`max_tokens`) one model call may ask for, per plan;
   * with the prompt, what a call reserves of the day's budget. Business also
   * applies when ENFORCE_DAILY_LIMITS is off.
   */
  readonly freeMaxOutputTokens: number
  readonly proMaxOutputTokens: number
  readonly businessMaxOutputTokens: number
  /**
   * The models each plan may use: exact ids, or prefixes ending in `*`
   * (`openai/*`). None: every model.
   */
  readonly freeModels: Option.Option<ReadonlyArray<string>>
  readonly proModels: Option.Option<ReadonlyArray<string>>
  readonly businessModels: Option.Option<ReadonlyArray<string>>
  /**
   * What a tenant of each plan may keep (FREE_MAX_AGENTS, PRO_MAX_DOCUMENTS,
   * BUSINESS_MAX_STORED_BYTES...; `unlimited` or null: no limit). See docs/limits.md.
   */
  readonly planQuotas: PlanQuotasByPlan
  /** Rechunks of one document: RECHUNK_BURST at once, then one per RECHUNK_INTERVAL (429 with Retry-After beyond). */
  readonly rechunkBurst: number
  readonly rechunkInterval: Duration.Duration
  /**
   * Login and register throttling per AUTH_THROTTLE_WINDOW (docs/security.md): attempts per client address;
   * failures per (address, e-mail) pair (AUTH_ATTEMPTS_PER_ACCOUNT, name kept from when it counted per e-mail);
   * failed logins per e-mail from all addresses, past which a wrong password gets 429 and the right one still logs in.
   */
  readonly authAttemptsPerAddress: number
  readonly authAttemptsPerAccount: number
  readonly authFailuresPerAccount: number
  readonly authThrottleWindow: Duration.Duration
  /**
   * Reverse proxies in front of the service that append to X-Forwarded-For;
   * 0: the header is ignored and the client is the socket's peer.
   */
  readonly trustedProxyHops: number
  /** Password hashes (scrypt, 32 MiB each) computed at once, and how many may wait; beyond, 503. */
  readonly passwordHashConcurrency: number
  readonly passwordHashQueue: number
  /** Signing secret of the Stripe webhook endpoint; without it the webhook answers 503. */
  readonly stripeWebhookSecret: Option.Option<Redacted.Redacted<string>>
  /** Stripe price ids that map to plans. */
  readonly stripePricePro: Option.Option<string>
  readonly stripePriceBusiness: Option.Option<string>
  /**
   * Multi-node mode: the host:port other nodes reach this node's cluster runner
   * at. Absent: one node, entities and workflows run in this process only.
   */
  readonly runnerAddress: Option.Option<RunnerEndpoint>
  /** Bind address of the runner socket; defaults to RUNNER_ADDRESS. */
  readonly runnerListen: Option.Option<RunnerEndpoint>
  /**
   * What nodes prove to each other on the runner port: a shared secret
   * (RUNNER_SECRET) or certificates of the cluster's CA (RUNNER_TLS_*).
   * Required with several nodes.
   */
  readonly runnerCredential: Option.Option<RunnerCredential>
  /**
   * How long a dead node's shards stay locked before the others take them
   * over. Unset: 6 s with several nodes, 30 s for a single node (nothing else
   * takes its shards over, and a longer lease leaves its refresh more room
   * under load).
   */
  readonly shardLockExpiration: Option.Option<Duration.Duration>
  /** Bound on handing a message to the cluster (start an execution, forget, cancel); past it, 503. */
  readonly clusterCallTimeout: Duration.Duration
  /**
   * Which storage of effect cluster's tables the cluster runs on: `auto`,
   * ours when the installed effect is the one it was verified with, else
   * effect's own; `effect`, effect's own always (Runtime/ClusterStorage.ts).
   */
  readonly clusterStorage: "auto" | "effect"
  /** Event streams (executions, team runs, streamed chats) one tenant may hold open at once across the cluster; past it, 429. */
  readonly maxEventStreamsPerTenant: number
  /** How long an open stream's place stays taken without its node renewing it: a dead node's places come back after this. */
  readonly eventStreamSlotLease: Duration.Duration
  /** How often a stream reads its run's events when no notification came (a lost notification only delays this long). */
  readonly eventStreamFallbackPoll: Duration.Duration
  /** Longest an execution's event stream stays open (it also ends at the execution's own timeout). */
  readonly eventStreamMaxDuration: Duration.Duration
  /** How long the cluster's stored messages of a finished execution's workflow are kept. */
  readonly executionMessagesRetention: Duration.Duration
  /** The most bytes one knowledge upload request may carry (413 beyond). */
  readonly maxUploadBytes: number
  /** The most files one multipart upload may carry. */
  readonly maxUploadFiles: number
  /** The most PDF pages read of one document. */
  readonly maxUploadPages: number
  /** The most characters of text one document may hold once extracted. */
  readonly maxDocumentChars: number
  /** Bound on extracting one document's text: its sandbox process is killed at it. */
  readonly extractionTimeout: Duration.Duration
  /** Resident memory (heap and buffers) one extraction's process may use, in MB; killed beyond (too_large). */
  readonly extractionMemoryMb: number
  /** Documents extracted at once on one node (each in a process of its own). */
  readonly extractionConcurrency: number
  /**
   * Documents of one tenant extracted at once across the cluster, by plan
   * (FREE_/PRO_/BUSINESS_EXTRACTION_CONCURRENCY); the others wait, still
   * processing, and say so (`waiting`).
   */
  readonly freeExtractionConcurrency: number
  readonly proExtractionConcurrency: number
  readonly businessExtractionConcurrency: number
  /** Extraction attempts a document may start whose process stopped before they finished; the next one fails it unread. */
  readonly extractionMaxAttempts: number
  /** Bounds on a DOCX's zip entries, read from its directory before it is opened: declared size and compression ratio. */
  readonly extractionZipMaxEntryBytes: number
  readonly extractionZipMaxRatio: number
  /** How long an upload of one file waits for its ingestion before answering 202 (zero: at once). */
  readonly uploadReadyWait: Duration.Duration
  /** A document still processing this long after its upload is failed by the sweep. */
  readonly ingestionTimeout: Duration.Duration
  /** How long the cluster's stored messages of a finished ingestion are kept. */
  readonly ingestionMessagesRetention: Duration.Duration
  /** How many chunks grounding gives the model (chat, orchestration steps, team turns of agents with knowledge). */
  readonly knowledgeTopK: number
  /** How long a tenant's word statistics, which decide the words a search selects candidates by, are kept before being read again. */
  readonly knowledgeSearchStatsTtl: Duration.Duration
  /** Bound on the closing turn of a team run that reached a limit (it may run past the run's timeout by this much). */
  readonly teamClosingTurnTimeout: Duration.Duration
  /** How long the cluster's stored messages of a finished team run's workflow are kept. */
  readonly teamRunMessagesRetention: Duration.Duration
  /**
   * Executions and team runs one tenant of each plan may have running at once,
   * across the cluster (FREE_MAX_RUNNING_RUNS...; 0: no cap). Beyond, runs wait
   * in order, or a request with `Prefer: wait=0` is refused with 429.
   */
  readonly freeMaxRunningRuns: number
  readonly proMaxRunningRuns: number
  readonly businessMaxRunningRuns: number
  /**
   * The most a team of each plan may set as its `maxTurns`, `tokenBudget` and
   * `timeoutMs` (FREE_TEAM_MAX_TURNS, PRO_TEAM_TOKEN_BUDGET, BUSINESS_TEAM_TIMEOUT...):
   * more is refused at create and update, and runs of teams set before are held to them.
   */
  readonly teamLimits: { readonly free: TeamLimits; readonly pro: TeamLimits; readonly business: TeamLimits }
  /** OTLP/HTTP endpoint for traces (e.g. http://collector:4318); absent: nothing is exported. */
  readonly otelEndpoint: Option.Option<string>
  readonly otelServiceName: string
  /** Serves GET /metrics in the Prometheus text format. */
  readonly metricsEnabled: boolean
  /** Builds (when its sources changed) and serves the dashboard at /app. */
  readonly dashboardEnabled: boolean
  /** Runs a full collection that gives memory back to the OS when the node goes quiet after a burst (Runtime/MemoryReducer.ts). */
  readonly memoryReducer: boolean
  /**
   * When set, GET /metrics needs `Authorization: Bearer <token>`; unset, it
   * answers only loopback requests that no proxy forwarded (403 otherwise).
   */
  readonly metricsToken: Option.Option<Redacted.Redacted<string>>
  /**
   * Models named in metric labels; any other model counts as `<provider>/other`,
   * so tenants' model names cannot grow the label set.
   */
  readonly metricsModels: ReadonlyArray<string>
  /**
   * Origins (`scheme://host[:port]`) from which cookie-authenticated writes are
   * accepted. Empty: only the request's own origin.
   */
  readonly allowedOrigins: ReadonlyArray<string>
  /**
   * The service's public base URL (`https://agents.example.com`), where
   * browsers reach it: MCP OAuth's redirect URI is built on it. Unset: the
   * origin the request to start the connection was sent to.
   */
  readonly publicUrl: Option.Option<string>
  /** Least severe log level written: Trace, Debug, Info, Warn, Error, Fatal or None. */
  readonly logLevel: LogLevel.LogLevel
  /** Outbound webhooks may target private, loopback and IPv6 link-local addresses (never 169.254/16 or fd00:ec2::/32). */
  readonly webhookAllowPrivate: boolean
  /** Ports a webhook URL may name on a public address (private targets, when allowed, may use any). */
  readonly webhookAllowedPorts: ReadonlyArray<number>
  /** Webhook host lookups in flight at once on a node; more wait, within the lookup's 5 s bound. */
  readonly webhookDnsConcurrency: number
  /** Waits between a webhook's delivery attempts; one more attempt than waits. */
  readonly webhookRetrySchedule: ReadonlyArray<Duration.Duration>
  /** Bound on one delivery attempt (connect, send, answer). */
  readonly webhookTimeout: Duration.Duration
  /** An endpoint whose every attempt failed for this long is disabled. */
  readonly webhookDisableAfter: Duration.Duration
  /** How long the previous signing secret still signs after a rotation. */
  readonly webhookRotationOverlap: Duration.Duration
  /** How long the cluster's stored messages of a finished webhook delivery are kept. */
  readonly webhookMessagesRetention: Duration.Duration
  /** Redeliveries of one event at most (a further one is a 409 problem). */
  readonly webhookMaxRedeliveries: number
  /** Redeliveries per tenant in WEBHOOK_REDELIVERY_WINDOW (a leaky bucket in Postgres; beyond: 429 with Retry-After). */
  readonly webhookRedeliveriesPerTenant: number
  readonly webhookRedeliveryWindow: Duration.Duration
  /** Key (base64 of 32 bytes) that encrypts webhook signing secrets at rest; absent: a key file under .data. */
  readonly webhookSecretKey: Option.Option<Redacted.Redacted<string>>
  /**
   * Key (base64 of 32 bytes) that encrypts the tenants' secrets at rest;
   * absent: the webhook key (WEBHOOK_SECRET_KEY or its key file), so several
   * nodes share it as they must share that one.
   */
  readonly secretsKey: Option.Option<Redacted.Redacted<string>>
  /**
   * A JSON file of the MCP servers this node may start as local processes
   * (stdio), which tenants' `mcp` tools name (src/Tools/McpStdio.ts); absent: none.
   */
  readonly mcpStdioServersFile: Option.Option<string>
  /** The version of the secrets key: stored with each value, so that a changed key still opens older ones. */
  readonly secretsKeyVersion: number
  /** Earlier secrets keys by version, which still open values sealed under them until they are re-sealed. */
  readonly secretsPreviousKeys: ReadonlyArray<SecretsKey>
}

/** A secrets key of an earlier version (SECRETS_PREVIOUS_KEYS). */
export interface SecretsKey {
  readonly version: number
  readonly key: Redacted.Redacted<string>
}

/** The quotas of one plan: the most a tenant may keep of each; null: unlimited. */
export interface PlanQuotas {
  readonly knowledgeBases: number | null
  readonly documents: number | null
  /** Bytes of every document uploaded, as uploaded, whatever its status. */
  readonly storedBytes: number | null
  /** Chunks of the tenant's ready documents. */
  readonly chunks: number | null
  readonly agents: number | null
  readonly orchestrations: number | null
  readonly teams: number | null
  /** API keys neither revoked nor expired. */
  readonly apiKeys: number | null
  /** Webhook URLs set (a team's room or an orchestration each). */
  readonly webhookEndpoints: number | null
  /** Secrets of the vault. */
  readonly secrets: number | null
  /** Tool definitions. */
  readonly tools: number | null
}

export interface PlanQuotasByPlan {
  readonly free: PlanQuotas
  readonly pro: PlanQuotas
  readonly business: PlanQuotas
}

/** Each quota's environment variable, after the plan's prefix (FREE_, PRO_, BUSINESS_). */
export const quotaVariables: { readonly [K in keyof PlanQuotas]: string } = {
  knowledgeBases: "MAX_KNOWLEDGE_BASES",
  documents: "MAX_DOCUMENTS",
  storedBytes: "MAX_STORED_BYTES",
  chunks: "MAX_CHUNKS",
  agents: "MAX_AGENTS",
  orchestrations: "MAX_ORCHESTRATIONS",
  teams: "MAX_TEAMS",
  apiKeys: "MAX_API_KEYS",
  webhookEndpoints: "MAX_WEBHOOK_ENDPOINTS",
  secrets: "MAX_SECRETS",
  tools: "MAX_TOOLS"
}

/** The defaults of docs/limits.md. */
export const defaultPlanQuotas: PlanQuotasByPlan = {
  free: {
    knowledgeBases: 10,
    documents: 200,
    storedBytes: 100 * 1024 * 1024,
    chunks: 50_000,
    agents: 50,
    orchestrations: 50,
    teams: 20,
    apiKeys: 10,
    webhookEndpoints: 20,
    secrets: 100,
    tools: 50
  },
  pro: {
    knowledgeBases: 100,
    documents: 10_000,
    storedBytes: 10 * 1024 * 1024 * 1024,
    chunks: 2_000_000,
    agents: 1_000,
    orchestrations: 1_000,
    teams: 500,
    apiKeys: 100,
    webhookEndpoints: 1_000,
    secrets: 1_000,
    tools: 1_000
  },
  // Unlimited definitions; storage stays bounded, since every tenant shares the database.
  business: {
    knowledgeBases: null,
    documents: 1_000_000,
    storedBytes: 100 * 1024 * 1024 * 1024,
    chunks: 50_000_000,
    agents: null,
    orchestrations: null,
    teams: null,
    apiKeys: null,
    webhookEndpoints: null,
    secrets: null,
    tools: null
  }
}

/** The most a team of one plan may set (see `teamLimits`). */
export interface TeamLimits {
  readonly maxTurns: number
  readonly tokenBudget: number
  readonly timeoutMs: number
}

export type RunnerCredential =
  | { readonly _tag: "Secret"; readonly key: Redacted.Redacted<string> }
  | { readonly _tag: "Certificates"; readonly certFile: string; readonly keyFile: string; readonly caFile: string }

export interface RunnerEndpoint {
  readonly host: string
  readonly port: number
}

// host:port, the host a name, an IPv4 address or a bracketed IPv6 address.
const hostPort = (name: string) =>
  Config.schema(
    Schema.String.check(Schema.isPattern(/^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):([1-9]\d{0,4})$/)),
    name
  ).pipe(
    Config.map((value): RunnerEndpoint => {
      const cut = value.lastIndexOf(":")
      return { host: value.slice(0, cut).replace(/^\[(.*)\]$/, "$1"), port: Number(value.slice(cut + 1)) }
    })
  )

/** A comma-separated list; blanks are dropped. */
const commaList = (name: string, fallback: ReadonlyArray<string>) =>
  Config.String(name).pipe(
    Config.map(
      (value): ReadonlyArray<string> =>
        value
          .split(",")
          .map((item) => item.trim())
          .filter((item) => item !== "")
    ),
    Config.withDefault(fallback)
  )

/** Well-known models labelled by name in /metrics unless METRICS_MODELS says otherwise. */
export const defaultMetricsModels: ReadonlyArray<string> = [
  "local",
  ...[
    "gpt-4o",
    "gpt-4o-mini",
    "gpt-4.1",
    "gpt-4.1-mini",
    "gpt-4.1-nano",
    "gpt-5",
    "gpt-5-mini",
    "gpt-5-nano",
    "o3",
    "o3-mini",
    "o4-mini"
  ].map((name) => `openai/${name}`),
  ...[
    "claude-opus-4-1",
    "claude-opus-4-0",
    "claude-sonnet-4-5",
    "claude-sonnet-4-0",
    "claude-haiku-4-5",
    "claude-3-7-sonnet-latest",
    "claude-3-5-haiku-latest"
  ].map((name) => `anthropic/${name}`)
]

// A comma-separated list of model ids or `prefix*` patterns; unset or blank: every model.
const modelList = (name: string) =>
  Config.option(Config.String(name)).pipe(
    Config.map(
      Option.flatMap((value) => {
        const entries = value
          .split(",")
          .map((entry) => entry.trim())
          .filter((entry) => entry !== "")
        return entries.length === 0 ? Option.none() : Option.some(entries)
      })
    )
  )

/**
 * A setting that names one of `choices` (keyed in lower case), read in any
 * case and without surrounding spaces: `LOG_LEVEL=warn` means `Warn`. Anything
 * else stops the start with a message naming the variable, its value and the
 * accepted values, rather than a bare schema mismatch.
 */
const oneOf = <A>(name: string, choices: Readonly<Record<string, A>>, shown: ReadonlyArray<string>) => {
  const pick = (raw: string): A | undefined => {
    const key = raw.trim().toLowerCase()
    return Object.hasOwn(choices, key) ? choices[key] : undefined
  }
  return Config.schema(
    Schema.String.check(
      Schema.makeFilter(
        (raw: string) =>
          pick(raw) !== undefined || `Expected one of ${shown.join(", ")} (in any case), got ${JSON.stringify(raw)}`
      )
    ),
    name
  ).pipe(Config.map((raw) => pick(raw)!))
}

// `100ms`, `5s`, `5m`, `2h`, `1d`, or effect's own `5 seconds`.
const durationPattern = /^(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|millis?|seconds?|minutes?|hours?|days?)$/i
const durationUnits: Record<string, number> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 }
const parseDuration = (raw: string): Duration.Duration | undefined => {
  const match = durationPattern.exec(raw.trim())
  if (match === null) return undefined
  const unit = match[2]!.toLowerCase()
  const factor = durationUnits[unit] ?? durationUnits[unit.startsWith("milli") ? "ms" : unit[0]!]!
  return Duration.millis(Number(match[1]) * factor)
}

/**
 * A comma-separated list whose every entry `parse` reads; an entry it cannot
 * stops the start with `expected` and the bad entry.
 */
const parsedList = <A>(name: string, fallback: string, parse: (entry: string) => A | undefined, expected: string) =>
  Config.schema(
    Schema.String.check(
      Schema.makeFilter((raw: string) => {
        const bad = raw
          .split(",")
          .map((entry) => entry.trim())
          .find((entry) => parse(entry) === undefined)
        return bad === undefined || `${expected}, got ${JSON.stringify(bad)}`
      })
    ),
    name
  ).pipe(
    Config.withDefault(fallback),
    Config.map((raw) => raw.split(",").map((entry) => parse(entry.trim())!))
  )

/** A comma-separated list of durations (`5s,5m,30m`). */
const durationList = (name: string, fallback: string) =>
  parsedList(name, fallback, parseDuration, "Expected comma-separated durations such as 5s,5m,30m,2h (ms, s, m, h, d)")

/** A comma-separated list of TCP ports (`80,443`). */
const portList = (name: string, fallback: string) =>
  parsedList(
    name,
    fallback,
    (entry) => (/^[1-9]\d{0,4}$/.test(entry) && Number(entry) <= 65_535 ? Number(entry) : undefined),
    "Expected comma-separated ports (1 to 65535) such as 80,443"
  )

/** A whole number from `minimum` to `maximum`; anything else stops the start. */
const intBetween = (name: string, minimum: number, maximum: number) =>
  Config.schema(Schema.Int.check(Schema.isBetween({ minimum, maximum })), name)

/** A quota: a whole number of at least 0, or `unlimited` (null). */
const quotaSetting = (name: string, fallback: number | null) =>
  Config.schema(
    Schema.String.check(
      Schema.makeFilter(
        (raw: string) =>
          /^\s*(\d+|unlimited)\s*$/i.test(raw) || `Expected a whole number or \`unlimited\`, got ${JSON.stringify(raw)}`
      )
    ),
    name
  ).pipe(
    Config.map((raw): number | null => (/unlimited/i.test(raw) ? null : Number(raw.trim()))),
    Config.withDefault(fallback)
  )

const planQuotas = (prefix: string, defaults: PlanQuotas): Config.Config<PlanQuotas> =>
  Config.all(
    Object.fromEntries(
      (Object.keys(quotaVariables) as Array<keyof PlanQuotas>).map((key) => [
        key,
        quotaSetting(`${prefix}_${quotaVariables[key]}`, defaults[key])
      ])
    ) as { readonly [K in keyof PlanQuotas]: Config.Config<number | null> }
  )

/** A key of 32 bytes in base64; anything else stops the start. */
const base64Key = (name: string) =>
  Config.schema(
    Schema.Redacted(
      Schema.String.check(
        Schema.makeFilter(
          (raw: string) =>
            Buffer.from(raw.trim(), "base64").length === 32 ||
            "Expected the base64 encoding of 32 bytes (openssl rand -base64 32)"
        )
      )
    ),
    name
  )

// `version:key` entries of SECRETS_PREVIOUS_KEYS; undefined for an entry that is not one.
const secretsKeyEntries = (raw: string) =>
  raw
    .split(",")
    .filter((entry) => entry.trim() !== "")
    .map((entry) => {
      const [version, key, extra] = entry.split(":").map((part) => part.trim())
      return version !== undefined &&
        /^[1-9]\d{0,5}$/.test(version) &&
        key !== undefined &&
        extra === undefined &&
        Buffer.from(key, "base64").length === 32
        ? { version: Number(version), key }
        : undefined
    })

/**
 * `version:key,...`, each key the base64 of 32 bytes: the keys of earlier
 * versions. A bad entry stops the start; the message shows no key.
 */
const previousSecretsKeys = Config.option(
  Config.schema(
    Schema.Redacted(
      Schema.String.check(
        Schema.makeFilter((raw: string) => {
          const entries = secretsKeyEntries(raw)
          const bad = entries.indexOf(undefined)
          if (bad !== -1)
            return (
              "Expected comma-separated version:key entries (a version from 1 to 999999, a key the base64 of " +
              `32 bytes); entry ${bad + 1} is not one`
            )
          const versions = entries.map((entry) => entry!.version)
          const twice = versions.find((version, i) => versions.indexOf(version) !== i)
          return twice === undefined || `Expected each version once; ${twice} is given twice`
        })
      )
    ),
    "SECRETS_PREVIOUS_KEYS"
  )
).pipe(
  Config.map(
    (keys): ReadonlyArray<SecretsKey> =>
      Option.isNone(keys)
        ? []
        : secretsKeyEntries(Redacted.value(keys.value)).map((entry) => ({
            version: entry!.version,
            key: Redacted.make(entry!.key)
          }))
  )
)

const flag = (name: string) =>
  oneOf(
    name,
    { true: true, yes: true, on: true, "1": true, y: true, false: false, no: false, off: false, "0": false, n: false },
    ["true", "false", "yes", "no", "on", "off", "1", "0"]
  )

const logLevels = ["Trace", "Debug", "Info", "Warn", "Error", "Fatal", "None", "All"] as const
const logLevel = oneOf(
  "LOG_LEVEL",
  Object.fromEntries(logLevels.map((level) => [level.toLowerCase(), level])) as Record<
    string,
    (typeof logLevels)[number]
  >,
  logLevels
)

// `local`, `openai/<model>` or `anthropic/<model>`: the provider is read in any
// case, the model name as given (providers' names are case-sensitive).
const defaultModel = Config.schema(
  Schema.String.check(
    Schema.isPattern(/^\s*(local|(openai|anthropic)\/[^\s/][^\s]*)\s*$/i, {
      message: "Expected `local`, `openai/<model>` or `anthropic/<model>`"
    })
  ),
  "DEFAULT_MODEL"
).pipe(
  Config.map((raw) => {
    const value = raw.trim()
    const slash = value.indexOf("/")
    return slash === -1 ? value.toLowerCase() : value.slice(0, slash).toLowerCase() + value.slice(slash)
  })
)

// A plan's team limits: <PLAN>_TEAM_MAX_TURNS, <PLAN>_TEAM_TOKEN_BUDGET, <PLAN>_TEAM_TIMEOUT.
const teamLimits = (plan: string, fallback: TeamLimits): Config.Config<TeamLimits> =>
  Config.all({
    maxTurns: Config.Int(`${plan}_TEAM_MAX_TURNS`).pipe(Config.withDefault(fallback.maxTurns)),
    tokenBudget: Config.Int(`${plan}_TEAM_TOKEN_BUDGET`).pipe(Config.withDefault(fallback.tokenBudget)),
    timeoutMs: Config.Duration(`${plan}_TEAM_TIMEOUT`).pipe(
      Config.map(Duration.toMillis),
      Config.withDefault(fallback.timeoutMs)
    )
  })

export const settingsConfig: Config.Config<AppSettings> = Config.all({
  port: Config.Port("PORT").pipe(Config.withDefault(3000)),
  host: Config.String("HOST").pipe(Config.withDefault("0.0.0.0")),
  databaseUrl: Config.option(Config.Redacted("DATABASE_URL")),
  embeddedPostgresDataDir: Config.option(
    Config.String("EMBEDDED_POSTGRES_DATA_DIR").pipe(Config.map((dir) => NodePath.resolve(dir)))
  ),
  embeddedPostgresPort: Config.option(Config.Port("EMBEDDED_POSTGRES_PORT")),
  embeddedPostgresUser: Config.String("EMBEDDED_POSTGRES_USER").pipe(Config.withDefault("postgres")),
  databasePoolSize: Config.Int("DATABASE_POOL_SIZE").pipe(Config.withDefault(10)),
  databaseStatementTimeout: Config.Duration("DATABASE_STATEMENT_TIMEOUT").pipe(
    Config.withDefault(Duration.seconds(30))
  ),
  databaseConnectTimeout: Config.Duration("DATABASE_CONNECT_TIMEOUT").pipe(Config.withDefault(Duration.seconds(5))),
  maxBodyBytes: Config.Int("MAX_BODY_BYTES").pipe(Config.withDefault(1024 * 1024)),
  sessionTtl: Config.Duration("SESSION_TTL").pipe(Config.withDefault(Duration.days(7))),
  cookieSecure: Config.option(flag("COOKIE_SECURE")).pipe(Config.map(Option.getOrUndefined)),
  apiKeyCacheTtl: Config.Duration("API_KEY_CACHE_TTL").pipe(Config.withDefault(Duration.seconds(60))),
  sessionCacheTtl: Config.Duration("SESSION_CACHE_TTL").pipe(Config.withDefault(Duration.seconds(60))),
  rejectedCredentialsCacheTtl: Config.Duration("REJECTED_CREDENTIALS_CACHE_TTL").pipe(
    Config.withDefault(Duration.seconds(30))
  ),
  rejectedCredentialsCacheSize: intBetween("REJECTED_CREDENTIALS_CACHE_SIZE", 0, 10_000_000).pipe(
    Config.withDefault(10_000)
  ),
  credentialFailuresPerAddress: Config.schema(
    Schema.Int.check(Schema.isGreaterThanOrEqualTo(1)),
    "CREDENTIAL_FAILURES_PER_ADDRESS"
  ).pipe(Config.withDefault(60)),
  credentialFailuresWindow: Config.Duration("CREDENTIAL_FAILURES_WINDOW").pipe(Config.withDefault(Duration.minutes(1))),
  apiKeyLastUsedFlush: Config.Duration("API_KEY_LAST_USED_FLUSH").pipe(Config.withDefault(Duration.seconds(30))),
  defaultModel: defaultModel.pipe(Config.withDefault("local")),
  shutdownGrace: Config.Duration("SHUTDOWN_GRACE").pipe(Config.withDefault(Duration.seconds(20))),
  maxMessageChars: Config.Int("MAX_MESSAGE_CHARS").pipe(Config.withDefault(32_000)),
  // Unset: 4 x MAX_MESSAGE_CHARS (filled in below), room for four inputs' worth of text.
  maxPromptChars: Config.option(Config.Int("MAX_PROMPT_CHARS")),
  maxSteps: Config.Int("MAX_STEPS").pipe(Config.withDefault(50)),
  maxVariables: Config.Int("MAX_VARIABLES").pipe(Config.withDefault(100)),
  maxVariableNameChars: Config.Int("MAX_VARIABLE_NAME_CHARS").pipe(Config.withDefault(64)),
  maxVariableChars: Config.Int("MAX_VARIABLE_CHARS").pipe(Config.withDefault(8_000)),
  openaiBaseUrl: Config.String("OPENAI_BASE_URL").pipe(Config.withDefault("https://api.openai.com/v1")),
  openaiApiKey: Config.option(Config.Redacted("OPENAI_API_KEY")),
  anthropicBaseUrl: Config.String("ANTHROPIC_BASE_URL").pipe(Config.withDefault("https://api.anthropic.com")),
  anthropicApiKey: Config.option(Config.Redacted("ANTHROPIC_API_KEY")),
  modelTimeout: Config.Duration("MODEL_TIMEOUT").pipe(Config.withDefault(Duration.seconds(60))),
  modelMaxRetries: Config.Int("MODEL_MAX_RETRIES").pipe(Config.withDefault(3)),
  modelContextTokens: Config.Int("MODEL_CONTEXT_TOKENS").pipe(Config.withDefault(16_000)),
  enforceDailyLimits: flag("ENFORCE_DAILY_LIMITS").pipe(Config.withDefault(true)),
  freeDailyLimit: Config.Int("FREE_DAILY_LIMIT").pipe(Config.withDefault(100)),
  proDailyLimit: Config.Int("PRO_DAILY_LIMIT").pipe(Config.withDefault(10_000)),
  freeDailyTokens: Config.Int("FREE_DAILY_TOKENS").pipe(Config.withDefault(100_000)),
  proDailyTokens: Config.Int("PRO_DAILY_TOKENS").pipe(Config.withDefault(5_000_000)),
  freeMaxOutputTokens: Config.Int("FREE_MAX_OUTPUT_TOKENS").pipe(Config.withDefault(1024)),
  proMaxOutputTokens: Config.Int("PRO_MAX_OUTPUT_TOKENS").pipe(Config.withDefault(4096)),
  businessMaxOutputTokens: Config.Int("BUSINESS_MAX_OUTPUT_TOKENS").pipe(Config.withDefault(4096)),
  freeModels: modelList("FREE_MODELS"),
  proModels: modelList("PRO_MODELS"),
  businessModels: modelList("BUSINESS_MODELS"),
  planQuotas: Config.all({
    free: planQuotas("FREE", defaultPlanQuotas.free),
    pro: planQuotas("PRO", defaultPlanQuotas.pro),
    business: planQuotas("BUSINESS", defaultPlanQuotas.business)
  }),
  rechunkBurst: Config.Int("RECHUNK_BURST").pipe(Config.withDefault(5)),
  rechunkInterval: Config.Duration("RECHUNK_INTERVAL").pipe(Config.withDefault(Duration.minutes(1))),
  authAttemptsPerAddress: Config.Int("AUTH_ATTEMPTS_PER_ADDRESS").pipe(Config.withDefault(100)),
  authAttemptsPerAccount: Config.Int("AUTH_ATTEMPTS_PER_ACCOUNT").pipe(Config.withDefault(10)),
  authFailuresPerAccount: Config.Int("AUTH_FAILURES_PER_ACCOUNT").pipe(Config.withDefault(100)),
  authThrottleWindow: Config.Duration("AUTH_THROTTLE_WINDOW").pipe(Config.withDefault(Duration.minutes(10))),
  trustedProxyHops: Config.Int("TRUSTED_PROXY_HOPS").pipe(Config.withDefault(0)),
  passwordHashConcurrency: Config.Int("PASSWORD_HASH_CONCURRENCY").pipe(Config.withDefault(2)),
  passwordHashQueue: Config.Int("PASSWORD_HASH_QUEUE").pipe(Config.withDefault(32)),
  stripeWebhookSecret: Config.option(Config.Redacted("STRIPE_WEBHOOK_SECRET")),
  stripePricePro: Config.option(Config.String("STRIPE_PRICE_PRO")),
  stripePriceBusiness: Config.option(Config.String("STRIPE_PRICE_BUSINESS")),
  runnerAddress: Config.option(hostPort("RUNNER_ADDRESS")),
  runnerListen: Config.option(hostPort("RUNNER_LISTEN")),
  runnerSecret: Config.option(base64Key("RUNNER_SECRET")),
  runnerTlsCert: Config.option(Config.String("RUNNER_TLS_CERT_FILE")),
  runnerTlsKey: Config.option(Config.String("RUNNER_TLS_KEY_FILE")),
  runnerTlsCa: Config.option(Config.String("RUNNER_TLS_CA_FILE")),
  // A dead node's shards move once its lock is this old, plus about a second.
  shardLockExpiration: Config.option(Config.Duration("SHARD_LOCK_EXPIRATION")),
  clusterCallTimeout: Config.Duration("CLUSTER_CALL_TIMEOUT").pipe(Config.withDefault(Duration.seconds(10))),
  clusterStorage: Config.schema(Schema.Literals(["auto", "effect"]), "CLUSTER_STORAGE").pipe(
    Config.withDefault("auto" as const)
  ),
  maxEventStreamsPerTenant: Config.Int("MAX_EVENT_STREAMS_PER_TENANT").pipe(Config.withDefault(10)),
  eventStreamSlotLease: Config.Duration("EVENT_STREAM_SLOT_LEASE").pipe(Config.withDefault(Duration.seconds(30))),
  eventStreamFallbackPoll: Config.Duration("EVENT_STREAM_FALLBACK_POLL").pipe(Config.withDefault(Duration.seconds(3))),
  eventStreamMaxDuration: Config.Duration("EVENT_STREAM_MAX_DURATION").pipe(Config.withDefault(Duration.minutes(10))),
  executionMessagesRetention: Config.Duration("EXECUTION_MESSAGES_RETENTION").pipe(
    Config.withDefault(Duration.hours(1))
  ),
  maxUploadBytes: Config.Int("MAX_UPLOAD_BYTES").pipe(Config.withDefault(25 * 1024 * 1024)),
  maxUploadFiles: Config.Int("MAX_UPLOAD_FILES").pipe(Config.withDefault(20)),
  maxUploadPages: Config.Int("MAX_UPLOAD_PAGES").pipe(Config.withDefault(2_000)),
  maxDocumentChars: Config.Int("MAX_DOCUMENT_CHARS").pipe(Config.withDefault(5_000_000)),
  extractionTimeout: Config.Duration("EXTRACTION_TIMEOUT").pipe(Config.withDefault(Duration.seconds(60))),
  extractionMemoryMb: intBetween("EXTRACTION_MEMORY_MB", 128, 65_536).pipe(Config.withDefault(512)),
  extractionConcurrency: intBetween("EXTRACTION_CONCURRENCY", 1, 256).pipe(Config.withDefault(2)),
  freeExtractionConcurrency: intBetween("FREE_EXTRACTION_CONCURRENCY", 1, 10_000).pipe(Config.withDefault(2)),
  proExtractionConcurrency: intBetween("PRO_EXTRACTION_CONCURRENCY", 1, 10_000).pipe(Config.withDefault(4)),
  businessExtractionConcurrency: intBetween("BUSINESS_EXTRACTION_CONCURRENCY", 1, 10_000).pipe(Config.withDefault(8)),
  extractionMaxAttempts: intBetween("EXTRACTION_MAX_ATTEMPTS", 1, 100).pipe(Config.withDefault(2)),
  extractionZipMaxEntryBytes: Config.Int("EXTRACTION_ZIP_MAX_ENTRY_BYTES").pipe(Config.withDefault(50 * 1024 * 1024)),
  extractionZipMaxRatio: Config.Int("EXTRACTION_ZIP_MAX_RATIO").pipe(Config.withDefault(100)),
  uploadReadyWait: Config.Duration("UPLOAD_READY_WAIT").pipe(Config.withDefault(Duration.seconds(2))),
  ingestionTimeout: Config.Duration("INGESTION_TIMEOUT").pipe(Config.withDefault(Duration.minutes(10))),
  ingestionMessagesRetention: Config.Duration("INGESTION_MESSAGES_RETENTION").pipe(
    Config.withDefault(Duration.hours(1))
  ),
  knowledgeTopK: intBetween("KNOWLEDGE_TOP_K", 1, 50).pipe(Config.withDefault(5)),
  knowledgeSearchStatsTtl: Config.Duration("KNOWLEDGE_SEARCH_STATS_TTL").pipe(Config.withDefault(Duration.minutes(1))),
  teamClosingTurnTimeout: Config.Duration("TEAM_CLOSING_TURN_TIMEOUT").pipe(Config.withDefault(Duration.seconds(30))),
  teamRunMessagesRetention: Config.Duration("TEAM_RUN_MESSAGES_RETENTION").pipe(Config.withDefault(Duration.hours(1))),
  freeMaxRunningRuns: Config.Int("FREE_MAX_RUNNING_RUNS").pipe(Config.withDefault(5)),
  proMaxRunningRuns: Config.Int("PRO_MAX_RUNNING_RUNS").pipe(Config.withDefault(25)),
  // Business is unlimited as its requests and tokens are; an operator may cap it.
  businessMaxRunningRuns: Config.Int("BUSINESS_MAX_RUNNING_RUNS").pipe(Config.withDefault(0)),
  teamLimits: Config.all({
    free: teamLimits("FREE", { maxTurns: 12, tokenBudget: 200_000, timeoutMs: 600_000 }),
    pro: teamLimits("PRO", { maxTurns: 30, tokenBudget: 2_000_000, timeoutMs: 1_800_000 }),
    business: teamLimits("BUSINESS", { maxTurns: 50, tokenBudget: 10_000_000, timeoutMs: 3_600_000 })
  }),
  otelEndpoint: Config.option(Config.String("OTEL_EXPORTER_OTLP_ENDPOINT")),
  otelServiceName: Config.String("OTEL_SERVICE_NAME").pipe(Config.withDefault("agent-host")),
  metricsEnabled: flag("METRICS_ENABLED").pipe(Config.withDefault(true)),
  dashboardEnabled: flag("DASHBOARD_ENABLED").pipe(Config.withDefault(true)),
  memoryReducer: flag("MEMORY_REDUCER").pipe(Config.withDefault(true)),
  metricsToken: Config.option(Config.Redacted("METRICS_TOKEN")).pipe(
    // An empty token would let anyone in with `Bearer `: treat it as unset.
    Config.map(Option.filter((token) => Redacted.value(token) !== ""))
  ),
  metricsModels: commaList("METRICS_MODELS", defaultMetricsModels),
  allowedOrigins: commaList("ALLOWED_ORIGINS", []).pipe(
    Config.map((origins) => origins.map((origin) => origin.replace(/\/+$/, "").toLowerCase()))
  ),
  publicUrl: Config.option(Config.String("PUBLIC_URL")).pipe(
    Config.map(Option.map((url) => url.trim().replace(/\/+$/, ""))),
    Config.map(Option.filter((url) => url !== ""))
  ),
  logLevel: logLevel.pipe(Config.withDefault("Info" as const)),
  webhookAllowPrivate: flag("WEBHOOK_ALLOW_PRIVATE").pipe(Config.withDefault(false)),
  webhookAllowedPorts: portList("WEBHOOK_ALLOWED_PORTS", "80,443,8080,8443"),
  webhookDnsConcurrency: intBetween("WEBHOOK_DNS_CONCURRENCY", 1, 1_000).pipe(Config.withDefault(16)),
  webhookRetrySchedule: durationList("WEBHOOK_RETRY_SCHEDULE", "5s,5m,30m,2h,5h,10h,10h"),
  webhookTimeout: Config.Duration("WEBHOOK_TIMEOUT").pipe(Config.withDefault(Duration.seconds(15))),
  webhookDisableAfter: Config.Duration("WEBHOOK_DISABLE_AFTER").pipe(Config.withDefault(Duration.days(5))),
  webhookRotationOverlap: Config.Duration("WEBHOOK_ROTATION_OVERLAP").pipe(Config.withDefault(Duration.hours(24))),
  webhookMessagesRetention: Config.Duration("WEBHOOK_MESSAGES_RETENTION").pipe(Config.withDefault(Duration.hours(1))),
  webhookMaxRedeliveries: intBetween("WEBHOOK_MAX_REDELIVERIES", 0, 1_000).pipe(Config.withDefault(10)),
  webhookRedeliveriesPerTenant: intBetween("WEBHOOK_REDELIVERIES_PER_TENANT", 1, 100_000).pipe(Config.withDefault(30)),
  webhookRedeliveryWindow: Config.Duration("WEBHOOK_REDELIVERY_WINDOW").pipe(Config.withDefault(Duration.minutes(10))),
  webhookSecretKey: Config.option(base64Key("WEBHOOK_SECRET_KEY")),
  secretsKey: Config.option(base64Key("SECRETS_KEY")),
  mcpStdioServersFile: Config.option(
    Config.String("MCP_STDIO_SERVERS_FILE").pipe(Config.map((file) => NodePath.resolve(file)))
  ),
  secretsKeyVersion: intBetween("SECRETS_KEY_VERSION", 1, 999_999).pipe(Config.withDefault(1)),
  secretsPreviousKeys: previousSecretsKeys
}).pipe(
  Config.mapEffect(({ runnerSecret, runnerTlsCa, runnerTlsCert, runnerTlsKey, ...settings }) => {
    const files = [runnerTlsCert, runnerTlsKey, runnerTlsCa].filter(Option.isSome).length
    const refuse = (message: string) => Effect.fail(new Config.ConfigError(new SourceError({ message })))
    if (files !== 0 && files !== 3) {
      return refuse(
        "RUNNER_TLS_CERT_FILE, RUNNER_TLS_KEY_FILE and RUNNER_TLS_CA_FILE go together: set all three or none"
      )
    }
    if (files === 3 && Option.isSome(runnerSecret)) {
      return refuse("RUNNER_SECRET and RUNNER_TLS_*_FILE are two ways to authenticate nodes: set one of them")
    }
    const runnerCredential: Option.Option<RunnerCredential> =
      files === 3
        ? Option.some({
            _tag: "Certificates",
            certFile: Option.getOrThrow(runnerTlsCert),
            keyFile: Option.getOrThrow(runnerTlsKey),
            caFile: Option.getOrThrow(runnerTlsCa)
          })
        : Option.map(runnerSecret, (key) => ({ _tag: "Secret", key }))
    if (Option.isSome(settings.runnerAddress) && Option.isNone(runnerCredential)) {
      return refuse(
        "RUNNER_ADDRESS is set (several nodes) but neither RUNNER_SECRET nor RUNNER_TLS_*_FILE is: set RUNNER_SECRET " +
          "to the same key on every node (openssl rand -base64 32), or give each node a certificate of the cluster's CA"
      )
    }
    return Effect.succeed<AppSettings>({
      ...settings,
      runnerCredential,
      maxPromptChars: Option.getOrElse(settings.maxPromptChars, () => 4 * settings.maxMessageChars)
    })
  }),
  // Several nodes each making a key file of their own could not open each other's webhook secrets.
  Config.mapEffect((settings) =>
    Option.isSome(settings.runnerAddress) && Option.isNone(settings.webhookSecretKey)
      ? Effect.fail(
          new Config.ConfigError(
            new SourceError({
              message:
                "RUNNER_ADDRESS is set (several nodes) but WEBHOOK_SECRET_KEY is not: set WEBHOOK_SECRET_KEY " +
                "to the same key on every node (openssl rand -base64 32)"
            })
          )
        )
      : Effect.succeed(settings)
  ),
  // No SECRETS_KEY is no rule of its own: the vault then uses the webhook key, which the rule above requires.
  Config.mapEffect((settings) =>
    settings.secretsPreviousKeys.some((previous) => previous.version === settings.secretsKeyVersion)
      ? Effect.fail(
          new Config.ConfigError(
            new SourceError({
              message:
                `SECRETS_PREVIOUS_KEYS holds a key of version ${settings.secretsKeyVersion}, which is ` +
                "SECRETS_KEY_VERSION: give the current key a new version, or drop that entry"
            })
          )
        )
      : Effect.succeed(settings)
  )
)

export class AppConfig extends Context.Service<AppConfig, AppSettings>()("agent-host/AppConfig") {
  /** Reads the environment once, at start. */
  static readonly layer = Layer.effect(AppConfig, Effect.map(settingsConfig, AppConfig.of))

  /** For tests and embedding: explicit settings over the defaults. */
  static readonly layerWith = (overrides: Partial<AppSettings>) =>
    Layer.effect(
      AppConfig,
      Effect.map(settingsConfig, (settings) => AppConfig.of({ ...settings, ...overrides }))
    )
}
