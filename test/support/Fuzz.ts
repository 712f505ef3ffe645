/**
 * A fuzzer for the HTTP API, derived from its OpenAPI document.
 *
 * Every operation of `GET /openapi.json` is sent, with every kind of
 * credential, requests built from its schemas and then broken: wrong types,
 * missing and extra fields, huge numbers, negative and fractional integers,
 * NUL and lone surrogates, 1 MB strings, 10,000-element arrays, 500-deep JSON,
 * bad cursors and ids, wrong content types, duplicate headers, odd methods,
 * and framing that fetch cannot express (sent as raw bytes over node:net).
 * A request fails the run when it gets a 5xx, no answer at all, or a 4xx that
 * is not application/problem+json with `type`, `title` and `status`.
 *
 * Reproducible: request `i` of seed `s` is built from its own PRNG seeded with
 * (s, i), so the same seed gives the same requests whatever the concurrency.
 * Used by test/Fuzz.test.ts (a bounded run inside `npm test`) and
 * bench/fuzz.ts (`npm run fuzz`, a long run against a spawned service).
 */
import * as Crypto from "node:crypto"
import * as Net from "node:net"

// ---------------------------------------------------------------------------
// A small seeded PRNG (mulberry32)
// ---------------------------------------------------------------------------

export class Rng {
  private state: number
  constructor(seed: number) {
    this.state = seed >>> 0
  }
  next(): number {
    let t = (this.state = (this.state + 0x6d2b79f5) >>> 0)
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
  int(n: number): number {
    return Math.floor(this.next() * n)
  }
  between(min: number, max: number): number {
    return min + this.int(max - min + 1)
  }
  chance(p: number): boolean {
    return this.next() < p
  }
  pick<A>(items: ReadonlyArray<A>): A {
    return items[this.int(items.length)]!
  }
  weighted<A>(entries: ReadonlyArray<readonly [number, A]>): A {
    let total = 0
    for (const [weight] of entries) total += weight
    let roll = this.next() * total
    for (const [weight, value] of entries) {
      roll -= weight
      if (roll < 0) return value
    }
    return entries[entries.length - 1]![1]
  }
}

/** The seed of one request: the run's seed mixed with its index. */
export const requestSeed = (seed: number, index: number) => {
  let h = (seed ^ Math.imul(index + 1, 0x9e3779b1)) >>> 0
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b)
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35)
  return (h ^ (h >>> 16)) >>> 0
}

/** FUZZ_SEED when set (a number), otherwise a fresh one. */
export const seedFromEnv = (): number => {
  const text = process.env.FUZZ_SEED
  if (text !== undefined && text !== "") {
    const seed = Number(text)
    if (!Number.isInteger(seed) || seed < 0 || seed > 0xffffffff)
      throw new Error(`FUZZ_SEED must be an integer, got ${text}`)
    return seed
  }
  return Crypto.randomInt(0, 0x7fffffff)
}

// ---------------------------------------------------------------------------
// The OpenAPI document
// ---------------------------------------------------------------------------

// JSON Schema as the document has it; read loosely on purpose.
type JsonSchema = Record<string, any>

export interface Parameter {
  readonly name: string
  readonly in: "path" | "query" | "header" | "cookie"
  readonly required: boolean
  readonly schema: JsonSchema
}

export interface Operation {
  readonly method: string
  /** The path template, e.g. `/api/agents/{id}`. */
  readonly path: string
  /** `METHOD /template`, the label of counts and failures. */
  readonly name: string
  readonly parameters: ReadonlyArray<Parameter>
  readonly body: { readonly contentType: string; readonly schema: JsonSchema } | undefined
  /** Names of the security schemes it accepts; empty for a public route. */
  readonly security: ReadonlyArray<string>
}

export const operationsOf = (document: any): ReadonlyArray<Operation> => {
  const resolve = (schema: JsonSchema): JsonSchema => {
    if (typeof schema?.$ref === "string") {
      const name: string = schema.$ref.split("/").pop() ?? ""
      return resolve(document.components.schemas[name])
    }
    return schema
  }
  const operations: Array<Operation> = []
  for (const [path, methods] of Object.entries<any>(document.paths)) {
    for (const [method, operation] of Object.entries<any>(methods)) {
      const content = operation.requestBody?.content ?? {}
      const contentType: string | undefined = Object.keys(content)[0]
      operations.push({
        method: method.toUpperCase(),
        path,
        name: `${method.toUpperCase()} ${path}`,
        parameters: (operation.parameters ?? []).map((parameter: any) => ({
          name: parameter.name,
          in: parameter.in,
          required: parameter.required === true,
          schema: resolve(parameter.schema ?? {})
        })),
        body:
          contentType === undefined ? undefined : { contentType, schema: deref(content[contentType].schema, resolve) },
        security: (operation.security ?? document.security ?? []).flatMap((entry: object) => Object.keys(entry))
      })
    }
  }
  return operations
}

const deref = (schema: JsonSchema, resolve: (schema: JsonSchema) => JsonSchema): JsonSchema => {
  const resolved = resolve(schema)
  if (typeof resolved !== "object" || resolved === null) return resolved
  const out: JsonSchema = Array.isArray(resolved) ? [] : {}
  for (const [key, value] of Object.entries(resolved)) {
    out[key] = typeof value === "object" && value !== null ? deref(value, resolve) : value
  }
  return out
}

// ---------------------------------------------------------------------------
// Real resources to aim at, made over HTTP before the run
// ---------------------------------------------------------------------------

export type ResourceKind = "agent" | "orchestration" | "execution" | "key" | "conversation" | "team" | "run"

export interface Pools {
  /** Read, chatted with, executed: never changed by the fuzzer. */
  readonly stable: ReadonlyArray<string>
  /** Targets of PUT: their definitions change during the run. */
  readonly mutable: ReadonlyArray<string>
  /** Targets of DELETE (the keys the fuzzer authenticates with are never among them). */
  readonly expendable: ReadonlyArray<string>
}

export interface Fixtures {
  readonly email: string
  readonly password: string
  readonly sessionToken: string
  readonly keys: { readonly bearer: string; readonly header: string; readonly revoked: string }
  readonly ids: Readonly<Record<ResourceKind, Pools>>
  /** Ids of another tenant's resources. */
  readonly foreignIds: ReadonlyArray<string>
  /** Real `nextCursor`s by list operation name. */
  readonly cursors: Readonly<Record<string, ReadonlyArray<string>>>
  /** The Stripe webhook secret the service runs with, to sign some deliveries. */
  readonly stripeSecret: string | undefined
}

const json = async (
  baseUrl: string,
  method: string,
  path: string,
  body: unknown,
  headers: Record<string, string> = {}
) => {
  const response = await fetch(baseUrl + path, {
    method,
    headers: { ...(body === undefined ? {} : { "content-type": "application/json" }), ...headers },
    body: body === undefined ? null : JSON.stringify(body)
  })
  const text = await response.text()
  if (response.status >= 300) throw new Error(`fuzz setup: ${method} ${path}: ${response.status} ${text}`)
  return { body: text === "" ? undefined : JSON.parse(text), headers: response.headers }
}

const allScopes = ["read", "chat", "execute", "teams"]

const signUp = async (baseUrl: string) => {
  const email = `fuzz-${Crypto.randomBytes(6).toString("hex")}@example.com`
  const password = "correct horse battery staple"
  const registered = await json(baseUrl, "POST", "/api/auth/register", { email, password, name: "Fuzz" })
  const login = await json(baseUrl, "POST", "/api/auth/login", { email, password })
  return { email, password, token: login.body.token as string, tenantId: registered.body.tenant.id as string }
}

/**
 * A tenant with agents, orchestrations, executions, conversations and keys,
 * another tenant's ids, and real cursors. `promote` puts the tenant on a plan
 * without a daily limit (the caller owns the database connection).
 */
