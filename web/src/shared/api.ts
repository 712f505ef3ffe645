import { Cause, Effect, Exit, ManagedRuntime, Schema, SchemaIssue } from "effect"
import { FetchHttpClient, HttpClient } from "effect/http"
import { HttpApiClient } from "effect/http-api"
import { Api } from "../../../src/Api.ts"

// The dashboard's only way to the service: the typed client of the API
// declaration (src/Api.ts), so no request or response shape is written twice.
// It calls the same origin, so the browser sends the session cookie; the
// service checks the Origin of every write.

/** An answer of the service that is not a success: its problem+json body. */
export class ApiProblem extends Error {
  readonly status: number
  readonly title: string
  readonly detail: string
  readonly errors: ReadonlyArray<{ readonly path: string; readonly message: string }>
  readonly body: Record<string, unknown>

  constructor(status: number, body: Record<string, unknown>) {
    const detail =
      typeof body.detail === "string" ? body.detail : typeof body.title === "string" ? body.title : `HTTP ${status}`
    super(detail)
    this.status = status
    this.title = typeof body.title === "string" ? body.title : `HTTP ${status}`
    this.detail = detail
    // The service names a field by its path from the request part: ["payload", "steps", 1, "prompt"].
    this.errors = Array.isArray(body.errors)
      ? body.errors.map((e: { path?: unknown; message?: unknown }) => ({
          path: Array.isArray(e.path) ? e.path.join(".") : String(e.path ?? ""),
          message: String(e.message ?? "")
        }))
      : []
    this.body = body
  }

  /** The messages of the fields under `path` (such as `payload.steps.1.prompt`). */
  messagesFor(path: string): Array<string> {
    return this.errors.filter((e) => e.path === path || e.path.startsWith(`${path}.`)).map((e) => e.message)
  }
}

// Every answer of 400 and over becomes an ApiProblem carrying the body as sent,
// before the client decodes it: the screens show the service's own words.
const withProblems = (client: HttpClient.HttpClient) =>
  HttpClient.transformResponse(client, (effect) =>
    Effect.flatMap(effect, (response) =>
      response.status < 400
        ? Effect.succeed(response)
        : Effect.flatMap(
            Effect.orElseSucceed(response.json, () => ({})),
            (body) =>
              Effect.fail(
                new ApiProblem(
                  response.status,
                  typeof body === "object" && body !== null ? (body as Record<string, unknown>) : {}
                )
              )
          )
    )
  )

const formatIssues = SchemaIssue.makeFormatterStandardSchemaV1()

const runtime = ManagedRuntime.make(FetchHttpClient.layer)
const makeClient = Effect.flatMap(HttpClient.HttpClient, (httpClient) =>
  HttpApiClient.makeWith(Api, { httpClient: withProblems(httpClient) })
)
const client = runtime.runPromise(makeClient)

export type Client = Effect.Success<typeof makeClient>

/** Paths of the API's routes, built from the same declaration (for event streams and uploads with progress). */
export const urls = HttpApiClient.urlBuilder(Api)

/** Runs one call of the typed client; a failure rejects with an ApiProblem. */
export const call = async <A>(f: (client: Client) => Effect.Effect<A, unknown, never>): Promise<A> => {
  const exit = await runtime.runPromiseExit(
    Effect.flatMap(
      Effect.promise(() => client),
      (c) => f(c)
    )
  )
  if (Exit.isSuccess(exit)) return exit.value
  const failure = Cause.squash(exit.cause)
  if (failure instanceof ApiProblem) throw failure
  // The client checks a request against the same schemas before sending it:
  // its failure reads like the service's 400 (the dashboard's requests carry
  // user input in their payload only).
  if (Schema.isSchemaError(failure)) {
    const issues = formatIssues(failure.issue).issues.map((issue) => ({
      path: [
        "payload",
        ...(issue.path ?? []).map((segment) => (typeof segment === "object" ? String(segment.key) : String(segment)))
      ],
      message: issue.message
    }))
    throw new ApiProblem(400, { title: "Bad Request", detail: "Request validation failed", errors: issues })
  }
  throw new ApiProblem(0, { title: "No answer", detail: `The service could not be reached (${String(failure)})` })
}
