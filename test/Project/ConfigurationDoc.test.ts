import { assert, describe, it } from "@effect/vitest"
import * as Fs from "node:fs"
import * as Path from "node:path"

// docs/configuration.md lists every setting the service reads, and the
// manual's links lead somewhere: both drift silently otherwise.

const root = Path.resolve(import.meta.dirname, "..", "..")
const read = (file: string) => Fs.readFileSync(Path.join(root, file), "utf8")

const withoutComments = (source: string) => source.replace(/\/\*[\s\S]*?\*\//g, "").replace(/^\s*\/\/.*$/gm, "")

const settingName = /^[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*$/

/**
 * The environment variables src/Config.ts reads: every upper-case string
 * passed to a call (`Config.Int("PORT")`, `flag("COOKIE_SECURE")`,
 * `Config.schema(schema, "CLUSTER_STORAGE")`), and for the helpers that
 * build names from a prefix (`planQuotas("FREE", ...)` with `quotaVariables`,
 * `teamLimits("PRO", ...)` with `${plan}_TEAM_MAX_TURNS`), each name they build.
 */
export const configNames = (configSource: string): Set<string> => {
  const source = withoutComments(configSource)
  const objects = new Map<string, Array<string>>()
  for (const match of source.matchAll(/const (\w+)\b[^=\n]*=\s*\{([\s\S]*?)\n\}/g)) {
    objects.set(
      match[1]!,
      [...match[2]!.matchAll(/:\s*"([A-Z0-9_]+)"/g)].map((value) => value[1]!)
    )
  }
  // A helper whose first parameter is a prefix: the suffixes its templates add to it.
  const prefixed = new Map<string, Array<string>>()
  for (const match of source.matchAll(/^(?:export )?const (\w+) = (?:<[^>]*>)?\(\s*(\w+)\s*:\s*string/gm)) {
    const start = match.index
    const rest = source.slice(start + match[0].length)
    const end = rest.search(/^(?:export |const |let |function |type |interface )/m)
    const body = end === -1 ? rest : rest.slice(0, end)
    const parameter = match[2]!
    const suffixes: Array<string> = []
    for (const template of body.matchAll(/`\$\{(\w+)\}_([A-Z0-9_]+)`/g)) {
      if (template[1] === parameter) suffixes.push(template[2]!)
    }
    for (const template of body.matchAll(/`\$\{(\w+)\}_\$\{(\w+)\[\w+\]\}`/g)) {
      if (template[1] === parameter) suffixes.push(...(objects.get(template[2]!) ?? []))
    }
    if (suffixes.length > 0) prefixed.set(match[1]!, suffixes)
  }
  const names = new Set<string>()
  for (const match of source.matchAll(/\b(\w+)\(\s*"([A-Z][A-Z0-9_]*)"/g)) {
    const suffixes = prefixed.get(match[1]!)
    if (suffixes === undefined) names.add(match[2]!)
    else for (const suffix of suffixes) names.add(`${match[2]}_${suffix}`)
  }
  for (const match of source.matchAll(/,\s*"([A-Z][A-Z0-9_]*)"\s*\)/g)) names.add(match[1]!)
  return new Set([...names].filter((name) => settingName.test(name)))
}

/** Variables read by name anywhere else in src/ (`process.env.NAME`, `process.env["NAME"]`). */
const envNamesElsewhere = (): Set<string> => {
  const names = new Set<string>()
  const files = Fs.readdirSync(Path.join(root, "src"), { recursive: true, encoding: "utf8" }).filter(
    (file) => file.endsWith(".ts") && file !== "Config.ts"
  )
  for (const file of files) {
    const text = withoutComments(read(Path.join("src", file)))
    for (const match of text.matchAll(/process\.env(?:\.([A-Z][A-Z0-9_]*)|\[\s*"([A-Z][A-Z0-9_]*)"\s*\])/g)) {
      names.add(match[1] ?? match[2]!)
    }
  }
  return names
}

// The OS's own variables, read as PostgreSQL's clients read them (a database
// name defaults to the user's): not settings of the service.
const fromTheOs = new Set(["USER", "USERNAME"])

// Read by effect itself, not by src/: each is checked against effect's source.
const readByEffect = new Map([["OTEL_RESOURCE_ATTRIBUTES", "node_modules/effect/src/observability/OtlpResource.ts"]])

const developmentHeading = "## Tests and benchmarks"

/** The names in the first cell of each table row, per part of the page: the service's settings, and the development ones. */
export const documentedNames = (doc: string) => {
  const cut = doc.indexOf(developmentHeading)
  const rowsOf = (text: string) => {
    const names: Array<string> = []
    for (const line of text.split("\n")) {
      if (!line.startsWith("|")) continue
      const firstCell = line.split("|")[1] ?? ""
      for (const match of firstCell.matchAll(/`([^`]+)`/g)) {
        if (settingName.test(match[1]!)) names.push(match[1]!)
      }
    }
    return names
  }
  return {
    service: rowsOf(cut === -1 ? doc : doc.slice(0, cut)),
    development: cut === -1 ? [] : rowsOf(doc.slice(cut))
  }
}

const difference = (a: Iterable<string>, b: Set<string>) => [...a].filter((name) => !b.has(name)).sort()

const duplicates = (names: ReadonlyArray<string>) => [...new Set(names.filter((name, i) => names.indexOf(name) !== i))]

/** GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens. */
const slug = (heading: string) =>
  heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, "")
    .replace(/\s/g, "-")

const anchorsOf = (markdown: string): Set<string> => {
  const anchors = new Set<string>()
  const seen = new Map<string, number>()
  let fenced = false
  for (const line of markdown.split("\n")) {
    if (/^\s*```/.test(line)) fenced = !fenced
    const heading = fenced ? null : /^#{1,6}\s+(.*)$/.exec(line)
    if (heading === null) continue
    const base = slug(heading[1]!.replace(/`/g, ""))
    const count = seen.get(base) ?? 0
    seen.set(base, count + 1)
    anchors.add(count === 0 ? base : `${base}-${count}`)
  }
  return anchors
}

/** Relative links of a markdown file (its path and text) that lead to no file, or to no heading of it. */
const brokenLinks = (file: string, markdown: string): Array<string> => {
  const text = markdown.replace(/^\s*```[\s\S]*?^\s*```/gm, "").replace(/`[^`\n]*`/g, "")
  const broken: Array<string> = []
  for (const match of text.matchAll(/!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) {
    const target = match[1]!
    if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue
    const [path, anchor] = target.split("#") as [string, string | undefined]
    const resolved = path === "" ? Path.join(root, file) : Path.resolve(Path.dirname(Path.join(root, file)), path)
    if (!Fs.existsSync(resolved)) {
      broken.push(`${file}: ${target} (no such file)`)
      continue
    }
    if (anchor !== undefined && resolved.endsWith(".md") && !anchorsOf(Fs.readFileSync(resolved, "utf8")).has(anchor)) {
      broken.push(`${file}: ${target} (no such heading)`)
    }
  }
  return broken
}

describe("docs/configuration.md", () => {
  const config = configNames(read("src/Config.ts"))
  const doc = read("docs/configuration.md")
  const documented = documentedNames(doc)

  it("the extraction sees the settings of every helper of src/Config.ts", () => {
    for (const name of [
      "PORT",
      "DATABASE_URL",
      "COOKIE_SECURE",
      "LOG_LEVEL",
      "CLUSTER_STORAGE",
      "RUNNER_ADDRESS",
      "RUNNER_SECRET",
      "RUNNER_TLS_CA_FILE",
      "WEBHOOK_RETRY_SCHEDULE",
      "WEBHOOK_ALLOWED_PORTS",
      "METRICS_MODELS",
      "FREE_MODELS",
      "DEFAULT_MODEL",
      "REJECTED_CREDENTIALS_CACHE_SIZE",
      "FREE_MAX_KNOWLEDGE_BASES",
      "BUSINESS_MAX_WEBHOOK_ENDPOINTS",
      "PRO_TEAM_TOKEN_BUDGET",
      "BUSINESS_TEAM_TIMEOUT"
    ]) {
      assert.isTrue(config.has(name), `${name} not found in src/Config.ts`)
    }
    // Prefixes and quota suffixes are not settings by themselves.
    for (const part of ["FREE", "PRO", "BUSINESS", "MAX_AGENTS", "MAX_CHUNKS"]) {
      assert.isFalse(config.has(part), `${part} taken for a setting`)
    }
    assert.isAbove(config.size, 120)
  })

  it("lists exactly the settings the service reads", () => {
    const reads = new Set([...config, ...difference(envNamesElsewhere(), fromTheOs), ...readByEffect.keys()])
    const listed = new Set(documented.service)
    assert.deepStrictEqual(
      { missingFromTheDoc: difference(reads, listed), notReadByTheService: difference(listed, reads) },
      { missingFromTheDoc: [], notReadByTheService: [] }
    )
    assert.deepStrictEqual(duplicates(documented.service), [], "listed twice")
    for (const [name, file] of readByEffect)
      assert.include(read(file), `"${name}"`, `${name} is no longer read by effect`)
  })

  it("lists only development variables some test or bench reads", () => {
    assert.isAbove(documented.development.length, 5)
    const sources = ["test", "bench"]
      .flatMap((dir) =>
        Fs.readdirSync(Path.join(root, dir), { recursive: true, encoding: "utf8" })
          .filter((file) => file.endsWith(".ts"))
          .map((file) => read(Path.join(dir, file)))
      )
      .join("\n")
    assert.deepStrictEqual(
      documented.development.filter((name) => !sources.includes(name)),
      []
    )
    assert.deepStrictEqual(
      documented.development.filter((name) => config.has(name)),
      [],
      "service settings belong above"
    )
  })

  it("would notice a row taken out", () => {
    const row = doc.split("\n").find((line) => line.startsWith("| `CLUSTER_STORAGE`"))
    assert.isDefined(row)
    assert.notInclude(documentedNames(doc.replace(row!, "")).service, "CLUSTER_STORAGE")
  })
})

describe("the manual's links", () => {
  it("every relative link of README.md, CONTRIBUTING.md and docs/ leads to a file and heading", () => {
    const files = [
      "README.md",
      "CONTRIBUTING.md",
      ...Fs.readdirSync(Path.join(root, "docs"))
        .filter((file) => file.endsWith(".md"))
        .map((file) => `docs/${file}`)
    ]
    assert.isAbove(files.length, 10)
    assert.deepStrictEqual(
      files.flatMap((file) => brokenLinks(file, read(file))),
      []
    )
  })

  it("sees a broken link and a missing heading", () => {
    assert.deepStrictEqual(
      brokenLinks(
        "docs/x.md",
        "[a](nowhere.md) [b](limits.md#no-such-heading) [c](limits.md#quotas-per-plan) `[d](no.md)`"
      ),
      ["docs/x.md: nowhere.md (no such file)", "docs/x.md: limits.md#no-such-heading (no such heading)"]
    )
    assert.isTrue(
      anchorsOf("## Daily token budgets: reservations and max_tokens").has(
        "daily-token-budgets-reservations-and-max_tokens"
      )
    )
    assert.isTrue(anchorsOf("### Memory and V8's flags\n## Memory and V8's flags").has("memory-and-v8s-flags-1"))
    assert.isFalse(anchorsOf("```\n# not a heading\n```").has("not-a-heading"))
  })

  it("README.md stays a front door of at most 12 KB", () => {
    assert.isAtMost(Buffer.byteLength(read("README.md")), 12 * 1024)
  })
})