export const prepare = async (
  baseUrl: string,
  options: { readonly promote: (tenantId: string) => Promise<void>; readonly stripeSecret?: string }
): Promise<Fixtures> => {
  const account = await signUp(baseUrl)
  await options.promote(account.tenantId)
  const session = { authorization: `Bearer ${account.token}` }
  const key = async () =>
    (await json(baseUrl, "POST", "/api/keys", { name: "fuzz", scopes: allScopes }, session)).body as {
      id: string
      key: string
    }
  const bearer = await key()
  const header = await key()
  const revoked = await key()
  await json(baseUrl, "DELETE", `/api/keys/${revoked.id}`, undefined, session)
  const expendableKeys = [await key(), await key()]

  const agent = async (memoryEnabled: boolean) =>
    (await json(baseUrl, "POST", "/api/agents", { name: "Fuzz agent", model: "local", memoryEnabled }, session)).body
      .id as string
  const agents = {
    stable: [await agent(true), await agent(false)],
    mutable: [await agent(true)],
    expendable: [await agent(false), await agent(false)]
  }
  // One of each kind: without variables, and needing `topic` (the variables hint always sends it).
  const orchestration = async (prompt = "Say {{input}} {{variables.topic}}") =>
    (
      await json(
        baseUrl,
        "POST",
        "/api/orchestrations",
        {
          name: "Fuzz",
          steps: [
            { id: "first", agentId: agents.stable[0], prompt },
            { id: "second", agentId: agents.stable[1], prompt: "Then {{steps.first.output}}", dependsOn: ["first"] }
          ]
        },
        session
      )
    ).body.id as string
  const orchestrations = {
    stable: [await orchestration("Say {{input}}"), await orchestration()],
    mutable: [await orchestration()],
    expendable: [await orchestration(), await orchestration()]
  }

  const keyAuth = { authorization: `Bearer ${bearer.key}` }
  const execute = async () =>
    (
      await json(
        baseUrl,
        "POST",
        `/api/v1/orchestrations/${orchestrations.stable[0]}/execute`,
        { input: "otters", variables: { topic: "rivers" } },
        keyAuth
      )
    ).body.executionId as string
  const executions = [await execute(), await execute(), await execute()]
  const conversations = ["fuzz-conversation-1", "fuzz-conversation-2", "fuzz-conversation-3"]
  for (const conversationId of conversations) {
    await json(
      baseUrl,
      "POST",
      `/api/v1/agents/${agents.stable[0]}/chat`,
      { message: "Hello there", conversationId },
      keyAuth
    )
  }

  const team = async (turnTaking: "round_robin" | "leader" = "round_robin") =>
    (
      await json(
        baseUrl,
        "POST",
        "/api/teams",
        {
          name: "Fuzz team",
          members: [
            { agentId: agents.stable[0], role: "first" },
            { agentId: agents.stable[1], role: "second" }
          ],
          turnTaking,
          ...(turnTaking === "leader" ? { leaderAgentId: agents.stable[1] } : {})
        },
        session
      )
    ).body.id as string
  const teams = {
    stable: [await team(), await team("leader")],
    mutable: [await team()],
    expendable: [await team(), await team()]
  }
  const run = async () =>
    (await json(baseUrl, "POST", `/api/v1/teams/${teams.stable[0]}/run`, { mission: "Fuzz the room" }, keyAuth)).body
      .data.runId as string
  const runs = [await run(), await run(), await run()]

  const other = await signUp(baseUrl)
  const otherSession = { authorization: `Bearer ${other.token}` }
  const foreignAgent = (await json(baseUrl, "POST", "/api/agents", { name: "Other", model: "local" }, otherSession))
    .body.id as string
  const foreignKey = (await json(baseUrl, "POST", "/api/keys", { name: "other" }, otherSession)).body.id as string

  const cursors: Record<string, Array<string>> = {}
  const collect = async (name: string, path: string, headers: Record<string, string>) => {
    const page = await json(baseUrl, "GET", path, undefined, headers)
    // The key-authenticated team routes wrap a page of runs in `{ success, data }`.
    const nextCursor = page.body.nextCursor ?? page.body.data?.nextCursor
    if (typeof nextCursor === "string") (cursors[name] ??= []).push(nextCursor)
  }
  await collect("GET /api/agents", "/api/agents?limit=1", session)
  await collect("GET /api/orchestrations", "/api/orchestrations?limit=1", session)
  await collect("GET /api/agents/{id}/conversations", `/api/agents/${agents.stable[0]}/conversations?limit=1`, session)
  await collect("GET /api/v1/agents", "/api/v1/agents?limit=1", keyAuth)
  await collect("GET /api/v1/orchestrations", "/api/v1/orchestrations?limit=1", keyAuth)
  await collect("GET /api/v1/executions", "/api/v1/executions?limit=1", keyAuth)
  await collect("GET /api/teams", "/api/teams?limit=1", session)
  await collect("GET /api/v1/teams", "/api/v1/teams?limit=1", keyAuth)
  await collect("GET /api/public/teams", "/api/public/teams?limit=1", { "x-api-key": header.key })
  for (const group of ["/api/teams", "/api/v1/teams", "/api/public/teams"]) {
    const auth = group === "/api/teams" ? session : group === "/api/v1/teams" ? keyAuth : { "x-api-key": header.key }
    await collect(`GET ${group}/{id}/runs`, `${group}/${teams.stable[0]}/runs?limit=1`, auth)
  }

  return {
    email: account.email,
    password: account.password,
    sessionToken: account.token,
    keys: { bearer: bearer.key, header: header.key, revoked: revoked.key },
    ids: {
      agent: agents,
      orchestration: orchestrations,
      execution: { stable: executions, mutable: executions, expendable: executions },
      key: { stable: [bearer.id], mutable: [bearer.id], expendable: [...expendableKeys.map((k) => k.id), revoked.id] },
      conversation: {
        stable: conversations.slice(0, 2),
        mutable: conversations.slice(0, 2),
        expendable: conversations.slice(2)
      },
      team: teams,
      run: { stable: runs, mutable: runs, expendable: runs }
    },
    foreignIds: [foreignAgent, foreignKey],
    cursors,
    stripeSecret: options.stripeSecret
  }
}

// ---------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------

export const credentialKinds = [
  "none",
  "sessionBearer",
  "sessionCookie",
  "keyBearer",
  "keyHeader",
  "revokedKey",
  "garbage"
] as const
export type Credential = (typeof credentialKinds)[number]

export interface FuzzRequest {
  readonly index: number
  readonly operation: string
  readonly credential: Credential
  /** The kind of breakage, e.g. `body.nul`; failures are grouped by it. */
  readonly mutation: string
  /** Where and how, e.g. `at payload.name`. */
  readonly detail: string
  readonly method: string
  readonly target: string
  readonly headers: ReadonlyArray<readonly [string, string]>
  readonly body: Buffer | undefined
  /** The whole request as bytes, when its framing itself is the test. */
  readonly raw: Buffer | undefined
  /** Close the sending side once written: a body shorter than declared then ends instead of stalling. */
  readonly halfClose: boolean
}

/** Text placed into JSON as is (numbers JSON.stringify cannot write, deep nesting). */
class RawJson {
  readonly text: string
  constructor(text: string) {
    this.text = text
  }
}

const serialize = (value: unknown): string => {
  if (value instanceof RawJson) return value.text
  if (Array.isArray(value)) return `[${value.map(serialize).join(",")}]`
  if (value !== null && typeof value === "object") {
    return `{${Object.entries(value)
      .map(([key, item]) => `${JSON.stringify(key)}:${serialize(item)}`)
      .join(",")}}`
  }
  return value === undefined ? "null" : JSON.stringify(value)
}

const clone = (value: unknown): unknown => {
  if (value instanceof RawJson) return value
  if (Array.isArray(value)) return value.map(clone)
  if (value !== null && typeof value === "object") {
    const out: Record<string, unknown> = {}
    for (const [key, item] of Object.entries(value)) setOwn(out, key, clone(item))
    return out
  }
  return value
}

// An own property even for `__proto__`.
const setOwn = (target: Record<string, unknown>, key: string, value: unknown) =>
  Object.defineProperty(target, key, { value, enumerable: true, writable: true, configurable: true })

const words = ["otter", "river", "hello", "stone", "quiet", "blue", "été", "naïve", "日本", "données", "🦦", "x"]
// Whole words only, so no surrogate pair is ever cut in half; padded to at least `min`.
const text = (rng: Rng, min = 1, max = 24) => {
  const length = rng.between(Math.max(min, 1), Math.max(min, Math.min(max, 24)))
  let out = ""
  for (;;) {
    const word = (out === "" ? "" : " ") + rng.pick(words)
    if (out.length + word.length > length) break
    out += word
  }
  return out.padEnd(length, "x")
}

const models = ["local", "local", "openai/gpt-fuzz", "anthropic/claude-fuzz"]

