import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"
import { normalizeEmail } from "../../Auth/Email.ts"

// Accounts and sessions (issue 34):
//
// - `users.email_normalized`: the e-mail as the application normalises it
//   (NFKC and Unicode case folding, src/Auth/Email.ts), unique. lower() in the
//   old unique index folds ASCII only under the embedded server's C locale, so
//   `ÉLODIE@x` and `élodie@x` could be two accounts. The folding cannot be
//   done portably in SQL, so existing rows are filled here, in TypeScript,
//   oldest first. A row whose normalised e-mail an older row already holds
//   keeps NULL: nothing is merged or taken from either account; the older
//   one is found by any spelling, the newer one only by its exact e-mail (as
//   stored), which is what it has logged in with so far. The old unique
//   index stays: it still refuses duplicates from nodes not yet upgraded.
//
// - New API keys and sessions announce their hash on the credential channel
//   (`api_key_revoked`, which every node already listens on for revocations,
//   payload `issued:<hash>`), from a trigger so that any insert does: every
//   node then drops the hash from its cache of rejected credentials, and a
//   credential refused a moment before it existed works at once.
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE users ADD COLUMN email_normalized text`
  yield* sql`CREATE UNIQUE INDEX users_email_normalized_key ON users (email_normalized)`

  // The time travels as text: a Date would drop its microseconds, and the
  // next page would start again at the last row.
  type Row = { readonly id: string; readonly email: string; readonly createdAt: string }
  let after: Row | undefined
  let conflicts = 0
  while (true) {
    const rows =
      after === undefined
        ? yield* sql<Row>`SELECT id, email, created_at::text AS "createdAt" FROM users ORDER BY created_at, id LIMIT 1000`
        : yield* sql<Row>`SELECT id, email, created_at::text AS "createdAt" FROM users
                   WHERE (created_at, id) > (${after.createdAt}::timestamptz, ${after.id})
                   ORDER BY created_at, id LIMIT 1000`
    if (rows.length === 0) break
    after = rows[rows.length - 1]!
    // The oldest of a batch wins within it; NOT EXISTS lets older batches win over it.
    const firsts = new Map<string, string>()
    for (const row of rows) {
      const normalized = normalizeEmail(row.email)
      if (firsts.has(normalized)) conflicts++
      else firsts.set(normalized, row.id)
    }
    const updated = yield* sql<{ id: string }>`
      UPDATE users AS u SET email_normalized = v.normalized
      FROM unnest(${[...firsts.values()]}::text[], ${[...firsts.keys()]}::text[]) AS v (id, normalized)
      WHERE u.id = v.id
        AND NOT EXISTS (SELECT 1 FROM users o WHERE o.email_normalized = v.normalized)
      RETURNING u.id`
    conflicts += firsts.size - updated.length
  }
  if (conflicts > 0) {
    yield* Effect.logWarning(
      `${conflicts} account(s) share their normalised e-mail with an older account; ` +
        "they keep logging in with their exact e-mail, and the older account with any spelling of it"
    )
  }
  yield* sql`CREATE INDEX users_email_unnormalized_idx ON users (email) WHERE email_normalized IS NULL`

  yield* sql`
    CREATE FUNCTION notify_credential_issued() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      PERFORM pg_notify('api_key_revoked', 'issued:' || (to_jsonb(NEW) ->> TG_ARGV[0]));
      RETURN NULL;
    END
    $$`
  yield* sql`
    CREATE TRIGGER api_keys_issued AFTER INSERT ON api_keys
    FOR EACH ROW EXECUTE FUNCTION notify_credential_issued('key_hash')`
  yield* sql`
    CREATE TRIGGER sessions_issued AFTER INSERT ON sessions
    FOR EACH ROW EXECUTE FUNCTION notify_credential_issued('token_hash')`
})
