// The yardsticks, on the same database as the service: fastify + pg answering
// one SELECT by primary key per request, and one INSERT per request.
import Fastify from "fastify"
import * as Crypto from "node:crypto"
import pg from "pg"

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 10 })
const app = Fastify({ logger: false })

await pool.query(
  "CREATE TABLE IF NOT EXISTS bench_inserts (id uuid PRIMARY KEY, body jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now())"
)

app.get<{ Params: { id: string } }>("/agents/:id", async (request, reply) => {
  const result = await pool.query(
    "SELECT id, name, description, model, status, memory_enabled, created_at FROM agents WHERE id = $1",
    [request.params.id]
  )
  if (result.rows.length === 0) return reply.code(404).send({ status: 404 })
  return result.rows[0]
})

app.post("/items", async (request, reply) => {
  const id = Crypto.randomUUID()
  await pool.query("INSERT INTO bench_inserts (id, body) VALUES ($1, $2)", [id, JSON.stringify(request.body)])
  return reply.code(202).send({ id })
})

await app.listen({ port: Number(process.env.PORT), host: "127.0.0.1" })
process.on("SIGTERM", () =>
  app
    .close()
    .then(() => pool.end())
    .then(() => process.exit(0))
)
