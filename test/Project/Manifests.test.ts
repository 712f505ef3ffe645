import { assert, describe, it } from "@effect/vitest"
import { ConfigProvider, Effect, Option, Result } from "effect"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { type AppSettings, settingsConfig } from "../../src/Config.ts"

// The shipped Kubernetes manifests, read as Kubernetes reads them, checked
// against the settings the service runs with in the pod.

const k8sDir = Path.join(import.meta.dirname, "../../infra/k8s")

// ---------------------------------------------------------------------------
// A strict reader for the YAML the manifests use: block mappings and
// sequences, plain and quoted scalars, flow sequences of scalars, `{}` and
// comments. Anything else (anchors, aliases, tags, block scalars, several
// documents, tabs) is refused, so a manifest this reader misreads fails here
// instead of passing unchecked.
// ---------------------------------------------------------------------------

type Yaml = string | number | boolean | null | ReadonlyArray<Yaml> | { readonly [key: string]: Yaml }

interface Line {
  readonly indent: number
  readonly text: string
  readonly number: number
}

const refuse = (line: Line | undefined, why: string): never => {
  throw new Error(`YAML line ${line?.number ?? "end"}: ${why}${line === undefined ? "" : ` (${line.text})`}`)
}

/** The line without its comment: `#` at the start or after a blank, outside quotes. */
const stripComment = (text: string): string => {
  let quote: string | undefined
  for (let i = 0; i < text.length; i++) {
    const char = text[i]!
    if (quote !== undefined) {
      if (char === "\\" && quote === '"') i++
      else if (char === quote) quote = undefined
    } else if (char === '"' || char === "'") {
      quote = char
    } else if (char === "#" && (i === 0 || text[i - 1] === " ")) {
      return text.slice(0, i).trimEnd()
    }
  }
  return text.trimEnd()
}

