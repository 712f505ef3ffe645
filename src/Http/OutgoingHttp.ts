import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import * as Layer from "effect/Layer"
import * as HttpClient from "effect/http/HttpClient"

/**
 * The HTTP client for model providers and the trace exporter: effect's
 * client on node:http, with keep-alive agents.
 *
 * - Not on the platform's fetch: its WHATWG streams and request objects per
 *   call cost more CPU, latency and memory (docs/performance.md).
 * - Made with `makeNodeHttp` itself rather than `layerNodeHttp`: that layer
 *   merges the context it was built in into every response, which, built
 *   where our services are, copied a map of every service of the node per
 *   outgoing request.
 * - Keep-alive: a provider is called many times a second; the agents keep
 *   idle sockets for reuse (for as long as the server's Keep-Alive hint
 *   allows). A reused socket the server closed meanwhile fails as a
 *   transport error, which model calls retry.
 */
export const layer: Layer.Layer<HttpClient.HttpClient> = Layer.effect(
  HttpClient.HttpClient,
  NodeHttpClient.makeNodeHttp
).pipe(Layer.provide(NodeHttpClient.layerAgentOptions({ keepAlive: true })))
