import * as Result from "effect/Result"
import { compile } from "./JsonSchema.ts"

/**
 * What is wrong with a response format's schema, if it does not compile:
 * issues with their paths under `at` (`["responseFormat"]`,
 * `["steps", 2, "responseFormat"]`), for a 400 naming them.
 */
export const formatIssues = (
  format: { readonly schema: { readonly [key: string]: unknown } } | null | undefined,
  at: ReadonlyArray<string | number>
): ReadonlyArray<{ readonly path: ReadonlyArray<string | number>; readonly message: string }> =>
  format === null || format === undefined
    ? []
    : Result.match(compile(format.schema), {
        onSuccess: () => [],
        onFailure: (problems) =>
          problems.map((problem) => ({ path: [...at, "schema", ...problem.path], message: problem.message }))
      })