/** What the document cannot say (its patterns): values by property name that pass validation. */
const hints = (rng: Rng, fixtures: Fixtures): Record<string, () => unknown> => ({
  email: () => `fuzz-${rng.int(1e9)}@example.com`,
  password: () => (rng.chance(0.5) ? fixtures.password : `pw-${rng.int(1e9)}-long-enough`),
  model: () => rng.pick(models),
  agentId: () => rng.pick(fixtures.ids.agent.stable),
  conversationId: () => (rng.chance(0.7) ? rng.pick(fixtures.ids.conversation.stable) : `fuzz-${rng.int(1e6)}`),
  message: () => text(rng, 1, 60),
  input: () => text(rng, 0, 60),
  prompt: () => rng.pick(["Say {{input}}", "About {{variables.topic}}: {{input}}", "Hello"]),
  variables: () => (rng.chance(0.5) ? { topic: text(rng) } : { topic: text(rng), other: text(rng) }),
  steps: () => {
    const count = rng.between(1, 3)
    return Array.from({ length: count }, (_, i) => ({
      id: `step${i}`,
      agentId: rng.pick(fixtures.ids.agent.stable),
      prompt: i === 0 ? "Say {{input}}" : `Then {{steps.step${i - 1}.output}}`,
      ...(i === 0 ? {} : { dependsOn: [`step${i - 1}`] })
    }))
  },
  timeoutMs: () => rng.between(1000, 60_000)
})

/** A value the schema accepts (as far as the document says), with hints for named properties. */
const validValue = (schema: JsonSchema, rng: Rng, fixtures: Fixtures, name?: string): unknown => {
  const hint = name === undefined ? undefined : hints(rng, fixtures)[name]
  if (hint !== undefined) return hint()
  if (schema.anyOf ?? schema.oneOf) return validValue(rng.pick(schema.anyOf ?? schema.oneOf), rng, fixtures, name)
  if (schema.enum) return rng.pick(schema.enum)
  if ("const" in schema) return schema.const
  switch (schema.type) {
    case "string":
      return text(rng, schema.minLength ?? 1, schema.maxLength ?? 24)
    case "integer":
      return rng.between(schema.minimum ?? 0, Math.min(schema.maximum ?? 100, (schema.minimum ?? 0) + 1000))
    case "number":
      return rng.next() * 100
    case "boolean":
      return rng.chance(0.5)
    case "array": {
      const count = rng.between(schema.minItems ?? 0, Math.min(schema.maxItems ?? 3, 3))
      const items = Array.from({ length: count }, () => validValue(schema.items ?? {}, rng, fixtures))
      return schema.items?.enum ? [...new Set(items)] : items
    }
    case "object": {
      const out: Record<string, unknown> = {}
      const required = new Set<string>(schema.required ?? [])
      for (const [key, property] of Object.entries<JsonSchema>(schema.properties ?? {})) {
        if (required.has(key) || rng.chance(0.5)) setOwn(out, key, validValue(property, rng, fixtures, key))
      }
      if (typeof schema.additionalProperties === "object" && rng.chance(0.5)) {
        setOwn(out, `k${rng.int(100)}`, validValue(schema.additionalProperties, rng, fixtures))
      }
      return out
    }
    default:
      return text(rng)
  }
}

/** Every place in a JSON value, as key paths, with the schema there when known. */
const placesOf = (value: unknown, schema: JsonSchema | undefined, path: ReadonlyArray<string | number> = []) => {
  const out: Array<{
    readonly path: ReadonlyArray<string | number>
    readonly value: unknown
    readonly schema: JsonSchema | undefined
  }> = [{ path, value, schema }]
  if (Array.isArray(value)) {
    value.forEach((item, i) => out.push(...placesOf(item, schema?.items, [...path, i])))
  } else if (value !== null && typeof value === "object" && !(value instanceof RawJson)) {
    for (const [key, item] of Object.entries(value)) {
      out.push(
        ...placesOf(
          item,
          schema?.properties?.[key] ??
            (typeof schema?.additionalProperties === "object" ? schema.additionalProperties : undefined),
          [...path, key]
        )
      )
    }
  }
  return out
}

const setAt = (root: unknown, path: ReadonlyArray<string | number>, value: unknown): unknown => {
  if (path.length === 0) return value
  const copy = clone(root) as any
  let node = copy
  for (const key of path.slice(0, -1)) node = node[key]
  const last = path[path.length - 1]!
  if (Array.isArray(node)) node[last as number] = value
  else setOwn(node, String(last), value)
  return copy
}

const deleteAt = (root: unknown, path: ReadonlyArray<string | number>): unknown => {
  const copy = clone(root) as any
  let node = copy
  for (const key of path.slice(0, -1)) node = node[key]
  const last = path[path.length - 1]!
  if (Array.isArray(node)) node.splice(last as number, 1)
  else delete node[last]
  return copy
}

const describePath = (path: ReadonlyArray<string | number>) => ["payload", ...path].join(".")

const typeOf = (value: unknown) => (value === null ? "null" : Array.isArray(value) ? "array" : typeof value)

const wrongTypes: ReadonlyArray<unknown> = [
  0,
  -1,
  1.5,
  true,
  false,
  null,
  "text",
  "",
  [],
  {},
  [1, "a"],
  { a: 1 },
  "123",
  "true"
]
const hugeNumbers: ReadonlyArray<unknown> = [
  new RawJson("1e309"),
  new RawJson("-1e309"),
  new RawJson("123456789012345678901234567890"),
  new RawJson("1E400"),
  new RawJson("-0"),
  new RawJson("0.00000000000000000000000000000000001"),
  Number.MAX_VALUE,
  Number.MAX_SAFE_INTEGER + 2,
  2147483648,
  -2147483649,
  // biome-ignore lint/correctness/noPrecisionLoss: a client's 64-bit integer, rounded as JSON.parse rounds it
  9223372036854775807
]
const negativeIntegers: ReadonlyArray<unknown> = [-1, -1000, -2147483649, new RawJson("-0")]
const fractionalIntegers: ReadonlyArray<unknown> = [1.5, 1000.5, 0.1, 3599999.9999, new RawJson("1.0e3")]
const nulStrings: ReadonlyArray<string> = ["\u0000", "a\u0000b", "name\u0000", "\u0000".repeat(50)]
const loneSurrogates: ReadonlyArray<string> = ["\ud800", "a\udc00b", "\udfff\ud800", "x\ud83d"]
const edgyStrings: ReadonlyArray<string> = [
  "",
  " ",
  "\t\n",
  "\u202e\u0301",
  "\ufeff",
  "\uffff",
  "💥".repeat(100),
  "'; DROP TABLE agents; --",
  "{{input}}",
  "%00",
  "../../etc/passwd",
  "<script>"
]
const extraKeys: ReadonlyArray<string> = [
  "extra",
  "__proto__",
  "constructor",
  "tenantId",
  "id",
  "",
  "\u0000",
  "a".repeat(1000)
]
const megabyte = 1_000_000
const deepArray = (depth: number) => new RawJson("[".repeat(depth) + "]".repeat(depth))
const deepObject = (depth: number) => new RawJson(`${'{"a":'.repeat(depth)}1${"}".repeat(depth)}`)

const notJsonBodies: ReadonlyArray<string> = [
  "{",
  '{"name":',
  "nul",
  "undefined",
  "NaN",
  "'single'",
  "{name: 1}",
  '{"name":"x",}',
  "",
  " ",
  "{}x",
  "{}{}",
  "\ufeff{}",
  "[1,2",
  '"unterminated',
  '{"a":"\\x41"}',
  '{"a":"\\ud800"}',
  '{"a":"\\u0000"}',
  '{"a":01}'
]
const contentTypes: ReadonlyArray<string | null> = [
  null,
  "text/plain",
  "application/x-www-form-urlencoded",
  "multipart/form-data; boundary=xyz",
  "multipart/form-data",
  "application/json; charset=utf-16",
  "application/json; charset=latin1",
  "APPLICATION/JSON",
  "application/json, text/plain",
  "application/problem+json",
  "application/vnd.api+json",
  "*/*",
  "a/b/c",
  "application/json;;;",
  `application/json; boundary=${"x".repeat(5000)}`,
  "",
  "application/octet-stream",
  "text/html; charset=utf-8"
]
const badIds: ReadonlyArray<string> = [
  "not-an-id",
  "%00",
  "%ZZ",
  "..%2F..",
  "x".repeat(10_000),
  "00000000-0000-0000-0000-000000000000",
  "0190c1a8-0000-7000-8000-000000000000",
  "0190C1A8-0000-7000-8000-000000000000",
  "-1",
  "1.5",
  "99999999999999999999999",
  "%F0%9F%A6%A6",
  "%C0%80",
  "%ED%A0%80",
  "%20",
  "null",
  "undefined",
  "%7B%7D",
  "a%2Fb",
  "ak_0000000000000000000000000000000000000000000"
]
const badLimits: ReadonlyArray<string> = [
  "-1",
  "0",
  "1.5",
  "1e309",
  "abc",
  "99999999999999999999",
  "201",
  "",
  "%00",
  "0x10",
  " 5",
  "1e2",
  "NaN",
  "Infinity"
]
const badCursors: ReadonlyArray<string> = [
  "AA",
  "garbage",
  "",
  "%00",
  "!!!!",
  "x".repeat(5000),
  "eyJhIjoxfQ",
  "AAAA",
  "____",
  "%FF",
  "null",
  "eyJpZCI6IiJ9",
  "MA",
  "e30"
]
const oddMethods: ReadonlyArray<string> = [
  "HEAD",
  "OPTIONS",
  "TRACE",
  "PATCH",
  "PUT",
  "DELETE",
  "POST",
  "GET",
  "PROPFIND",
  "get",
  "Post",
  "FOO",
  "M-SEARCH"
]

