import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Stream from "effect/Stream"
import * as Headers from "effect/http/Headers"
import * as HttpClient from "effect/http/HttpClient"
import * as HttpClientError from "effect/http/HttpClientError"
import * as HttpClientResponse from "effect/http/HttpClientResponse"

/**
 * An HTTP client on the platform's fetch, for model providers and the
 * trace exporter. It is effect's `HttpClient.make` around `fetch`, as
 * `FetchHttpClient.layer` is, without what that layer adds: a merge of the
 * context the layer was made in into every response. Made where our
 * services are, that merge copied a map of every service of the node per
 * outgoing request (measured: about a sixth of all a chat through a model
 * provider allocated). Request bodies that are streams are read whole first;
 * none of our requests sends one.
 */
export const make: HttpClient.HttpClient = HttpClient.make((request, url, signal) => {
  const headers = request.headers["content-length"] ? Headers.remove(request.headers, "content-length") : request.headers
  const send = (body: NonNullable<RequestInit["body"]> | null) =>
    Effect.map(
      Effect.tryPromise({
        try: () => fetch(url, { method: request.method, headers, body, signal }),
        catch: (cause) => new HttpClientError.HttpClientError({ reason: new HttpClientError.TransportError({ request, cause }) })
      }),
      (response) => HttpClientResponse.fromWeb(request, response)
    )
  switch (request.body._tag) {
    case "Raw":
      return send(request.body.body as NonNullable<RequestInit["body"]>)
    case "Uint8Array":
      return send(request.body.body as Uint8Array<ArrayBuffer>)
    case "FormData":
      return send(request.body.formData)
    case "Stream":
      return Stream.mkUint8Array(request.body.stream).pipe(
        Effect.mapError((cause) => new HttpClientError.HttpClientError({ reason: new HttpClientError.EncodeError({ request, cause }) })),
        Effect.flatMap(send)
      )
  }
  return send(null)
})

export const layer: Layer.Layer<HttpClient.HttpClient> = Layer.succeed(HttpClient.HttpClient, make)
