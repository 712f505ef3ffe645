import { assert, describe, it, layer } from "@effect/vitest"
import * as NodeServices from "@effect/platform-node/NodeServices"
import { PgClient, PgMigrator } from "@effect/sql-pg"
import { Effect, Option, Redacted, String } from "effect"
import { Reactivity } from "effect/reactivity"
import { SqlClient } from "effect/sql"
import * as Crypto from "node:crypto"
import { normalizeEmail } from "../../src/Auth/Email.ts"
import { hashPassword } from "../../src/Auth/Secrets.ts"
import { migrations } from "../../src/Database/migrations/index.ts"
import { newId } from "../../src/Domain/Ids.ts"
import * as TestServer from "../support/TestServer.ts"
import { TestClient } from "../support/TestServer.ts"

const password = "correct horse battery staple"
const unique = () => Crypto.randomBytes(4).toString("hex")

const register = (email: string, secret = password) =>
  Effect.flatMap(TestClient, (client) =>
    client.request("POST", "/api/auth/register", { body: { email, password: secret } })
  )
const login = (email: string, secret = password) =>
  Effect.flatMap(TestClient, (client) =>
    client.request("POST", "/api/auth/login", { body: { email, password: secret } })
  )

describe("e-mail normalisation", () => {
  it("is NFKC with Unicode case folding, and stable under a second pass", () => {
    assert.strictEqual(normalizeEmail("ÉLODIE@Example.com"), "élodie@example.com")
    assert.strictEqual(normalizeEmail("e\u0301lodie@example.com"), "élodie@example.com")
    assert.strictEqual(normalizeEmail("ｅ\u0301ｌｏｄｉｅ@ｅｘａｍｐｌｅ.ｃｏｍ"), "élodie@example.com")
    assert.strictEqual(normalizeEmail("  STRASSE@x.com "), "strasse@x.com")
    assert.strictEqual(normalizeEmail("straße@x.com"), "strasse@x.com")
    assert.strictEqual(normalizeEmail("STRAẞE@x.com"), "strasse@x.com")
    assert.strictEqual(normalizeEmail("ΟΔΥΣΣΕΥΣ@x.gr"), normalizeEmail("οδυσσευς@x.gr"))
    for (const sample of ["İstanbul@x.tr", "ǅemal@x.com", "ﬃ@x.com", "ΣΑΣ@x.gr", "ŉ@x.com"]) {
      assert.strictEqual(normalizeEmail(normalizeEmail(sample)), normalizeEmail(sample), sample)
    }
  })

  layer(TestServer.layer(), { excludeTestServices: true })("accounts", (it) => {
    it.effect("an e-mail that folds to a registered one is the same account: 409 to register, and it logs in", () =>
      Effect.gen(function* () {
        const domain = `${unique()}.example.com`
        const first = yield* register(`ÉLODIE@${domain.toUpperCase()}`)
        assert.strictEqual(first.status, 201)
        // Shown as entered.
        assert.strictEqual(first.body.user.email, `ÉLODIE@${domain.toUpperCase()}`)
        for (const spelling of [
          `élodie@${domain}`,
          `e\u0301lodie@${domain}`,
          `ｅ\u0301lodie@${domain}`,
          `Élodie@${domain}`
        ]) {
          const again = yield* register(spelling, "another password")
          assert.strictEqual(again.status, 409, spelling)
          assert.strictEqual(again.headers.get("content-type"), "application/problem+json", spelling)
          const session = yield* login(spelling)
          assert.strictEqual(session.status, 200, spelling)
          assert.strictEqual(session.body.user.id, first.body.user.id, spelling)
          assert.strictEqual(session.body.user.email, `ÉLODIE@${domain.toUpperCase()}`, spelling)
        }
        assert.strictEqual((yield* login(`élodie@${domain}`, "wrong password")).status, 401)
      })
    )

    it.effect("ß and ss are one account (full case folding)", () =>
      Effect.gen(function* () {
        const domain = `${unique()}.example.com`
        const first = yield* register(`STRASSE@${domain}`)
        assert.strictEqual(first.status, 201)
        assert.strictEqual((yield* register(`straße@${domain}`, "another password")).status, 409)
        const session = yield* login(`Straße@${domain}`)
        assert.strictEqual(session.status, 200)
        assert.strictEqual(session.body.user.id, first.body.user.id)
      })
    )

    it.effect("the normalised form is stored beside the e-mail as entered", () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const email = `Ｍａｘ.Müller@${unique()}.Example.COM`
        const created = yield* register(email)
        assert.strictEqual(created.status, 201)
        const [row] = yield* sql<{ email: string; emailNormalized: string }>`
          SELECT email, email_normalized FROM users WHERE id = ${created.body.user.id}`
        assert.strictEqual(row!.email, email)
        assert.strictEqual(row!.emailNormalized, normalizeEmail(email))
        assert.match(row!.emailNormalized, /^max\.müller@[0-9a-f]{8}\.example\.com$/)
      })
    )
  })
})