/** A request as parts, before it becomes bytes. */
interface Draft {
  method: string
  path: string
  query: Array<readonly [string, string]>
  headers: Array<readonly [string, string]>
  body: unknown
  hasBody: boolean
  bodyBytes: Buffer | undefined
  contentType: string | null
  sign: boolean
  mutation: string
  detail: string
}

const credentialsFor = (operation: Operation): ReadonlyArray<Credential> => {
  if (operation.security.includes("apiKeyBearer")) return ["keyBearer"]
  if (operation.security.includes("apiKeyHeader")) return ["keyHeader"]
  if (operation.security.length > 0) return ["sessionBearer", "sessionCookie"]
  return ["none"]
}

const garbageCredentials = (rng: Rng): ReadonlyArray<readonly [string, string]> =>
  rng.pick([
    [["authorization", `Bearer ak_${Crypto.randomBytes(rng.between(1, 40)).toString("hex")}`]],
    [["authorization", `Bearer st_${rng.int(1e9)}`]],
    [["authorization", "Bearer "]],
    [["authorization", "Bearer"]],
    [["authorization", "Basic Zm9vOmJhcg=="]],
    [["authorization", `Bearer ${"a".repeat(10_000)}`]],
    [["authorization", "Bearer \u00e9\u00e8"]],
    [["authorization", "bearer ak_"]],
    [["cookie", "session=garbage; session=st_nope"]],
    [["cookie", `session=${"%00".repeat(10)}`]],
    [["cookie", "session"]],
    [["x-api-key", `ak_${rng.int(1e9)}`]],
    [["x-api-key", ""]]
  ] satisfies ReadonlyArray<ReadonlyArray<readonly [string, string]>>)

const credentialHeaders = (credential: Credential, fixtures: Fixtures, rng: Rng): Array<readonly [string, string]> => {
  switch (credential) {
    case "none":
      return []
    case "sessionBearer":
      return [["authorization", `Bearer ${fixtures.sessionToken}`]]
    case "sessionCookie":
      return [["cookie", `session=${fixtures.sessionToken}`]]
    case "keyBearer":
      return [["authorization", `Bearer ${fixtures.keys.bearer}`]]
    case "keyHeader":
      return [["x-api-key", fixtures.keys.header]]
    case "revokedKey":
      return [["authorization", `Bearer ${fixtures.keys.revoked}`]]
    case "garbage":
      return [...garbageCredentials(rng)]
  }
}

// The resource a path parameter names: the collection segment before it.
const kindOf = (path: string, parameter: string): ResourceKind | undefined => {
  const segments = path.split("/")
  const at = segments.indexOf(`{${parameter}}`)
  const collection = segments[at - 1]
  return (
    {
      agents: "agent",
      orchestrations: "orchestration",
      executions: "execution",
      keys: "key",
      conversations: "conversation",
      teams: "team",
      runs: "run"
    } as const
  )[collection as "agents"]
}

const poolFor = (fixtures: Fixtures, kind: ResourceKind, method: string) => {
  const pools = fixtures.ids[kind]
  return method === "DELETE" ? pools.expendable : method === "PUT" ? pools.mutable : pools.stable
}

const stripeEvent = (rng: Rng) => {
  const type = rng.pick([
    "checkout.session.completed",
    "customer.subscription.created",
    "customer.subscription.updated",
    "customer.subscription.deleted",
    "invoice.paid"
  ])
  const object =
    type === "checkout.session.completed"
      ? {
          client_reference_id: rng.pick([null, Crypto.randomUUID(), "unknown"]),
          customer: `cus_${rng.int(1e6)}`,
          subscription: `sub_${rng.int(1e6)}`
        }
      : {
          id: `sub_${rng.int(1e6)}`,
          customer: `cus_${rng.int(1e6)}`,
          status: rng.pick(["active", "canceled", "past_due"]),
          metadata: { tenant_id: Crypto.randomUUID() },
          items: { data: [{ price: { id: `price_${rng.int(100)}` } }] }
        }
  return { id: `evt_${rng.int(1e9)}`, type, created: Math.floor(Date.now() / 1000) - rng.int(1000), data: { object } }
}

// The method acts on the last id of the path; the ids before it name parents, always stable ones.
const pathId = (operation: Operation, name: string, method: string, fixtures: Fixtures, rng: Rng) => {
  const kind = kindOf(operation.path, name)
  const last = operation.path.match(/\{(\w+)\}/g)?.pop() === `{${name}}`
  return kind === undefined ? text(rng) : rng.pick(poolFor(fixtures, kind, last ? method : "GET"))
}

/** The valid request of an operation, with real ids; mutations start from it. */
const baseDraft = (operation: Operation, fixtures: Fixtures, rng: Rng): Draft => {
  let path = operation.path
  const query: Array<readonly [string, string]> = []
  const headers: Array<readonly [string, string]> = []
  let sign = false
  for (const parameter of operation.parameters) {
    if (parameter.in === "path") {
      path = path.replace(
        `{${parameter.name}}`,
        encodeURIComponent(pathId(operation, parameter.name, operation.method, fixtures, rng))
      )
    } else if (parameter.in === "query") {
      if (!parameter.required && rng.chance(0.5)) continue
      const value =
        parameter.name === "limit"
          ? String(rng.between(1, 200))
          : parameter.name === "cursor"
            ? rng.pick(fixtures.cursors[operation.name] ?? [""])
            : parameter.name === "orchestrationId"
              ? rng.pick(fixtures.ids.orchestration.stable)
              : String(validValue(parameter.schema, rng, fixtures))
      query.push([parameter.name, encodeURIComponent(value)])
    } else if (parameter.in === "header") {
      if (parameter.name === "stripe-signature") {
        sign = fixtures.stripeSecret !== undefined && rng.chance(0.7)
        if (!sign)
          headers.push([
            parameter.name,
            rng.pick(["t=1,v1=00", "garbage", "", `t=${Math.floor(Date.now() / 1000)},v1=${"a".repeat(64)}`])
          ])
      } else if (!parameter.required && rng.chance(0.5)) {
      } else {
        headers.push([parameter.name, `fuzz-${rng.int(1e9)}`])
      }
    }
  }
  const body =
    operation.body === undefined
      ? undefined
      : operation.body.schema.format === "binary"
        ? stripeEvent(rng)
        : validValue(operation.body.schema, rng, fixtures)
  return {
    method: operation.method,
    path,
    query,
    headers,
    body,
    hasBody: operation.body !== undefined,
    bodyBytes: undefined,
    contentType: operation.body?.contentType ?? null,
    sign,
    mutation: "valid",
    detail: ""
  }
}

type Mutator = (draft: Draft, operation: Operation, fixtures: Fixtures, rng: Rng) => void

// Mutations of one place in the JSON body.
const atPlace =
  (
    name: string,
    choose: (place: { readonly value: unknown; readonly schema: JsonSchema | undefined }, rng: Rng) => unknown,
    filter: (place: { readonly value: unknown; readonly schema: JsonSchema | undefined }) => boolean = () => true
  ): Mutator =>
  (draft, _operation, _fixtures, rng) => {
    const all = placesOf(draft.body, undefined)
    const places = all.filter(filter)
    const place = rng.pick(places.length > 0 ? places : all)
    const value = choose(place, rng)
    draft.body = setAt(draft.body, place.path, value)
    draft.hasBody = true
    draft.mutation = name
    draft.detail = `at ${describePath(place.path)}: ${value instanceof RawJson ? value.text.slice(0, 40) : JSON.stringify(value)?.slice(0, 40)}`
  }

