// An instant model provider for the benches: answers OpenAI's chat
// completions wire format at once, with a fixed reply. Started as a process of
// its own (PORT), so that its cost is not in the service's or the load's.
import * as Http from "node:http"

const reply = (model: string) =>
  JSON.stringify({
    id: "chatcmpl-bench",
    object: "chat.completion",
    created: Math.floor(Date.now() / 1000),
    model,
    choices: [
      { index: 0, message: { role: "assistant", content: "Fine, thank you.", refusal: null }, finish_reason: "stop" }
    ],
    usage: { prompt_tokens: 12, completion_tokens: 4, total_tokens: 16 }
  })

const server = Http.createServer((request, response) => {
  const chunks: Array<Buffer> = []
  request.on("data", (chunk: Buffer) => chunks.push(chunk))
  request.on("end", () => {
    if (request.method !== "POST" || request.url !== "/v1/chat/completions") {
      response
        .writeHead(404, { "content-type": "application/json" })
        .end(JSON.stringify({ error: { message: "Not found" } }))
      return
    }
    let model = "bench"
    try {
      model = JSON.parse(Buffer.concat(chunks).toString("utf8")).model ?? model
    } catch {
      response
        .writeHead(400, { "content-type": "application/json" })
        .end(JSON.stringify({ error: { message: "Bad JSON" } }))
      return
    }
    response.writeHead(200, { "content-type": "application/json" }).end(reply(model))
  })
})
server.keepAliveTimeout = 60_000
server.listen(Number(process.env.PORT), "127.0.0.1")
process.on("SIGTERM", () => server.close(() => process.exit(0)))
