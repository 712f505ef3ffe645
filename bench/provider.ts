// An instant model provider for the benches: answers OpenAI's chat
// completions wire format at once, with a fixed reply. Started as a process of
// its own (PORT), so that its cost is not in the service's or the load's.
//
// A request that offers tools and ends with the user's message is answered
// with one call of the first tool offered, `{"id": "A-1"}`; one that ends with
// a tool result is answered with text: the two model turns of a chat with one
// tool call.
import * as Http from "node:http"

const completion = (model: string, message: Record<string, unknown>, finishReason: string) =>
  JSON.stringify({
    id: "chatcmpl-bench",
    object: "chat.completion",
    created: Math.floor(Date.now() / 1000),
    model,
    choices: [{ index: 0, message: { role: "assistant", refusal: null, ...message }, finish_reason: finishReason }],
    usage: { prompt_tokens: 12, completion_tokens: 4, total_tokens: 16 }
  })

let calls = 0

const reply = (request: {
  readonly model?: string
  readonly messages?: ReadonlyArray<{ readonly role?: string }>
  readonly tools?: ReadonlyArray<{ readonly function?: { readonly name?: string } }>
}) => {
  const model = request.model ?? "bench"
  const last = request.messages?.[request.messages.length - 1]?.role
  const tool = request.tools?.[0]?.function?.name
  if (tool !== undefined && last === "user") {
    const call = {
      id: `call_bench_${++calls}`,
      type: "function",
      function: { name: tool, arguments: JSON.stringify({ id: "A-1" }) }
    }
    return completion(model, { content: null, tool_calls: [call] }, "tool_calls")
  }
  if (last === "tool") return completion(model, { content: "A-1 is ready." }, "stop")
  return completion(model, { content: "Fine, thank you." }, "stop")
}

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
    let body: Parameters<typeof reply>[0]
    try {
      body = JSON.parse(Buffer.concat(chunks).toString("utf8")) ?? {}
    } catch {
      response
        .writeHead(400, { "content-type": "application/json" })
        .end(JSON.stringify({ error: { message: "Bad JSON" } }))
      return
    }
    response.writeHead(200, { "content-type": "application/json" }).end(reply(body))
  })
})
server.keepAliveTimeout = 60_000
server.listen(Number(process.env.PORT), "127.0.0.1")
process.on("SIGTERM", () => server.close(() => process.exit(0)))
