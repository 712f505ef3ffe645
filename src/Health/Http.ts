import * as Effect from "effect/Effect"
import * as HttpApiBuilder from "effect/http-api/HttpApiBuilder"
import * as SqlClient from "effect/sql/SqlClient"
import { Api } from "../Api.ts"
import { ServiceUnavailable } from "../Domain/Problems.ts"
import * as Traced from "../Observability/Traced.ts"

export const layer = HttpApiBuilder.group(
  Api,
  "health",
  Traced.fn(function* (handlers) {
    const sql = yield* SqlClient.SqlClient
    const ok = { status: "ok" } as const
    return handlers.handleAll({
      live: () => Effect.succeed(ok),
      // Ready only while the database answers, within a bound.
      ready: () =>
        sql`SELECT 1`.pipe(
          Effect.timeout("2 seconds"),
          Effect.as(ok),
          Effect.catchCause(() => Effect.fail(new ServiceUnavailable({ detail: "The database does not answer" })))
        )
    })
  })
)
