import * as Config from "effect/Config"
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
 * work offline with nothing installed; the README's configuration table lists
 * each variable.
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
  readonly embeddedPostgresPort: number
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
  /** Adds `Secure` to the session cookie (set it behind HTTPS). */
  readonly cookieSecure: boolean
  /** How long a verified API key is trusted before it is checked again. */
  readonly apiKeyCacheTtl: Duration.Duration
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
   * The models each plan may use: exact ids, or prefixes ending in `*`
   * (`openai/*`). None: every model.
   */
  readonly freeModels: Option.Option<ReadonlyArray<string>>
  readonly proModels: Option.Option<ReadonlyArray<string>>
  readonly businessModels: Option.Option<ReadonlyArray<string>>
  /** Login and register attempts allowed per client address, and per e-mail, in each AUTH_THROTTLE_WINDOW. */
  readonly authAttemptsPerAddress: number
  readonly authAttemptsPerAccount: number
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
   * How long a dead node's shards stay locked before the others take them
   * over. Unset: 6 s with several nodes, 30 s for a single node (nothing else
   * takes its shards over, and a longer lease leaves its refresh more room
   * under load).
   */
  readonly shardLockExpiration: Option.Option<Duration.Duration>
  /** Bound on handing a message to the cluster (start an execution, forget, cancel); past it, 503. */
  readonly clusterCallTimeout: Duration.Duration
  /** Event streams of executions one tenant may hold open on one node; past it, 429. */
  readonly maxEventStreamsPerTenant: number
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
  /** Bound on extracting one document's text. */
  readonly extractionTimeout: Duration.Duration
  /** A document still processing this long after its upload is failed by the sweep. */
  readonly ingestionTimeout: Duration.Duration
  /** How long the cluster's stored messages of a finished ingestion are kept. */
  readonly ingestionMessagesRetention: Duration.Duration
  /** How many chunks grounding gives the model (chat, orchestration steps, team turns of agents with knowledge). */
  readonly knowledgeTopK: number
  /** Bound on the closing turn of a team run that reached a limit (it may run past the run's timeout by this much). */
  readonly teamClosingTurnTimeout: Duration.Duration
  /** How long the cluster's stored messages of a finished team run's workflow are kept. */
  readonly teamRunMessagesRetention: Duration.Duration
  /** OTLP/HTTP endpoint for traces (e.g. http://collector:4318); absent: nothing is exported. */
  readonly otelEndpoint: Option.Option<string>
  readonly otelServiceName: string
  /** Serves GET /metrics in the Prometheus text format. */
  readonly metricsEnabled: boolean
  /** Builds (when its sources changed) and serves the dashboard at /app. */
  readonly dashboardEnabled: boolean
  /** Runs a full collection that gives memory back to the OS when the node goes quiet after a burst (Platform/MemoryReducer.ts). */
  readonly memoryReducer: boolean
  /** When set, GET /metrics needs `Authorization: Bearer <token>`. */
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
  /** Least severe log level written: Trace, Debug, Info, Warn, Error, Fatal or None. */
  readonly logLevel: LogLevel.LogLevel
  /** Outbound webhooks may target private, loopback and link-local addresses (never the cloud metadata ones). */
  readonly webhookAllowPrivate: boolean
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
  /** Key (base64 of 32 bytes) that encrypts webhook signing secrets at rest; absent: a key file under .data. */
  readonly webhookSecretKey: Option.Option<Redacted.Redacted<string>>
}

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
    Config.map((value): ReadonlyArray<string> => value.split(",").map((item) => item.trim()).filter((item) => item !== "")),
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
    Config.map(Option.flatMap((value) => {
      const entries = value.split(",").map((entry) => entry.trim()).filter((entry) => entry !== "")
      return entries.length === 0 ? Option.none() : Option.some(entries)
    }))
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
    Schema.String.check(Schema.makeFilter((raw: string) =>
      pick(raw) !== undefined || `Expected one of ${shown.join(", ")} (in any case), got ${JSON.stringify(raw)}`
    )),
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

