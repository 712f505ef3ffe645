// An instant receiver for the benches' HTTP tool: answers every request at
// once with a small JSON object. Started as a process of its own (PORT), as
// the instant provider is, so that its cost is not in the service's or the
// load's.
import * as Http from "node:http"

const answer = JSON.stringify({ id: "A-1", status: "ready" })

const server = Http.createServer((request, response) => {
  request.resume()
  request.on("end", () => {
    response
      .writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(answer) })
      .end(answer)
  })
})
server.keepAliveTimeout = 60_000
server.listen(Number(process.env.PORT), "127.0.0.1")
process.on("SIGTERM", () => server.close(() => process.exit(0)))
