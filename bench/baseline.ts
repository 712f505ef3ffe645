// The yardstick: fastify + pg answering one SELECT by primary key per request,
// on the same database as the service.
import Fastify from "fastify"
import pg from "pg"

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 10 })
const app = Fastify({ logger: false })

app.get<{ Params: { id: string } }>("/agents/:id", async (request, reply) => {
  const result = await pool.query(
    "SELECT id, name, description, model, status, memory_enabled, created_at FROM agents WHERE id = $1",
    [request.params.id]
  )
  if (result.rows.length === 0) return reply.code(404).send({ status: 404 })
  return result.rows[0]
})


await app.listen({ port: Number(process.env.PORT), host: "127.0.0.1" })
process.on("SIGTERM", () => app.close().then(() => pool.end()).then(() => process.exit(0)))
