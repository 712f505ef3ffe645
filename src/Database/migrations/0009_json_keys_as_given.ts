import * as Effect from "effect/Effect"
import * as String from "effect/String"
import * as SqlClient from "effect/sql/SqlClient"

// Until now the SQL client renamed the keys of JSON values as it does column
// names: camelCase to snake_case on the way in, back on the way out. JSON is
// now stored exactly as given, so the values already stored are rewritten
// into what the code read back:
// - steps (orchestrations.steps, executions.steps): `agent_id` and
//   `depends_on` become `agentId` and `dependsOn` again;
// - executions.variables: a key becomes the variable name the execution's
//   prompts use for it (`my_var` stays `my_var` when a prompt says
//   `{{variables.my_var}}`, `_u_r_l` becomes `URL`), and otherwise what the
//   client used to read back (`my_var` -> `myVar`).
// execution_events.data needs nothing: its keys (output, tokens, status,
// error, tokensUsed) read back unchanged. No other column holds JSON.
const renameStepKeys = (table: "orchestrations" | "executions") =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    yield* sql.unsafe(`
      UPDATE ${table} SET steps = (
        SELECT COALESCE(jsonb_agg(
          CASE WHEN jsonb_typeof(step) = 'object' THEN (
            SELECT COALESCE(jsonb_object_agg(
              CASE key WHEN 'agent_id' THEN 'agentId' WHEN 'depends_on' THEN 'dependsOn' ELSE key END, value), '{}'::jsonb)
            FROM jsonb_each(step))
          ELSE step END ORDER BY position), '[]'::jsonb)
        FROM jsonb_array_elements(steps) WITH ORDINALITY AS element(step, position))
      WHERE EXISTS (
        SELECT 1 FROM jsonb_array_elements(steps) AS element(step)
        WHERE jsonb_typeof(step) = 'object' AND (step -> 'agent_id' IS NOT NULL OR step -> 'depends_on' IS NOT NULL))`)
  })

// The same placeholder syntax as the templates (Orchestrations.ts), frozen here with the migration.
const variablePlaceholder = /\{\{\s*variables\.([A-Za-z0-9_-]{1,64})\s*\}\}/g

const variablesUsed = (steps: unknown): ReadonlyArray<string> => {
  const names = new Set<string>()
  if (!Array.isArray(steps)) return []
  for (const step of steps) {
    const prompt = typeof step === "object" && step !== null ? (step as { prompt?: unknown }).prompt : undefined
    if (typeof prompt !== "string") continue
    for (const match of prompt.matchAll(variablePlaceholder)) names.add(match[1]!)
  }
  return [...names]
}

export const restoreVariableNames = (stored: Readonly<Record<string, unknown>>, used: ReadonlyArray<string>) => {
  const restored: Record<string, unknown> = {}
  for (const [key, value] of Object.entries(stored)) {
    const names = used.filter((name) => String.camelToSnake(name) === key)
    for (const name of names.length > 0 ? names : [String.snakeToCamel(key)]) {
      Object.defineProperty(restored, name, { value, enumerable: true, writable: true, configurable: true })
    }
  }
  return restored
}

const restoreVariables = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  // Keys without `_` were never renamed (camelToSnake adds one before every capital).
  let after = ""
  while (true) {
    const rows = yield* sql<{ id: string; variables: Record<string, unknown>; steps: unknown }>`
      SELECT id, variables, steps FROM executions
      WHERE id > ${after} AND jsonb_typeof(variables) = 'object'
        AND EXISTS (SELECT 1 FROM jsonb_object_keys(variables) AS key WHERE strpos(key, '_') > 0)
      ORDER BY id LIMIT 500`
    if (rows.length === 0) return
    for (const row of rows) {
      const restored = restoreVariableNames(row.variables, variablesUsed(row.steps))
      yield* sql`UPDATE executions SET variables = ${JSON.stringify(restored)}::jsonb WHERE id = ${row.id}`
    }
    after = rows[rows.length - 1]!.id
  }
})

export default Effect.gen(function* () {
  yield* renameStepKeys("orchestrations")
  yield* renameStepKeys("executions")
  yield* restoreVariables
})