const scalar = (raw: string, line: Line): Yaml => {
  const value = raw.trim()
  if (value.startsWith('"')) {
    if (!/^"(?:[^"\\]|\\.)*"$/.test(value)) refuse(line, "unterminated or trailing text after a quoted string")
    return JSON.parse(value) as string
  }
  if (value.startsWith("'")) {
    if (!/^'(?:[^']|'')*'$/.test(value)) refuse(line, "unterminated or trailing text after a quoted string")
    return value.slice(1, -1).replaceAll("''", "'")
  }
  if (value === "{}") return {}
  if (value.startsWith("[")) {
    if (!value.endsWith("]")) refuse(line, "a flow sequence must end on its line")
    const inner = value.slice(1, -1).trim()
    if (inner === "") return []
    const items = inner.match(/"(?:[^"\\]|\\.)*"|'(?:[^']|'')*'|[^,]+/g) ?? []
    const rest = inner.replace(/"(?:[^"\\]|\\.)*"|'(?:[^']|'')*'|[^,]+/g, "").replace(/\s*,\s*/g, "")
    if (rest !== "") refuse(line, "unsupported flow sequence")
    return items.map((item) => scalar(item, line))
  }
  if (/^[&*!|>{@`%]/.test(value) || value === "---")
    refuse(line, "unsupported YAML (anchor, alias, tag, block scalar or flow map)")
  if (value === "true") return true
  if (value === "false") return false
  if (value === "null" || value === "~") return null
  if (/^-?\d+$/.test(value)) return Number(value)
  return value
}

const keyed = /^([A-Za-z0-9_./-]+):(?:\s+(.*))?$/

const readYaml = (source: string): Yaml => {
  const lines: Array<Line> = []
  source.split("\n").forEach((raw, index) => {
    if (raw.includes("\t")) refuse({ indent: 0, text: raw, number: index + 1 }, "tab")
    const text = stripComment(raw)
    if (text.trim() === "") return
    const line = { indent: text.length - text.trimStart().length, text: text.trim(), number: index + 1 }
    if (line.text === "---" || line.text === "...") refuse(line, "one document per file")
    lines.push(line)
  })
  let at = 0

  // A block (mapping or sequence) whose entries start at exactly `indent`.
  const block = (indent: number): Yaml => {
    const first = lines[at]
    if (first === undefined || first.indent !== indent) return refuse(first, `expected a block at column ${indent}`)
    return first.text === "-" || first.text.startsWith("- ") ? sequence(indent) : mapping(indent)
  }

  // The value after `key:` with nothing on its line: a deeper block, or a sequence at the key's own column.
  const nested = (indent: number, line: Line): Yaml => {
    const next = lines[at]
    if (next !== undefined && next.indent > indent) return block(next.indent)
    if (next !== undefined && next.indent === indent && next.text.startsWith("- ")) return sequence(indent)
    return refuse(line, "a key without a value")
  }

  const mapping = (indent: number, firstEntry?: { readonly text: string; readonly line: Line }): Yaml => {
    const result: Record<string, Yaml> = {}
    const entry = (text: string, line: Line) => {
      const match = keyed.exec(text)
      if (match === null) return refuse(line, "expected `key: value`")
      const key = match[1]!
      if (key === "<<") refuse(line, "merge keys")
      if (Object.hasOwn(result, key)) refuse(line, `duplicate key ${key}`)
      const value = match[2]
      result[key] = value === undefined || value === "" ? nested(indent, line) : scalar(value, line)
    }
    if (firstEntry !== undefined) entry(firstEntry.text, firstEntry.line)
    while (at < lines.length && lines[at]!.indent === indent && !lines[at]!.text.startsWith("- ")) {
      const line = lines[at++]!
      entry(line.text, line)
    }
    if (at < lines.length && lines[at]!.indent > indent) refuse(lines[at], "unexpected indentation")
    return result
  }

  const sequence = (indent: number): Yaml => {
    const result: Array<Yaml> = []
    while (
      at < lines.length &&
      lines[at]!.indent === indent &&
      (lines[at]!.text.startsWith("- ") || lines[at]!.text === "-")
    ) {
      const line = lines[at++]!
      const rest = line.text.slice(1).trimStart()
      if (rest === "") result.push(nested(indent, line))
      // `- key: value` opens a mapping whose keys line up two columns right of the dash.
      else if (keyed.test(rest)) result.push(mapping(indent + line.text.indexOf(rest), { text: rest, line }))
      else result.push(scalar(rest, line))
    }
    if (at < lines.length && lines[at]!.indent > indent) refuse(lines[at], "unexpected indentation")
    return result
  }

  const document = block(0)
  if (at !== lines.length) refuse(lines[at], "trailing content")
  return document
}

// ---------------------------------------------------------------------------
// Helpers over the read manifests
// ---------------------------------------------------------------------------

type Node = { readonly [key: string]: any }

const read = (file: string): Node => readYaml(Fs.readFileSync(Path.join(k8sDir, file), "utf8")) as Node

const kustomization = read("kustomization.yaml")
const resources: ReadonlyArray<Node> = (kustomization.resources as Array<string>).map(read)
const ofKind = (kind: string): Array<Node> => resources.filter((resource) => resource.kind === kind)
const deployment = ofKind("Deployment")[0]!
const pod = deployment.spec.template.spec
const container: Node = pod.containers.find((candidate: Node) => candidate.name === "agent-host")
const env: Array<Node> = container.env
const envNamed = (name: string): Node | undefined => env.find((variable) => variable.name === name)

// Kubernetes quantities (`1Gi`, `512Mi`, `500M`) in bytes.
const bytes = (quantity: string | number): number => {
  const match = /^(\d+)(Ki|Mi|Gi|Ti|k|M|G|T)?$/.exec(String(quantity))
  if (match === null) throw new Error(`not a quantity: ${quantity}`)
  const unit = { "": 1, Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, k: 1e3, M: 1e6, G: 1e9, T: 1e12 }[
    match[2] ?? ""
  ]!
  return Number(match[1]) * unit
}

const podIp = "10.42.0.17"

/**
 * The environment the container starts with, as the kubelet renders it:
 * literal values with `$(VAR)` of earlier variables expanded, the downward
 * API's pod IP, and stand-ins for values from the Secret.
 */
const renderedEnv = (secret: Record<string, string>): Record<string, string> => {
  const rendered: Record<string, string> = {}
  for (const variable of env) {
    if (variable.value !== undefined) {
      rendered[variable.name] = String(variable.value).replace(
        /\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g,
        (whole, name: string) => rendered[name] ?? whole
      )
    } else if (variable.valueFrom?.fieldRef?.fieldPath === "status.podIP") {
      rendered[variable.name] = podIp
    } else if (variable.valueFrom?.secretKeyRef !== undefined) {
      const value = secret[variable.valueFrom.secretKeyRef.key]
      if (value !== undefined) rendered[variable.name] = value
    } else if (variable.valueFrom?.fieldRef !== undefined) {
      rendered[variable.name] = "from-the-pod"
    }
  }
  return rendered
}

// What the Secret holds in a working deployment (envFrom gives the pod all of it).
const secretValues = {
  DATABASE_URL: "postgres://user:password@db.example:5432/agent_host",
  WEBHOOK_SECRET_KEY: "dGVzdC1vbmx5LXdlYmhvb2stc2VjcmV0LWtleS0zMmI=",
  RUNNER_SECRET: "dGVzdC1vbmx5LXJ1bm5lci1zZWNyZXQta2V5LTMyYnk="
}

const podSettings = (): AppSettings => {
  const parsed = Effect.runSync(
    Effect.result(
      settingsConfig.parse(ConfigProvider.fromEnv({ env: { ...secretValues, ...renderedEnv(secretValues) } }))
    )
  )
  if (Result.isFailure(parsed)) throw new Error(`the pod's settings do not parse: ${String(parsed.failure)}`)
  return parsed.success
}

/** The most one upload's request body may spool to disk (the upload route's body limit, RequestPipeline.ts). */
const uploadSpoolBytes = (settings: AppSettings) =>
  Math.max(settings.maxBodyBytes, Math.ceil((settings.maxUploadBytes * 4) / 3) + 64 * 1024)

// Uploads at their largest that /tmp must hold at once (deployment.yaml's comment on the volume says so).
const uploadsAtOnce = 24

// The service's memory besides its V8 heap (code, buffers, stacks), at least.
const nonHeapBytes = 128 * 2 ** 20

describe("the Kubernetes manifests", () => {
  it("the reader refuses what it does not understand and reads what the manifests use", () => {
    assert.deepStrictEqual(
      readYaml('a:\n  b: "x # y" # comment\n  c:\n    - d: 1\n      e: ["f", g]\n    - h\n  i: {}\nj:\n- true\n'),
      { a: { b: "x # y", c: [{ d: 1, e: ["f", "g"] }, "h"], i: {} }, j: [true] }
    )
    for (const bad of [
      "a: &x 1\n",
      "a: *x\n",
      "a: |\n  text\n",
      "a: 1\n---\nb: 2\n",
      "a: 1\na: 2\n",
      "a:\n\tb: 1\n",
      "a: 1\n  b: 2\n"
    ]) {
      assert.throws(() => readYaml(bad), /YAML line/, JSON.stringify(bad))
    }
  })

  it("the kustomization applies the Deployment, Services, NetworkPolicy and budget, never the example Secret", () => {
    assert.deepStrictEqual(resources.map((resource) => resource.kind).sort(), [
      "Deployment",
      "NetworkPolicy",
      "PodDisruptionBudget",
      "Service",
      "Service"
    ])
    assert.notInclude(kustomization.resources, "secret.example.yaml")
  })

  it("the pod's environment parses into the service's settings", () => {
    const settings = podSettings()
    assert.isTrue(Option.isSome(settings.webhookSecretKey))
    assert.isTrue(Option.isSome(settings.databaseUrl))
  })

  it("WEBHOOK_SECRET_KEY comes from the Secret and is required; the example Secret has it, and its placeholder is refused", () => {
    const secretName = container.envFrom.find((source: Node) => source.secretRef !== undefined).secretRef.name
    const key = envNamed("WEBHOOK_SECRET_KEY")
    assert.isDefined(key)
    assert.isUndefined(key!.value)
    assert.deepStrictEqual(key!.valueFrom, { secretKeyRef: { name: secretName, key: "WEBHOOK_SECRET_KEY" } })
    // Without the key in the Secret, the pod does not start (rather than each replica making its own).
    assert.notStrictEqual(key!.valueFrom.secretKeyRef.optional, true)

    const example = read("secret.example.yaml")
    assert.strictEqual(example.metadata.name, secretName)
    assert.containsAllKeys(example.stringData, ["DATABASE_URL", "WEBHOOK_SECRET_KEY"])
    const withPlaceholder = Effect.runSync(
      Effect.result(
        settingsConfig.parse(
          ConfigProvider.fromEnv({ env: { WEBHOOK_SECRET_KEY: example.stringData.WEBHOOK_SECRET_KEY } })
        )
      )
    )
    assert.isTrue(Result.isFailure(withPlaceholder))
  })

  it("RUNNER_SECRET comes from the Secret and is required; the example's placeholder is refused", () => {
    const secretName = container.envFrom.find((source: Node) => source.secretRef !== undefined).secretRef.name
    const runnerSecret = envNamed("RUNNER_SECRET")
    assert.deepStrictEqual(runnerSecret?.valueFrom, { secretKeyRef: { name: secretName, key: "RUNNER_SECRET" } })
    assert.isTrue(Option.isSome(podSettings().runnerCredential))
    const example = read("secret.example.yaml")
    assert.containsAllKeys(example.stringData, ["RUNNER_SECRET"])
    const withPlaceholder = Effect.runSync(
      Effect.result(
        settingsConfig.parse(ConfigProvider.fromEnv({ env: { RUNNER_SECRET: example.stringData.RUNNER_SECRET } }))
      )
    )
    assert.isTrue(Result.isFailure(withPlaceholder))
  })

  it("the runner binds to and advertises the pod's IP, never every interface", () => {
    const settings = podSettings()
    assert.strictEqual(envNamed("POD_IP")?.valueFrom?.fieldRef?.fieldPath, "status.podIP")
    // $(POD_IP) expands only when POD_IP is defined earlier in the list.
    const index = (name: string) => env.findIndex((variable) => variable.name === name)
    assert.isBelow(index("POD_IP"), index("RUNNER_LISTEN"))
    assert.isBelow(index("POD_IP"), index("RUNNER_ADDRESS"))
    assert.deepStrictEqual(Option.getOrUndefined(settings.runnerListen), { host: podIp, port: 34431 })
    assert.deepStrictEqual(Option.getOrUndefined(settings.runnerAddress), { host: podIp, port: 34431 })
  })

  it("the root filesystem is read-only and /tmp is a writable volume that holds the uploads spooled at once", () => {
    const settings = podSettings()
    assert.strictEqual(container.securityContext.readOnlyRootFilesystem, true)
    const mount = (container.volumeMounts as Array<Node>).find((candidate) => candidate.mountPath === "/tmp")
    assert.isDefined(mount)
    assert.notStrictEqual(mount!.readOnly, true)
    const volume = (pod.volumes as Array<Node>).find((candidate) => candidate.name === mount!.name)
    assert.isDefined(volume?.emptyDir)
    // Defaults: 25 MiB files, so a body of about 33.4 MiB each.
    assert.strictEqual(settings.maxUploadBytes, 25 * 2 ** 20)
    const needed = uploadsAtOnce * uploadSpoolBytes(settings)
    assert.isAtLeast(bytes(volume!.emptyDir.sizeLimit), needed)
    assert.isAtLeast(bytes(container.resources.requests["ephemeral-storage"]), needed)
  })

  it("the memory limit holds the service's heap and every extraction child at its limit", () => {
    const settings = podSettings()
    const heapMiB = /--max-old-space-size=(\d+)/.exec(envNamed("NODE_OPTIONS")?.value ?? "")
    assert.isNotNull(heapMiB, "NODE_OPTIONS caps the V8 heap")
    assert.strictEqual(settings.extractionConcurrency, 1)
    assert.strictEqual(settings.extractionMemoryMb, 384)
    const needed =
      Number(heapMiB![1]) * 2 ** 20 + nonHeapBytes + settings.extractionConcurrency * settings.extractionMemoryMb * 1e6
    assert.isAtLeast(bytes(container.resources.limits.memory), needed)
    assert.isAtMost(bytes(container.resources.requests.memory), bytes(container.resources.limits.memory))
  })

  it("metrics are not exposed: no token in the manifests, no metrics port, and the runner port only from the service's pods", () => {
    const settings = podSettings()
    // Without a token from the Secret, /metrics answers only loopback requests (MetricsHttp.ts).
    assert.isTrue(Option.isNone(settings.metricsToken))
    const token = envNamed("METRICS_TOKEN")
    if (token !== undefined) assert.isDefined(token.valueFrom?.secretKeyRef, "METRICS_TOKEN only from the Secret")
    assert.notStrictEqual(renderedEnv({}).METRICS_ENABLED, "false")

    const containerPorts = (container.ports as Array<Node>).map((port) => port.name).sort()
    assert.deepStrictEqual(containerPorts, ["http", "runner"])
    for (const service of ofKind("Service")) {
      for (const port of service.spec.ports as Array<Node>) {
        assert.include(["http", "runner"], port.targetPort, service.metadata.name)
      }
      assert.notStrictEqual(service.spec.type, "LoadBalancer")
      assert.notStrictEqual(service.spec.type, "NodePort")
    }
    assert.isUndefined(deployment.spec.template.metadata.annotations?.["prometheus.io/scrape"])

    const policy = ofKind("NetworkPolicy")[0]!
    assert.deepStrictEqual(policy.spec.podSelector, deployment.spec.selector)
    const runnerRules = (policy.spec.ingress as Array<Node>).filter((rule) =>
      (rule.ports as Array<Node>).some((port) => port.port === "runner" || port.port === 34431)
    )
    assert.strictEqual(runnerRules.length, 1)
    assert.deepStrictEqual(runnerRules[0]!.from, [{ podSelector: deployment.spec.selector }])
  })
})

describe("the Compose file", () => {
  const compose = Fs.readFileSync(Path.join(import.meta.dirname, "../../infra/compose.yaml"), "utf8")
  it("binds no runner to every interface, publishes only the HTTP port, shares one webhook key and a metrics token", () => {
    assert.notMatch(compose, /RUNNER_LISTEN:\s*0\.0\.0\.0/)
    const published = [...compose.matchAll(/-\s*"(\d+):(\d+)"/g)].map((match) => match[2])
    assert.include(published, "3000")
    assert.notInclude(published, "34431")
    assert.match(compose, /^ {2}WEBHOOK_SECRET_KEY: \S+$/m)
    assert.match(compose, /^ {2}RUNNER_SECRET: \S+$/m)
    assert.match(compose, /^ {2}METRICS_TOKEN: &metrics-token \S+$/m)
    const collector = Fs.readFileSync(Path.join(import.meta.dirname, "../../infra/otel-collector.yaml"), "utf8")
    assert.match(collector, /credentials: \$\{env:METRICS_TOKEN\}/)
  })
})