const isString = (place: { readonly value: unknown }) => typeof place.value === "string"
const isNumber = (place: { readonly value: unknown }) => typeof place.value === "number"
const isArray = (place: { readonly value: unknown }) => Array.isArray(place.value)
const isObject = (place: { readonly value: unknown }) =>
  typeOf(place.value) === "object" && !(place.value instanceof RawJson)

const bodyMutators: ReadonlyArray<readonly [number, Mutator]> = [
  [
    4,
    atPlace("body.wrong-type", (place, rng) => {
      const options = wrongTypes.filter((value) => typeOf(value) !== typeOf(place.value))
      return rng.pick(options)
    })
  ],
  [
    3,
    (draft, _operation, _fixtures, rng) => {
      const places = placesOf(draft.body, undefined).filter((place) => place.path.length > 0)
      draft.mutation = "body.missing-field"
      if (places.length === 0) {
        draft.body = undefined
        draft.detail = "no body"
        return
      }
      const place = rng.pick(places)
      draft.body = deleteAt(draft.body, place.path)
      draft.detail = `without ${describePath(place.path)}`
    }
  ],
  [
    3,
    (draft, _operation, _fixtures, rng) => {
      const places = placesOf(draft.body, undefined).filter(isObject)
      const key = rng.pick(extraKeys)
      const value = rng.pick(["x", 1, null, { nested: true }])
      draft.mutation = "body.extra-field"
      draft.hasBody = true
      if (places.length === 0) {
        const body: Record<string, unknown> = {}
        setOwn(body, key, value)
        draft.body = body
        draft.detail = `body {${JSON.stringify(key).slice(0, 20)}}`
        return
      }
      const place = rng.pick(places)
      const target = clone(place.value) as Record<string, unknown>
      setOwn(target, key, value)
      draft.body = setAt(draft.body, place.path, target)
      draft.detail = `${JSON.stringify(key).slice(0, 20)} in ${describePath(place.path)}`
    }
  ],
  [3, atPlace("body.huge-number", (_place, rng) => rng.pick(hugeNumbers))],
  [2, atPlace("body.negative-integer", (_place, rng) => rng.pick(negativeIntegers), isNumber)],
  [2, atPlace("body.fractional-integer", (_place, rng) => rng.pick(fractionalIntegers), isNumber)],
  [
    4,
    atPlace(
      "body.nul",
      (place, rng) => {
        const nul = rng.pick(nulStrings)
        return typeof place.value === "string" ? place.value + nul : nul
      },
      isString
    )
  ],
  [
    4,
    atPlace(
      "body.lone-surrogate",
      (place, rng) => {
        const surrogate = rng.pick(loneSurrogates)
        return typeof place.value === "string" ? surrogate + place.value : surrogate
      },
      isString
    )
  ],
  [2, atPlace("body.edge-string", (_place, rng) => rng.pick(edgyStrings), isString)],
  [2, atPlace("body.megabyte-string", (_place, rng) => rng.pick(["a", "é", " ", "{"]).repeat(megabyte / 2), isString)],
  [
    2,
    atPlace(
      "body.10000-array",
      (place, rng) => {
        const item = Array.isArray(place.value) && place.value.length > 0 ? place.value[0] : rng.pick(["x", 1, {}])
        return Array.from({ length: 10_000 }, () => item)
      },
      isArray
    )
  ],
  [2, atPlace("body.500-deep", (_place, rng) => (rng.chance(0.5) ? deepArray(500) : deepObject(500)))],
  [
    2,
    (draft, _operation, _fixtures, rng) => {
      draft.bodyBytes = Buffer.from(rng.pick(notJsonBodies))
      draft.hasBody = true
      draft.mutation = "body.not-json"
      draft.detail = JSON.stringify(draft.bodyBytes.toString()).slice(0, 40)
    }
  ],
  [
    2,
    (draft, _operation, _fixtures, rng) => {
      draft.body = rng.pick<unknown>([
        [],
        "text",
        1,
        null,
        true,
        [draft.body],
        new RawJson("[".repeat(10_000) + "]".repeat(10_000))
      ])
      draft.hasBody = true
      draft.mutation = "body.wrong-root"
      draft.detail = (draft.body instanceof RawJson ? "10000-deep array" : (JSON.stringify(draft.body) ?? "")).slice(
        0,
        40
      )
    }
  ],
  [
    1,
    (draft, _operation, _fixtures, rng) => {
      const valid = serialize(draft.body ?? {})
      const key = rng.pick(["name", "email", "input", "message", "steps"])
      draft.bodyBytes = Buffer.from(
        valid.startsWith("{") && valid.length > 2
          ? `{"${key}":1,"${key}":"x",${valid.slice(1)}`
          : `{"${key}":1,"${key}":"x"}`
      )
      draft.hasBody = true
      draft.mutation = "body.duplicate-keys"
      draft.detail = `"${key}" twice`
    }
  ],
  [
    2,
    (draft, _operation, _fixtures, rng) => {
      const bad = rng.pick([
        [0xff],
        [0xfe, 0xff],
        [0xc3],
        [0xc0, 0x80],
        [0xed, 0xa0, 0x80],
        [0xf4, 0x90, 0x80, 0x80],
        [0x80]
      ])
      const valid = serialize(draft.body ?? { name: "x" })
      const at = valid.indexOf('"', 1)
      const cut = at > 0 ? at + 1 : Math.min(1, valid.length)
      draft.bodyBytes = Buffer.concat([
        Buffer.from(valid.slice(0, cut)),
        Buffer.from(bad),
        Buffer.from(valid.slice(cut))
      ])
      draft.hasBody = true
      draft.mutation = "body.invalid-utf8"
      draft.detail = `bytes ${Buffer.from(bad).toString("hex")}`
    }
  ]
]

const contentTypeMutator: Mutator = (draft, _operation, _fixtures, rng) => {
  draft.contentType = rng.pick(contentTypes)
  draft.hasBody = true
  draft.mutation = "content-type"
  draft.detail = JSON.stringify(draft.contentType)?.slice(0, 60) ?? "none"
}

const paramMutators: ReadonlyArray<readonly [number, Mutator]> = [
  [
    4,
    (draft, operation, fixtures, rng) => {
      const names = operation.parameters
        .filter((parameter) => parameter.in === "path")
        .map((parameter) => parameter.name)
      draft.mutation = "param.bad-id"
      if (names.length === 0) {
        draft.path = draft.path + rng.pick(["/", "/x", "/%00", "/.."])
        draft.detail = `path ${draft.path.slice(0, 60)}`
        return
      }
      const name = rng.pick(names)
      // Ids of other kinds only: a stable id of the right kind could delete what later requests need.
      const otherKinds = Object.entries(fixtures.ids)
        .filter(([kind]) => kind !== kindOf(operation.path, name))
        .flatMap(([, pools]) => pools.stable)
      const id = rng.weighted<string>([
        [6, rng.pick(badIds)],
        [2, rng.pick(otherKinds)],
        [2, rng.pick(fixtures.foreignIds)],
        [1, Crypto.randomUUID()]
      ])
      // Rebuild from the template so the id lands in the right segment.
      const segments = operation.path.split("/")
      const current = draft.path.split("/")
      draft.path = segments.map((segment, i) => (segment === `{${name}}` ? id : current[i])).join("/")
      draft.detail = `${name}=${id.slice(0, 60)}`
    }
  ],
  [
    4,
    (draft, operation, fixtures, rng) => {
      const names = operation.parameters
        .filter((parameter) => parameter.in === "query")
        .map((parameter) => parameter.name)
      const name = names.length === 0 ? rng.pick(["limit", "cursor", "x"]) : rng.pick(names)
      const real = fixtures.cursors[operation.name] ?? []
      const tampered = real.length > 0 ? tamper(rng.pick(real), rng) : "AA"
      const value =
        name === "limit"
          ? rng.pick(badLimits)
          : name === "cursor"
            ? rng.pick([...badCursors, tampered, tampered, real[0] ?? "x"])
            : rng.pick([...badIds, "", "%00", rng.pick(Object.values(fixtures.ids).flatMap((pools) => pools.stable))])
      draft.query = draft.query.filter(([key]) => key !== name)
      draft.query.push([name, encodeURIComponent(decodeMaybe(value))])
      if (rng.chance(0.3)) draft.query.push([name, rng.pick(["1", "2", "x"])])
      draft.mutation = `param.bad-${name === "limit" || name === "cursor" ? name : "query"}`
      draft.detail = `${name}=${value.slice(0, 60)}`
    }
  ],
  [
    1,
    (draft, _operation, _fixtures, rng) => {
      const raw = rng.pick([
        "limit",
        "limit=",
        "=1",
        "%ZZ=1",
        "a=%ZZ",
        "&&&",
        "limit=1&limit=2",
        "cursor[]=x",
        "__proto__=x",
        "a=".padEnd(8000, "b")
      ])
      draft.query.push(
        ...raw.split("&").map((pair) => [pair.split("=")[0]!, pair.split("=").slice(1).join("=")] as const)
      )
      draft.mutation = "param.odd-query"
      draft.detail = raw.slice(0, 60)
    }
  ]
]

