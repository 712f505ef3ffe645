import { assert, layer } from "@effect/vitest"
import { createConfig, lintFromString } from "@redocly/openapi-core"
import { Effect } from "effect"
import { sessionCredential } from "../../src/Auth/Api.ts"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"

// The document API users read first, as the running service serves it.

const lintConfig = createConfig({
  extends: ["recommended"],
  rules: {
    // The project has not chosen a license yet (package.json names none and
    // there is no LICENSE file), so the document cannot state one truthfully.
    // Once it has, set `license` in src/Api.ts and drop these two lines.
    "info-license": "off",
    "info-license-strict": "off"
  }
})

const methods = ["get", "put", "post", "delete", "patch", "head", "options", "trace"] as const

interface Operation {
  readonly name: string
  readonly summary?: string
  readonly description?: string
  readonly security?: ReadonlyArray<Record<string, unknown>>
}

/** Every operation of the document, named as a reader of a failure needs it: method, path and operationId. */
const operationsOf = (document: any): ReadonlyArray<Operation> =>
  Object.entries(document.paths as Record<string, Record<string, any>>).flatMap(([path, item]) =>
    methods
      .filter((method) => item[method] !== undefined)
      .map((method) => ({
        ...item[method],
        name: `${method.toUpperCase()} ${path} (${item[method].operationId})`
      }))
  )

const blank = (text: unknown) => typeof text !== "string" || text.trim() === ""

const openApiDocument = Effect.gen(function* () {
  const client = yield* TestClient
  const response = yield* client.request("GET", "/openapi.json")
  assert.strictEqual(response.status, 200)
  return { text: response.text, document: response.body }
})

layer(TestServer.layer(), { excludeTestServices: true })("the API reference", (it) => {
  it.effect("GET /openapi.json passes Redocly's recommended rules without an error or a warning", () =>
    Effect.gen(function* () {
      const { text } = yield* openApiDocument
      const config = yield* Effect.promise(() => lintConfig)
      const problems = yield* Effect.promise(() =>
        lintFromString({ source: text, absoluteRef: "openapi.json", config })
      )
      const found = problems
        .filter((problem) => problem.severity === "error" || problem.severity === "warn")
        .map(
          (problem) =>
            `${problem.severity} ${problem.ruleId} at ${problem.location[0]?.pointer ?? "?"}: ${problem.message}`
        )
      assert.deepStrictEqual(found, [], `Redocly's recommended rules found:\n${found.join("\n")}`)
    })
  )

  it.effect("every operation has a summary and a description, and every tag a description", () =>
    Effect.gen(function* () {
      const { document } = yield* openApiDocument
      const operations = operationsOf(document)
      // A floor, so that an empty or unreadable document cannot pass.
      assert.isAtLeast(operations.length, 62)
      const noSummary = operations.filter((op) => blank(op.summary)).map((op) => op.name)
      const noDescription = operations.filter((op) => blank(op.description)).map((op) => op.name)
      const tags = document.tags as ReadonlyArray<{ readonly name: string; readonly description?: string }>
      const noTagDescription = tags.filter((tag) => blank(tag.description)).map((tag) => tag.name)
      const untagged = [...new Set(operations.flatMap((op: any) => op.tags as Array<string>))].filter(
        (name) => !tags.some((tag) => tag.name === name)
      )
      assert.deepStrictEqual(
        { noSummary, noDescription, noTagDescription, untagged },
        { noSummary: [], noDescription: [], noTagDescription: [], untagged: [] },
        "Annotate these with OpenApi annotations (src/Domain/ApiDocs.ts `operation`, `keyOperation` of " +
          "src/Auth/Api.ts, a group's `OpenApi.annotations({ title, description })`):\n" +
          [
            ...noSummary.map((name) => `no summary: ${name}`),
            ...noDescription.map((name) => `no description: ${name}`),
            ...noTagDescription.map((name) => `no tag description: ${name}`),
            ...untagged.map((name) => `tag not declared: ${name}`)
          ].join("\n")
      )
    })
  )

  it.effect("every operation's description states the credential its security requires", () =>
    Effect.gen(function* () {
      const { document } = yield* openApiDocument
      const expected = (schemes: ReadonlyArray<string>) =>
        schemes.includes("sessionCookie")
          ? sessionCredential
          : schemes.includes("apiKeyBearer")
            ? "API key as a bearer token with the `"
            : schemes.includes("apiKeyHeader")
              ? "API key in `X-API-Key` with the `"
              : "No credential"
      const wrong = operationsOf(document).flatMap((op) => {
        const sentence = expected((op.security ?? []).flatMap((requirement) => Object.keys(requirement)))
        return op.description?.includes(sentence) ? [] : [`${op.name}: expected "${sentence}"`]
      })
      assert.deepStrictEqual(wrong, [], `Descriptions without their credential:\n${wrong.join("\n")}`)
    })
  )

  it.effect("the document names its server, relative to where it is served, and describes credentials and errors", () =>
    Effect.gen(function* () {
      const { document } = yield* openApiDocument
      assert.deepStrictEqual(
        document.servers.map((server: { url: string }) => server.url),
        ["/"]
      )
      assert.include(document.info.description, "problem+json")
      assert.include(document.info.description, "X-API-Key")
      for (const [name, scheme] of Object.entries(document.components.securitySchemes as Record<string, any>)) {
        assert.isFalse(blank(scheme.description), `security scheme ${name} has no description`)
      }
    })
  )

  it.effect("the document names a contact", () =>
    Effect.gen(function* () {
      const { document } = yield* openApiDocument
      assert.deepStrictEqual(document.info.contact, { name: "Agent Host", url: "/docs" })
    })
  )

  it.effect("the Stripe webhook's body is declared as the event object Stripe sends, not as a string", () =>
    Effect.gen(function* () {
      const { document } = yield* openApiDocument
      const body = document.paths["/api/webhooks/stripe"].post.requestBody
      assert.deepStrictEqual(Object.keys(body.content), ["application/json"])
      const schema = body.content["application/json"].schema
      assert.strictEqual(schema.type, "object")
      assert.isUndefined(schema.format)
      for (const field of ["id", "type", "created", "data"]) {
        assert.isFalse(blank(schema.properties?.[field]?.description), `${field} is not described`)
      }
      assert.includeMembers(schema.required, ["id", "type", "data"])
      assert.strictEqual(schema.properties.id.type, "string")
      assert.strictEqual(schema.properties.type.type, "string")
      assert.strictEqual(schema.properties.data.type, "object")
      assert.strictEqual(schema.properties.data.properties.object.type, "object")
      // A real event carries more fields than are described; a validator must not refuse them.
      assert.notStrictEqual(schema.additionalProperties, false)
    })
  )
})
