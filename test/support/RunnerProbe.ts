/**
 * A process outside the cluster that speaks effect's runner protocol to one
 * node's runner port and sends it a Ping, as a fourth node would.
 *
 *   node test/support/RunnerProbe.ts <host> <port>
 *
 * PROBE_MODE: `plain` (no TLS, as effect's own socket client), `secret`
 * (TLS-PSK with PROBE_SECRET) or `certificates` (PROBE_CERT_FILE,
 * PROBE_KEY_FILE, PROBE_CA_FILE). Prints one JSON line: `{"answered":true}` or
 * `{"answered":false,"error":"..."}`.
 */
import * as NodeClusterSocket from "@effect/platform-node/NodeClusterSocket"
import { Effect, Layer, Redacted } from "effect"
import * as RunnerAddress from "effect/cluster/RunnerAddress"
import * as Runners from "effect/cluster/Runners"
import * as RpcClient from "effect/rpc/RpcClient"
import * as RpcSerialization from "effect/rpc/RpcSerialization"
import * as RunnerTransport from "../../src/Runtime/RunnerTransport.ts"

const [host, port] = process.argv.slice(2)
const mode = process.env.PROBE_MODE ?? "plain"

const protocolLayer =
  mode === "plain"
    ? NodeClusterSocket.layerClientProtocol
    : RunnerTransport.layerClientProtocol(
        RunnerTransport.tlsSettings(
          mode === "secret"
            ? { _tag: "Secret", key: Redacted.make(process.env.PROBE_SECRET!) }
            : {
                _tag: "Certificates",
                certFile: process.env.PROBE_CERT_FILE!,
                keyFile: process.env.PROBE_KEY_FILE!,
                caFile: process.env.PROBE_CA_FILE!
              }
        )
      )

const ping = Effect.gen(function* () {
  const clientProtocol = yield* Runners.RpcClientProtocol
  const protocol = yield* clientProtocol.make(RunnerAddress.make(host!, Number(port)))
  const client = yield* Effect.provideService(Runners.makeRpcClient, RpcClient.Protocol, protocol)
  yield* client.Ping()
}).pipe(
  Effect.scoped,
  Effect.timeout("4 seconds"),
  Effect.as({ answered: true }),
  Effect.catchCause((cause) => Effect.succeed({ answered: false, error: String(cause).slice(0, 300) })),
  Effect.provide(protocolLayer.pipe(Layer.provide(RpcSerialization.layerSchemaBinary())))
)

Effect.runPromise(ping).then((result) => {
  process.stdout.write(`${JSON.stringify(result)}\n`)
  process.exit(0)
})