describe("migration 0024 over accounts whose e-mails fold together", () => {
  it.live(
    "keeps the oldest by every spelling, the others by their exact e-mail, and fails on none",
    () =>
      Effect.gen(function* () {
        const url = yield* TestServer.EmptyDatabaseUrl
        // The database as the release before left it: migrations up to 0023.
        const sql = yield* PgClient.make({
          url: Redacted.make(url),
          // The migrator holds one connection for its transaction and queries beside it.
          maxConnections: 2,
          transformResultNames: String.snakeToCamel,
          transformQueryNames: String.camelToSnake,
          transformJson: false
        }).pipe(Effect.provide(Reactivity.layer))
        yield* PgMigrator.run({ loader: Effect.map(migrations, (all) => all.filter(([id]) => id <= 23)) }).pipe(
          Effect.provideService(SqlClient.SqlClient, sql),
          Effect.provide(NodeServices.layer)
        )

        // Accounts the old lower(email) index let through: each pair folds to one e-mail.
        const accounts = [
          { key: "strasse", email: "strasse@legacy.example", secret: "password of strasse" },
          { key: "straße", email: "STRAßE@legacy.example", secret: "password of straße" },
          { key: "fullwidth", email: "ｆｕｌｌ@legacy.example", secret: "password of fullwidth" },
          { key: "ascii", email: "Full@Legacy.example", secret: "password of ascii" },
          { key: "alone", email: "alone@legacy.example", secret: "password of alone" }
        ]
        const ids: Record<string, string> = {}
        let minute = 0
        for (const account of accounts) {
          const tenantId = newId()
          ids[account.key] = newId()
          yield* sql`INSERT INTO tenants (id, name) VALUES (${tenantId}, ${account.key})`
          yield* sql`
          INSERT INTO users (id, tenant_id, email, name, password_hash, role, created_at)
          VALUES (${ids[account.key]!}, ${tenantId}, ${account.email}, null, ${yield* hashPassword(account.secret)},
                  'owner', now() - make_interval(mins => ${60 - minute++}))`
        }

        // A thousand more accounts between the first two, so that the second
        // meets the first's normalised e-mail in a later batch of the backfill.
        const fillerTenant = newId()
        yield* sql`INSERT INTO tenants (id, name) VALUES (${fillerTenant}, 'filler')`
        yield* sql`
        INSERT INTO users (id, tenant_id, email, name, password_hash, role, created_at)
        SELECT 'filler-' || n, ${fillerTenant}, 'filler-' || n || '@legacy.example', null, 'none', 'owner',
               now() - interval '60 minutes' + n * interval '1 millisecond'
        FROM generate_series(1, 1000) AS n`

        // The upgrade: the service starts and applies 0024 (and anything after it).
        yield* Effect.gen(function* () {
          const byId = new Map(
            (yield* sql<{ id: string; emailNormalized: string | null }>`
            SELECT id, email_normalized FROM users`).map((row) => [row.id, row.emailNormalized])
          )
          assert.strictEqual(byId.get(ids.strasse!), "strasse@legacy.example")
          assert.isNull(byId.get(ids.straße!))
          assert.strictEqual(byId.get(ids.fullwidth!), "full@legacy.example")
          assert.isNull(byId.get(ids.ascii!))
          assert.strictEqual(byId.get(ids.alone!), "alone@legacy.example")
          assert.strictEqual(byId.get("filler-1000"), "filler-1000@legacy.example")

          const loginAs = (email: string, secret: string) =>
            Effect.map(login(email, secret), (response) =>
              response.status === 200 ? (response.body.user.id as string) : response.status
            )
          // The oldest, by any spelling.
          assert.strictEqual(yield* loginAs("STRASSE@LEGACY.example", "password of strasse"), ids.strasse)
          assert.strictEqual(yield* loginAs("straße@legacy.example", "password of strasse"), ids.strasse)
          assert.strictEqual(yield* loginAs("full@legacy.example", "password of fullwidth"), ids.fullwidth)
          // The newer ones, by exactly the e-mail they registered with.
          assert.strictEqual(yield* loginAs("STRAßE@legacy.example", "password of straße"), ids.straße)
          assert.strictEqual(yield* loginAs("Full@Legacy.example", "password of ascii"), ids.ascii)
          // Another spelling is the oldest's: their password does not open it.
          assert.strictEqual(yield* loginAs("straße@legacy.example", "password of straße"), 401)
          assert.strictEqual(yield* loginAs("alone@LEGACY.example", "password of alone"), ids.alone)

          // Nobody registers a new spelling of either.
          assert.strictEqual((yield* register("Straße@Legacy.Example")).status, 409)
          assert.strictEqual((yield* register("FULL@legacy.example")).status, 409)
          assert.strictEqual((yield* register("new@legacy.example")).status, 201)
        }).pipe(Effect.provide(TestServer.layer({ databaseUrl: Option.some(Redacted.make(url)) })))
      }),
    60_000
  )
})
