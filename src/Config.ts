import { Config, Context, Duration, Effect, Layer, type LogLevel, Option, Redacted, Schema } from "effect"
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
  /** Directory for the embedded PostgreSQL's files. */
  readonly embeddedPostgresDataDir: string
  readonly embeddedPostgresPort: number
  /** OS user the embedded PostgreSQL runs as when the service runs as root. */
  readonly embeddedPostgresUser: string
  readonly databasePoolSize: number
  /** Largest request body accepted, in bytes. */
  readonly maxBodyBytes: number
  readonly sessionTtl: Duration.Duration
  /** Adds `Secure` to the session cookie (set it behind HTTPS). */
  readonly cookieSecure: boolean
  /** How long a verified API key is trusted before it is checked again. */
  readonly apiKeyCacheTtl: Duration.Duration
  /** Model given to agents created without one. */
  readonly defaultModel: string
  /** Grace period for in-flight requests on SIGTERM. */
  readonly shutdownGrace: Duration.Duration
  /** Longest chat message accepted, in characters. */
  readonly maxMessageChars: number
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
  /** How long the cluster's stored messages of a finished execution's workflow are kept. */
  readonly executionMessagesRetention: Duration.Duration
  /** OTLP/HTTP endpoint for traces (e.g. http://collector:4318); absent: nothing is exported. */
  readonly otelEndpoint: Option.Option<string>
  readonly otelServiceName: string
  /** Serves GET /metrics in the Prometheus text format. */
  readonly metricsEnabled: boolean
  /** Least severe log level written: Trace, Debug, Info, Warn, Error, Fatal or None. */
  readonly logLevel: LogLevel.LogLevel
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
  embeddedPostgresDataDir: Config.String("EMBEDDED_POSTGRES_DATA_DIR").pipe(
    Config.withDefault(NodePath.join(process.cwd(), ".data", "postgres"))
  ),
  embeddedPostgresPort: Config.Port("EMBEDDED_POSTGRES_PORT").pipe(Config.withDefault(54329)),
  embeddedPostgresUser: Config.String("EMBEDDED_POSTGRES_USER").pipe(Config.withDefault("postgres")),
  databasePoolSize: Config.Int("DATABASE_POOL_SIZE").pipe(Config.withDefault(10)),
  maxBodyBytes: Config.Int("MAX_BODY_BYTES").pipe(Config.withDefault(1024 * 1024)),
  sessionTtl: Config.Duration("SESSION_TTL").pipe(Config.withDefault(Duration.days(7))),
  cookieSecure: flag("COOKIE_SECURE").pipe(Config.withDefault(false)),
  apiKeyCacheTtl: Config.Duration("API_KEY_CACHE_TTL").pipe(Config.withDefault(Duration.seconds(60))),
  defaultModel: defaultModel.pipe(Config.withDefault("local")),
  shutdownGrace: Config.Duration("SHUTDOWN_GRACE").pipe(Config.withDefault(Duration.seconds(20))),
  maxMessageChars: Config.Int("MAX_MESSAGE_CHARS").pipe(Config.withDefault(32_000)),
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
  stripeWebhookSecret: Config.option(Config.Redacted("STRIPE_WEBHOOK_SECRET")),
  stripePricePro: Config.option(Config.String("STRIPE_PRICE_PRO")),
  stripePriceBusiness: Config.option(Config.String("STRIPE_PRICE_BUSINESS")),
  runnerAddress: Config.option(hostPort("RUNNER_ADDRESS")),
  runnerListen: Config.option(hostPort("RUNNER_LISTEN")),
  // A dead node's shards move once its lock is this old, plus about a second.
  shardLockExpiration: Config.option(Config.Duration("SHARD_LOCK_EXPIRATION")),
  clusterCallTimeout: Config.Duration("CLUSTER_CALL_TIMEOUT").pipe(Config.withDefault(Duration.seconds(10))),
  executionMessagesRetention: Config.Duration("EXECUTION_MESSAGES_RETENTION").pipe(
    Config.withDefault(Duration.hours(1))
  ),
  otelEndpoint: Config.option(Config.String("OTEL_EXPORTER_OTLP_ENDPOINT")),
  otelServiceName: Config.String("OTEL_SERVICE_NAME").pipe(Config.withDefault("agent-host")),
  metricsEnabled: flag("METRICS_ENABLED").pipe(Config.withDefault(true)),
  logLevel: logLevel.pipe(Config.withDefault("Info" as const))
})

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