// Values are percent-encoded once on the way out; pre-encoded ones are decoded first.
const decodeMaybe = (value: string) => {
  try {
    return decodeURIComponent(value)
  } catch {
    return value
  }
}

/** A real cursor with a few characters changed, cut, or extended. */
const tamper = (cursor: string, rng: Rng) => {
  const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
  const chars = [...cursor]
  switch (rng.int(4)) {
    case 0:
      for (let i = 0; i < rng.between(1, 3); i++) chars[rng.int(chars.length)] = rng.pick([...alphabet])
      return chars.join("")
    case 1:
      return cursor.slice(0, rng.int(cursor.length))
    case 2:
      return cursor + rng.pick(["A", "AA", "=", "x".repeat(100)])
    default:
      return Buffer.from(`${Buffer.from(cursor, "base64url").toString("latin1").replace(/\d/, "9")}\u0000`).toString(
        "base64url"
      )
  }
}

const headerMutators: ReadonlyArray<readonly [number, Mutator]> = [
  [
    3,
    (draft, _operation, fixtures, rng) => {
      const pairs: ReadonlyArray<ReadonlyArray<readonly [string, string]>> = [
        [
          ["authorization", `Bearer ${fixtures.sessionToken}`],
          ["authorization", `Bearer ${fixtures.keys.bearer}`]
        ],
        [
          ["authorization", `Bearer ${fixtures.keys.bearer}`],
          ["authorization", "Bearer garbage"]
        ],
        [
          ["cookie", `session=${fixtures.sessionToken}`],
          ["cookie", "session=garbage"]
        ],
        [
          ["x-api-key", fixtures.keys.header],
          ["x-api-key", fixtures.keys.revoked]
        ],
        [
          ["idempotency-key", "one"],
          ["idempotency-key", "two"]
        ],
        [
          ["x-request-id", "a"],
          ["x-request-id", "b"]
        ],
        [
          ["stripe-signature", "t=1,v1=00"],
          ["stripe-signature", "t=2,v1=11"]
        ],
        [
          ["accept", "application/json"],
          ["accept", "text/html"]
        ]
      ]
      const pair = rng.pick(pairs)
      draft.headers.push(...pair)
      draft.mutation = "header.duplicate"
      draft.detail = `${pair[0]![0]} twice`
    }
  ],
  [
    2,
    (draft, _operation, _fixtures, rng) => {
      const type = rng.pick(["text/plain", "application/x-www-form-urlencoded", "application/json"])
      draft.headers.push(["content-type", type])
      draft.hasBody = true
      draft.mutation = "header.duplicate-content-type"
      draft.detail = `application/json and ${type}`
    }
  ],
  [
    3,
    (draft, _operation, _fixtures, rng) => {
      const header = rng.pick<readonly [string, string]>([
        ["x-request-id", "x".repeat(200)],
        ["x-request-id", "has spaces and ünïcode"],
        ["x-request-id", "\u00ff\u00fe"],
        ["accept", "text/html"],
        ["accept", "application/xml;q=0.9, */*;q=0.1"],
        ["accept-encoding", "br, gzip, deflate, zstd, x-unknown"],
        ["accept-charset", "latin1"],
        ["content-encoding", "gzip"],
        ["content-encoding", "br"],
        ["expect", "100-continue"],
        ["upgrade", "websocket"],
        ["origin", "https://evil.example"],
        ["range", "bytes=0-10"],
        ["if-none-match", "*"],
        ["traceparent", "00-zzzz-zzzz-01"],
        ["traceparent", `00-${"0".repeat(32)}-${"0".repeat(16)}-01`],
        ["x-forwarded-for", "1.1.1.1, ::1, garbage"],
        ["x-big", "v".repeat(8000)],
        ["idempotency-key", "k".repeat(500)],
        ["idempotency-key", ""],
        ["stripe-signature", `t=${"9".repeat(30)},v1=${"a".repeat(64)}`]
      ])
      draft.headers.push(header)
      draft.mutation = "header.odd"
      draft.detail = `${header[0]}: ${header[1].slice(0, 40)}`
    }
  ]
]

const methodMutator: Mutator = (draft, operation, fixtures, rng) => {
  draft.method = rng.pick(oddMethods)
  // A DELETE may land on a route that has one: aim it at expendable resources only.
  if (draft.method === "DELETE" && operation.method !== "DELETE") {
    draft.path = operation.path.replace(/\{(\w+)\}/g, (_, name: string) =>
      encodeURIComponent(pathId(operation, name, "DELETE", fixtures, rng))
    )
  }
  draft.mutation = "method"
  draft.detail = draft.method
}