/** A comma-separated list of durations (`5s,5m,30m`); anything else stops the start naming the bad entry. */
const durationList = (name: string, fallback: string) =>
  Config.schema(
    Schema.String.check(Schema.makeFilter((raw: string) => {
      const entries = raw.split(",").map((entry) => entry.trim())
      const bad = entries.find((entry) => parseDuration(entry) === undefined)
      return bad === undefined ||
        `Expected comma-separated durations such as 5s,5m,30m,2h (ms, s, m, h, d), got ${JSON.stringify(bad)}`
    })),
    name
  ).pipe(
    Config.withDefault(fallback),
    Config.map((raw) => raw.split(",").map((entry) => parseDuration(entry)!))
  )

/** A key of 32 bytes in base64; anything else stops the start. */
const base64Key = (name: string) =>
  Config.schema(
    Schema.Redacted(Schema.String.check(Schema.makeFilter((raw: string) =>
      Buffer.from(raw.trim(), "base64").length === 32 || "Expected the base64 encoding of 32 bytes (openssl rand -base64 32)"
    ))),
    name
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
  Object.fromEntries(logLevels.map((level) => [level.toLowerCase(), level])) as Record<string, typeof logLevels[number]>,
  logLevels
)

// `local`, `openai/<model>` or `anthropic/<model>`: the provider is read in any
// case, the model name as given (providers' names are case-sensitive).
const defaultModel = Config.schema(
  Schema.String.check(Schema.isPattern(/^\s*(local|(openai|anthropic)\/[^\s/][^\s]*)\s*$/i, {
    message: "Expected `local`, `openai/<model>` or `anthropic/<model>`"
  })),
  "DEFAULT_MODEL"
).pipe(Config.map((raw) => {
  const value = raw.trim()
  const slash = value.indexOf("/")
  return slash === -1 ? value.toLowerCase() : value.slice(0, slash).toLowerCase() + value.slice(slash)
}))