const urlMutator: Mutator = (draft, _operation, _fixtures, rng) => {
  const path = draft.path
  draft.path = rng.pick([
    `/${path}`,
    `${path}/`,
    path.replace("/api", "/api/."),
    path.replace("/api", "/api/../api"),
    path.replace("/api/", "/api%2F"),
    path.toUpperCase(),
    `${path}%ZZ`,
    `${path}%`,
    `${path}%00`,
    `${path}/${"a".repeat(6000)}`,
    `${path};param`,
    `${path}#fragment`,
    path.replace(/\//g, "//"),
    `${path}/é`,
    `${path}?q=日本`,
    `${path}?q=%`
  ])
  draft.mutation = "url"
  draft.detail = draft.path.slice(0, 60)
}

const hostPlaceholder = "__fuzz_host__"

/** Requests whose framing is wrong: written byte for byte. */
const framings = [
  "content-length-short",
  "content-length-long",
  "content-length-junk",
  "content-length-duplicate",
  "chunked-and-length",
  "chunked-bad",
  "header-no-colon",
  "header-bad-name",
  "header-control-char",
  "header-obs-fold",
  "bare-lf",
  "http-1.0",
  "http-bad-version",
  "no-host",
  "two-hosts",
  "huge-header",
  "absolute-form",
  "asterisk-form",
  "garbage-line"
] as const

const rawRequest = (draft: Draft, host: string, framing: (typeof framings)[number]): Buffer => {
  const body = draft.bodyBytes ?? (draft.body === undefined ? Buffer.alloc(0) : Buffer.from(serialize(draft.body)))
  const target = targetOf(draft)
  const headers = [
    ...draft.headers,
    ...(draft.contentType === null ? [] : [["content-type", draft.contentType] as const])
  ].map(([name, value]) => `${name}: ${value}`)
  const lines = (
    requestLine: string,
    extra: ReadonlyArray<string>,
    hostLine: ReadonlyArray<string> = [`host: ${host}`]
  ) => `${[requestLine, ...hostLine, ...headers, ...extra, "connection: close"].join("\r\n")}\r\n\r\n`
  const line = `${draft.method} ${target} HTTP/1.1`
  const withBody = (head: string, payload: Buffer = body) => Buffer.concat([Buffer.from(head, "latin1"), payload])
  switch (framing) {
    case "content-length-short":
      return withBody(lines(line, [`content-length: ${Math.max(0, body.length - 3)}`]))
    case "content-length-long":
      return withBody(lines(line, [`content-length: ${body.length + 10}`]))
    case "content-length-junk":
      return withBody(lines(line, ["content-length: 12abc"]))
    case "content-length-duplicate":
      return withBody(lines(line, [`content-length: ${body.length}`, `content-length: ${body.length + 1}`]))
    case "chunked-and-length":
      return withBody(lines(line, ["transfer-encoding: chunked", `content-length: ${body.length}`]), chunked(body))
    case "chunked-bad":
      return withBody(
        lines(line, ["transfer-encoding: chunked"]),
        Buffer.concat([Buffer.from("zz\r\n"), body, Buffer.from("\r\n0\r\n\r\n")])
      )
    case "header-no-colon":
      return withBody(lines(line, ["no colon here", `content-length: ${body.length}`]))
    case "header-bad-name":
      return withBody(lines(line, ["bad name(): x", `content-length: ${body.length}`]))
    case "header-control-char":
      return withBody(lines(line, ["x-ctl: a\u0001b\u0000c", `content-length: ${body.length}`]))
    case "header-obs-fold":
      return withBody(lines(line, ["x-fold: a", " continued", `content-length: ${body.length}`]))
    case "bare-lf":
      return withBody(lines(line, [`content-length: ${body.length}`]).replace(/\r\n/g, "\n"))
    case "http-1.0":
      return withBody(lines(`${draft.method} ${target} HTTP/1.0`, [`content-length: ${body.length}`]))
    case "http-bad-version":
      return withBody(lines(`${draft.method} ${target} HTTP/9.9`, [`content-length: ${body.length}`]))
    case "no-host":
      return withBody(lines(line, [`content-length: ${body.length}`], []))
    case "two-hosts":
      return withBody(lines(line, [`content-length: ${body.length}`], [`host: ${host}`, "host: evil.example"]))
    case "huge-header":
      return withBody(lines(line, [`x-huge: ${"h".repeat(20_000)}`, `content-length: ${body.length}`]))
    case "absolute-form":
      return withBody(lines(`${draft.method} http://${host}${target} HTTP/1.1`, [`content-length: ${body.length}`]))
    case "asterisk-form":
      return withBody(lines(`${draft.method} * HTTP/1.1`, [`content-length: ${body.length}`]))
    case "garbage-line":
      return withBody(lines(`${draft.method}  ${target}  HTTP/1.1 extra`, [`content-length: ${body.length}`]))
  }
}

const chunked = (body: Buffer) =>
  Buffer.concat([Buffer.from(`${body.length.toString(16)}\r\n`), body, Buffer.from("\r\n0\r\n\r\n")])

const targetOf = (draft: Draft) =>
  draft.query.length === 0
    ? draft.path
    : `${draft.path}?${draft.query.map(([k, v]) => (v === "" && !k.includes("=") ? k : `${k}=${v}`)).join("&")}`

/**
 * Request `index` of run `seed`: an operation and a credential (cycling so
 * every pair comes up, every other round the credential the operation wants), a
 * valid request with real ids, then one kind of breakage (or none).
 */
export const generate = (
  operations: ReadonlyArray<Operation>,
  fixtures: Fixtures,
  seed: number,
  index: number
): FuzzRequest => {
  const rng = new Rng(requestSeed(seed, index))
  const operation = operations[index % operations.length]!
  // Even rounds walk the credential kinds (every pair within 2 x operations x kinds requests), odd rounds use the right one.
  const round = Math.floor(index / operations.length)
  const credential =
    round % 2 === 0 ? credentialKinds[(round / 2) % credentialKinds.length]! : rng.pick(credentialsFor(operation))
  const draft = baseDraft(operation, fixtures, rng)
  draft.headers.unshift(...credentialHeaders(credential, fixtures, rng))
  let framing: (typeof framings)[number] | undefined
  const family = rng.weighted<string>([
    [18, "valid"],
    [40, "body"],
    [7, "content-type"],
    [13, "param"],
    [10, "header"],
    [4, "method"],
    [3, "url"],
    [5, "framing"]
  ])
  switch (family) {
    case "body":
      rng.weighted(bodyMutators)(draft, operation, fixtures, rng)
      break
    case "content-type":
      contentTypeMutator(draft, operation, fixtures, rng)
      break
    case "param":
      rng.weighted(paramMutators)(draft, operation, fixtures, rng)
      break
    case "header":
      rng.weighted(headerMutators)(draft, operation, fixtures, rng)
      break
    case "method":
      methodMutator(draft, operation, fixtures, rng)
      break
    case "url":
      urlMutator(draft, operation, fixtures, rng)
      break
    case "framing":
      framing = rng.pick(framings)
      draft.mutation = `framing.${framing}`
      break
  }
  let body =
    draft.bodyBytes ?? (draft.hasBody && draft.body !== undefined ? Buffer.from(serialize(draft.body)) : undefined)
  if (draft.hasBody && body === undefined) body = Buffer.alloc(0)
  if (draft.sign && fixtures.stripeSecret !== undefined) {
    const timestamp = Math.floor(Date.now() / 1000)
    const signature = Crypto.createHmac("sha256", fixtures.stripeSecret)
      .update(`${timestamp}.`)
      .update(body ?? Buffer.alloc(0))
      .digest("hex")
    draft.headers.push(["stripe-signature", `t=${timestamp},v1=${signature}`])
  }
  const headers = [
    ...draft.headers,
    ...(draft.contentType === null || !draft.hasBody ? [] : [["content-type", draft.contentType] as const])
  ]
  return {
    index,
    operation: operation.name,
    credential,
    mutation: draft.mutation,
    detail: draft.detail,
    method: draft.method,
    target: targetOf(draft),
    headers,
    body,
    halfClose: framing === "content-length-long",
    raw:
      framing === undefined
        ? undefined
        : rawRequest({ ...draft, bodyBytes: body ?? Buffer.alloc(0), headers: draft.headers }, hostPlaceholder, framing)
  }
}

// ---------------------------------------------------------------------------
// Sending, raw over node:net
// ---------------------------------------------------------------------------

export interface Outcome {
  /** The status, or undefined when no response came. */
  readonly status: number | undefined
  readonly headers: ReadonlyArray<readonly [string, string]>
  readonly body: string
  readonly error: string | undefined
}

const encodeRequest = (request: FuzzRequest, host: string): Buffer => {
  if (request.raw !== undefined) {
    // The host is only known at send time.
    return Buffer.from(request.raw.toString("latin1").split(hostPlaceholder).join(host), "latin1")
  }
  const lines = [`${request.method} ${request.target} HTTP/1.1`, `host: ${host}`]
  for (const [name, value] of request.headers) lines.push(`${name}: ${value}`)
  if (request.body !== undefined) lines.push(`content-length: ${request.body.length}`)
  lines.push("connection: close")
  // Header values are sent as UTF-8 bytes, as a careless client would.
  return Buffer.concat([Buffer.from(`${lines.join("\r\n")}\r\n\r\n`, "utf8"), request.body ?? Buffer.alloc(0)])
}

/** Parses the first final response in `data` (skipping 1xx); undefined while incomplete. */
const parseResponse = (data: Buffer, ended: boolean): Omit<Outcome, "error"> | undefined => {
  let offset = 0
  for (;;) {
    const headEnd = data.indexOf("\r\n\r\n", offset)
    if (headEnd === -1) return undefined
    const head = data.subarray(offset, headEnd).toString("latin1").split("\r\n")
    const status = Number(head[0]!.split(" ")[1])
    const headers = head.slice(1).map((line) => {
      const colon = line.indexOf(":")
      return [line.slice(0, colon).trim().toLowerCase(), line.slice(colon + 1).trim()] as const
    })
    const rest = data.subarray(headEnd + 4)
    if (status >= 100 && status < 200) {
      offset = headEnd + 4
      continue
    }
    const header = (name: string) => headers.find(([key]) => key === name)?.[1]
    // An event stream stays open: its head is what is checked.
    if (header("content-type")?.startsWith("text/event-stream")) return { status, headers, body: "" }
    if (!ended) return undefined
    let body = rest
    if (header("transfer-encoding")?.toLowerCase() === "chunked") body = dechunk(rest)
    return { status, headers, body: body.toString("utf8") }
  }
}

const dechunk = (data: Buffer): Buffer => {
  const parts: Array<Buffer> = []
  let offset = 0
  for (;;) {
    const lineEnd = data.indexOf("\r\n", offset)
    if (lineEnd === -1) break
    const size = parseInt(data.subarray(offset, lineEnd).toString("latin1"), 16)
    if (!(size > 0)) break
    parts.push(data.subarray(lineEnd + 2, lineEnd + 2 + size))
    offset = lineEnd + 2 + size + 2
  }
  return Buffer.concat(parts)
}

export const send = (port: number, request: FuzzRequest, timeoutMs: number): Promise<Outcome> =>
  sendBytes(port, encodeRequest(request, `127.0.0.1:${port}`), timeoutMs, request.halfClose)

/** Writes the bytes on a new connection and reads the first final response. */
export const sendBytes = (port: number, bytes: Buffer, timeoutMs: number, halfClose = false): Promise<Outcome> =>
  new Promise((resolve) => {
    const chunks: Array<Buffer> = []
    let settled = false
    const socket = Net.connect({ host: "127.0.0.1", port })
    const finish = (ended: boolean, error?: string) => {
      if (settled) return
      const parsed = parseResponse(Buffer.concat(chunks), true)
      if (parsed === undefined && !ended) return
      settled = true
      clearTimeout(timer)
      socket.destroy()
      resolve(
        parsed === undefined
          ? {
              status: undefined,
              headers: [],
              body: Buffer.concat(chunks).toString("latin1").slice(0, 300),
              error: error ?? "connection closed without a response"
            }
          : { ...parsed, error: undefined }
      )
    }
    const timer = setTimeout(() => finish(true, `no response within ${timeoutMs} ms`), timeoutMs)
    socket.on("data", (chunk) => {
      chunks.push(chunk)
      const parsed = parseResponse(Buffer.concat(chunks), false)
      if (parsed !== undefined) finish(true)
    })
    socket.on("end", () => finish(true))
    socket.on("close", () => finish(true))
    // A server may answer and close before the whole body is written (413): the answer counts.
    socket.on("error", (error) => finish(true, error.message))
    if (halfClose) socket.end(bytes)
    else socket.write(bytes)
  })

// ---------------------------------------------------------------------------
// Checking and counting
// ---------------------------------------------------------------------------

/** Why an outcome breaks the contract, or undefined when it keeps it. */
export const violation = (request: FuzzRequest, outcome: Outcome): string | undefined => {
  if (outcome.status === undefined) return outcome.error ?? "no response"
  if (outcome.status >= 500) return `${outcome.status}`
  if (outcome.status < 400) return undefined
  const contentType = outcome.headers.find(([name]) => name === "content-type")?.[1]
  if (contentType?.split(";")[0]?.trim() !== "application/problem+json") {
    return `${outcome.status} with content-type ${contentType ?? "(none)"}`
  }
  if (request.method === "HEAD") return undefined
  let body: any
  try {
    body = JSON.parse(outcome.body)
  } catch {
    return `${outcome.status} with a body that is not JSON`
  }
  if (typeof body?.type !== "string" || typeof body?.title !== "string" || body?.status !== outcome.status) {
    return `${outcome.status} without type/title/status`
  }
  return undefined
}

export interface Failure {
  readonly request: FuzzRequest
  readonly outcome: Outcome
  readonly reason: string
}

export interface Report {
  readonly seed: number
  readonly requests: number
  readonly durationMs: number
  readonly byStatus: Record<string, number>
  readonly byRoute: Record<string, Record<string, number>>
  readonly failures: ReadonlyArray<Failure>
  /** `operation [credential]` pairs that no request tried. */
  readonly untried: ReadonlyArray<string>
  /** The slowest requests, slowest first. */
  readonly slowest: ReadonlyArray<{ readonly request: FuzzRequest; readonly ms: number; readonly status: string }>
}

export interface RunOptions {
  readonly baseUrl: string
  readonly seed: number
  /** How many requests; default: enough for every operation to meet every kind of credential (2 x operations x kinds). */
  readonly requests?: number | undefined
  readonly concurrency?: number
  readonly timeoutMs?: number
  readonly fixtures: Fixtures
}

/** Reads the document from the running service and sends `requests` generated requests. */
export const run = async (options: RunOptions): Promise<Report> => {
  const startedAt = performance.now()
  const document = await (await fetch(`${options.baseUrl}/openapi.json`)).json()
  const operations = operationsOf(document)
  const requests = options.requests ?? 2 * operations.length * credentialKinds.length
  const port = Number(new URL(options.baseUrl).port)
  const byStatus: Record<string, number> = {}
  const byRoute: Record<string, Record<string, number>> = {}
  const failures: Array<Failure> = []
  const slowest: Array<{ readonly request: FuzzRequest; readonly ms: number; readonly status: string }> = []
  const tried = new Set<string>()
  let next = 0
  const worker = async () => {
    while (next < requests) {
      const index = next++
      let request = generate(operations, options.fixtures, options.seed, index)
      // Logging out ends the session it is called with: give it one of its own.
      if (
        request.operation.endsWith("/logout") &&
        request.headers.some(([, value]) => value.includes(options.fixtures.sessionToken))
      ) {
        request = await withFreshSession(options.baseUrl, options.fixtures, request)
      }
      tried.add(`${request.operation} [${request.credential}]`)
      const sentAt = performance.now()
      const outcome = await send(port, request, options.timeoutMs ?? 20_000)
      const status = outcome.status === undefined ? "none" : String(outcome.status)
      slowest.push({ request, ms: performance.now() - sentAt, status })
      slowest.sort((a, b) => b.ms - a.ms).splice(10)
      byStatus[status] = (byStatus[status] ?? 0) + 1
      const route = (byRoute[request.operation] ??= {})
      route[status] = (route[status] ?? 0) + 1
      const reason = violation(request, outcome)
      if (reason !== undefined) failures.push({ request, outcome, reason })
    }
  }
  await Promise.all(Array.from({ length: options.concurrency ?? 4 }, worker))
  const untried = operations.flatMap((operation) =>
    credentialKinds
      .filter((credential) => !tried.has(`${operation.name} [${credential}]`))
      .map((credential) => `${operation.name} [${credential}]`)
  )
  return {
    seed: options.seed,
    requests,
    durationMs: performance.now() - startedAt,
    byStatus,
    byRoute,
    failures,
    untried,
    slowest
  }
}

const withFreshSession = async (baseUrl: string, fixtures: Fixtures, request: FuzzRequest): Promise<FuzzRequest> => {
  const login = await json(baseUrl, "POST", "/api/auth/login", { email: fixtures.email, password: fixtures.password })
  const token = login.body.token as string
  const swap = (value: string) => value.split(fixtures.sessionToken).join(token)
  return {
    ...request,
    headers: request.headers.map(([name, value]) => [name, swap(value)] as const),
    raw: request.raw === undefined ? undefined : Buffer.from(swap(request.raw.toString("latin1")), "latin1")
  }
}

/** Failures grouped by cause: operation, kind of breakage and what came back. */
export const distinctFailures = (failures: ReadonlyArray<Failure>) => {
  const groups = new Map<string, { count: number; readonly routes: Set<string>; readonly example: Failure }>()
  for (const failure of failures) {
    const key = `${failure.request.mutation} -> ${failure.reason}`
    const group = groups.get(key) ?? { count: 0, routes: new Set(), example: failure }
    group.count++
    group.routes.add(failure.request.operation)
    groups.set(key, group)
  }
  return [...groups.entries()].map(([key, group]) => ({ key, ...group }))
}

const describe = (request: FuzzRequest) =>
  `#${request.index} ${request.method} ${request.target.slice(0, 120)} [${request.credential}] ${request.mutation}${request.detail === "" ? "" : ` (${request.detail})`}`

export const formatFailures = (report: Report, limit = 40): string => {
  const groups = distinctFailures(report.failures)
  const lines = [
    `${report.failures.length} of ${report.requests} fuzz requests broke the contract, ${groups.length} distinct (FUZZ_SEED=${report.seed} reproduces them):`
  ]
  for (const group of groups.slice(0, limit)) {
    lines.push(`- ${group.key} ×${group.count} on ${[...group.routes].join(", ")}`)
    lines.push(
      `    e.g. ${describe(group.example.request)} -> ${group.example.outcome.body.slice(0, 200).replace(/\s+/g, " ")}`
    )
  }
  if (groups.length > limit) lines.push(`... and ${groups.length - limit} more`)
  return lines.join("\n")
}

export const formatCounts = (report: Report): string => {
  const statuses = (counts: Record<string, number>) =>
    Object.entries(counts)
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([status, count]) => `${status}: ${count}`)
      .join(", ")
  const lines = [
    `${report.requests} requests in ${(report.durationMs / 1000).toFixed(1)} s (FUZZ_SEED=${report.seed})`,
    `by status: ${statuses(report.byStatus)}`,
    "by route:"
  ]
  for (const [route, counts] of Object.entries(report.byRoute).sort(([a], [b]) => a.localeCompare(b))) {
    lines.push(`  ${route.padEnd(62)} ${statuses(counts)}`)
  }
  lines.push("slowest:")
  for (const { request, ms, status } of report.slowest)
    lines.push(`  ${Math.round(ms)} ms ${status} ${describe(request)}`)
  return lines.join("\n")
}