export const settingsConfig: Config.Config<AppSettings> = Config.all({
  port: Config.Port("PORT").pipe(Config.withDefault(3000)),
  host: Config.String("HOST").pipe(Config.withDefault("0.0.0.0")),
  databaseUrl: Config.option(Config.Redacted("DATABASE_URL")),
  embeddedPostgresDataDir: Config.option(
    Config.String("EMBEDDED_POSTGRES_DATA_DIR").pipe(Config.map((dir) => NodePath.resolve(dir)))
  ),
  embeddedPostgresPort: Config.Port("EMBEDDED_POSTGRES_PORT").pipe(Config.withDefault(54329)),
  embeddedPostgresUser: Config.String("EMBEDDED_POSTGRES_USER").pipe(Config.withDefault("postgres")),
  databasePoolSize: Config.Int("DATABASE_POOL_SIZE").pipe(Config.withDefault(10)),
  databaseStatementTimeout: Config.Duration("DATABASE_STATEMENT_TIMEOUT").pipe(
    Config.withDefault(Duration.seconds(30))
  ),
  databaseConnectTimeout: Config.Duration("DATABASE_CONNECT_TIMEOUT").pipe(Config.withDefault(Duration.seconds(5))),
  maxBodyBytes: Config.Int("MAX_BODY_BYTES").pipe(Config.withDefault(1024 * 1024)),
  sessionTtl: Config.Duration("SESSION_TTL").pipe(Config.withDefault(Duration.days(7))),
  cookieSecure: flag("COOKIE_SECURE").pipe(Config.withDefault(false)),
  apiKeyCacheTtl: Config.Duration("API_KEY_CACHE_TTL").pipe(Config.withDefault(Duration.seconds(60))),
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
  freeModels: modelList("FREE_MODELS"),
  proModels: modelList("PRO_MODELS"),
  businessModels: modelList("BUSINESS_MODELS"),
  authAttemptsPerAddress: Config.Int("AUTH_ATTEMPTS_PER_ADDRESS").pipe(Config.withDefault(100)),
  authAttemptsPerAccount: Config.Int("AUTH_ATTEMPTS_PER_ACCOUNT").pipe(Config.withDefault(10)),
  authThrottleWindow: Config.Duration("AUTH_THROTTLE_WINDOW").pipe(Config.withDefault(Duration.minutes(10))),
  trustedProxyHops: Config.Int("TRUSTED_PROXY_HOPS").pipe(Config.withDefault(0)),
  passwordHashConcurrency: Config.Int("PASSWORD_HASH_CONCURRENCY").pipe(Config.withDefault(2)),
  passwordHashQueue: Config.Int("PASSWORD_HASH_QUEUE").pipe(Config.withDefault(32)),
  stripeWebhookSecret: Config.option(Config.Redacted("STRIPE_WEBHOOK_SECRET")),
  stripePricePro: Config.option(Config.String("STRIPE_PRICE_PRO")),
  stripePriceBusiness: Config.option(Config.String("STRIPE_PRICE_BUSINESS")),
  runnerAddress: Config.option(hostPort("RUNNER_ADDRESS")),
  runnerListen: Config.option(hostPort("RUNNER_LISTEN")),
  // A dead node's shards move once its lock is this old, plus about a second.
  shardLockExpiration: Config.option(Config.Duration("SHARD_LOCK_EXPIRATION")),
  clusterCallTimeout: Config.Duration("CLUSTER_CALL_TIMEOUT").pipe(Config.withDefault(Duration.seconds(10))),
  maxEventStreamsPerTenant: Config.Int("MAX_EVENT_STREAMS_PER_TENANT").pipe(Config.withDefault(10)),
  eventStreamMaxDuration: Config.Duration("EVENT_STREAM_MAX_DURATION").pipe(Config.withDefault(Duration.minutes(10))),
  executionMessagesRetention: Config.Duration("EXECUTION_MESSAGES_RETENTION").pipe(
    Config.withDefault(Duration.hours(1))
  ),
  maxUploadBytes: Config.Int("MAX_UPLOAD_BYTES").pipe(Config.withDefault(25 * 1024 * 1024)),
  maxUploadFiles: Config.Int("MAX_UPLOAD_FILES").pipe(Config.withDefault(20)),
  maxUploadPages: Config.Int("MAX_UPLOAD_PAGES").pipe(Config.withDefault(2_000)),
  maxDocumentChars: Config.Int("MAX_DOCUMENT_CHARS").pipe(Config.withDefault(5_000_000)),
  extractionTimeout: Config.Duration("EXTRACTION_TIMEOUT").pipe(Config.withDefault(Duration.seconds(60))),
  ingestionTimeout: Config.Duration("INGESTION_TIMEOUT").pipe(Config.withDefault(Duration.minutes(10))),
  ingestionMessagesRetention: Config.Duration("INGESTION_MESSAGES_RETENTION").pipe(Config.withDefault(Duration.hours(1))),
  knowledgeTopK: Config.schema(Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 50 })), "KNOWLEDGE_TOP_K").pipe(
    Config.withDefault(5)
  ),
  teamClosingTurnTimeout: Config.Duration("TEAM_CLOSING_TURN_TIMEOUT").pipe(Config.withDefault(Duration.seconds(30))),
  teamRunMessagesRetention: Config.Duration("TEAM_RUN_MESSAGES_RETENTION").pipe(Config.withDefault(Duration.hours(1))),
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
  logLevel: logLevel.pipe(Config.withDefault("Info" as const)),
  webhookAllowPrivate: flag("WEBHOOK_ALLOW_PRIVATE").pipe(Config.withDefault(false)),
  webhookRetrySchedule: durationList("WEBHOOK_RETRY_SCHEDULE", "5s,5m,30m,2h,5h,10h,10h"),
  webhookTimeout: Config.Duration("WEBHOOK_TIMEOUT").pipe(Config.withDefault(Duration.seconds(15))),
  webhookDisableAfter: Config.Duration("WEBHOOK_DISABLE_AFTER").pipe(Config.withDefault(Duration.days(5))),
  webhookRotationOverlap: Config.Duration("WEBHOOK_ROTATION_OVERLAP").pipe(Config.withDefault(Duration.hours(24))),
  webhookMessagesRetention: Config.Duration("WEBHOOK_MESSAGES_RETENTION").pipe(Config.withDefault(Duration.hours(1))),
  webhookSecretKey: Config.option(base64Key("WEBHOOK_SECRET_KEY"))
}).pipe(Config.map((settings): AppSettings => ({
  ...settings,
  maxPromptChars: Option.getOrElse(settings.maxPromptChars, () => 4 * settings.maxMessageChars)
})))

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
