import * as NodeSocket from "@effect/platform-node/NodeSocket"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as Scope from "effect/Scope"
import * as Runners from "effect/cluster/Runners"
import * as NetAddress from "effect/net/NetAddress"
import * as RpcClient from "effect/rpc/RpcClient"
import * as RpcSerialization from "effect/rpc/RpcSerialization"
import * as Socket from "effect/socket/Socket"
import * as SocketServer from "effect/socket/SocketServer"
import * as Crypto from "node:crypto"
import * as Fs from "node:fs"
import type * as Net from "node:net"
import * as Tls from "node:tls"
import type { RunnerCredential, RunnerEndpoint } from "../Config.ts"

/**
 * The runner port carries every entity message between nodes, each naming its
 * tenant, so only nodes of the cluster may speak on it. Both ends run TLS:
 * either with a pre-shared key derived from RUNNER_SECRET (TLS 1.2
 * ECDHE-PSK: mutual authentication without certificates, with forward
 * secrecy) or with certificates signed by the cluster's own CA, required of
 * the client as well as the server. A peer that cannot complete the handshake
 * never reaches the RPC server: no byte it sends is decoded.
 */

const pskIdentity = "agent-host-runner"
const pskCiphers = "ECDHE-PSK-CHACHA20-POLY1305"

/** The key both ends of a PSK handshake hold: never the secret itself. */
const pskFromSecret = (secret: Redacted.Redacted<string>) =>
  Buffer.from(
    Crypto.hkdfSync("sha256", Buffer.from(Redacted.value(secret).trim(), "base64"), "agent-host", "runner psk v1", 32)
  )

interface TlsSettings {
  readonly server: Tls.TlsOptions
  readonly client: Tls.ConnectionOptions
}

/** TLS options for both ends; certificate files are read once, at start. */
export const tlsSettings = (credential: RunnerCredential): TlsSettings => {
  if (credential._tag === "Secret") {
    const psk = pskFromSecret(credential.key)
    return {
      server: {
        ciphers: pskCiphers,
        minVersion: "TLSv1.2",
        maxVersion: "TLSv1.2",
        pskCallback: (_socket, identity) => (identity === pskIdentity ? psk : null)
      },
      client: {
        ciphers: pskCiphers,
        minVersion: "TLSv1.2",
        maxVersion: "TLSv1.2",
        pskCallback: () => ({ psk, identity: pskIdentity }),
        // No certificate: the key is the proof of identity.
        checkServerIdentity: () => undefined
      }
    }
  }
  const files = {
    cert: Fs.readFileSync(credential.certFile),
    key: Fs.readFileSync(credential.keyFile),
    ca: Fs.readFileSync(credential.caFile)
  }
  return {
    server: { ...files, minVersion: "TLSv1.3", requestCert: true, rejectUnauthorized: true },
    // Runners are addressed by IP (a pod's address), which certificates rarely
    // name: a peer is trusted because the cluster's CA signed it.
    client: { ...files, minVersion: "TLSv1.3", rejectUnauthorized: true, checkServerIdentity: () => undefined }
  }
}

/** The client side: every connection to another runner is a TLS connection. */
export const layerClientProtocol = (
  settings: TlsSettings
): Layer.Layer<Runners.RpcClientProtocol, never, RpcSerialization.RpcSerialization> =>
  Layer.effect(Runners.RpcClientProtocol)(
    Effect.gen(function* () {
      const serialization = yield* RpcSerialization.RpcSerialization
      return {
        codecFor: serialization.codecFor,
        make: Effect.fnUntraced(function* (address) {
          const socket = yield* NodeSocket.makeTls({
            ...settings.client,
            openTimeout: 1000,
            timeout: 5500,
            host: address.host,
            port: address.port
          })
          return yield* RpcClient.makeProtocolSocket().pipe(
            Effect.provideService(Socket.Socket, socket),
            Effect.provideService(RpcSerialization.RpcSerialization, serialization)
          )
        }, Effect.orDie)
      }
    })
  )

const peerHungUp = new Set(["ECONNRESET", "EPIPE", "ECONNABORTED"])

const peerOf = (socket: Net.Socket) => `${socket.remoteAddress ?? "unknown"}:${socket.remotePort ?? 0}`

/**
 * The server side: a TLS server on the runner's listen address. Connections
 * reach the cluster's handler only after a completed handshake; a refused one
 * is logged with the peer's address and closed.
 */
export const makeServer = Effect.fnUntraced(function* (listen: RunnerEndpoint, settings: TlsSettings) {
  const services = yield* Effect.context<never>()
  const logRefusal = (reason: string, socket: Net.Socket) =>
    Effect.runForkWith(services)(
      Effect.logWarning("Runner connection refused").pipe(Effect.annotateLogs({ peer: peerOf(socket), reason }))
    )

  const logHangUp = (socket: Net.Socket) =>
    Effect.runForkWith(services)(
      Effect.logDebug("Runner connection closed by the peer during the handshake").pipe(
        Effect.annotateLogs({ peer: peerOf(socket) })
      )
    )

  const pending = new Set<Tls.TLSSocket>()
  let onConnection = (socket: Tls.TLSSocket) => {
    pending.add(socket)
    socket.once("close", () => pending.delete(socket))
  }
  const server = Tls.createServer(settings.server)
  server.on("tlsClientError", (error, socket) => {
    // Node reports a client certificate it rejected as the socket's hang-up,
    // with the reason on the socket; a peer that hangs up mid-handshake
    // itself (a node's client past its open timeout on a busy machine)
    // presented nothing to refuse.
    const rejected: unknown = (socket as Tls.TLSSocket).authorizationError
    const code = (error as { code?: string }).code
    if (rejected) logRefusal(String(rejected), socket)
    else if (code !== undefined && peerHungUp.has(code)) logHangUp(socket)
    else logRefusal(code ?? error.message, socket)
    socket.destroy()
  })
  server.on("secureConnection", (socket) => {
    // Paused until a handler reads, so nothing is lost before it does.
    socket.pause()
    onConnection(socket)
  })
  yield* Effect.addFinalizer(() =>
    Effect.callback<void>((resume) => {
      for (const socket of pending) socket.destroy()
      server.close(() => resume(Effect.void))
    })
  )
  yield* Effect.callback<void, SocketServer.SocketServerError>((resume) => {
    const failed = (cause: Error) =>
      resume(
        Effect.fail(new SocketServer.SocketServerError({ reason: new SocketServer.SocketServerOpenError({ cause }) }))
      )
    server.once("error", failed)
    server.listen({ host: listen.host, port: listen.port }, () => {
      server.off("error", failed)
      resume(Effect.void)
    })
  })
  server.on("error", (error) => Effect.runForkWith(services)(Effect.logError("Runner socket server error", error)))

  const bound = server.address() as Net.AddressInfo
  const address = yield* Effect.fromResult(NetAddress.inetAddressFromIpString(bound.address, bound.port)).pipe(
    Effect.mapError(
      (cause) => new SocketServer.SocketServerError({ reason: new SocketServer.SocketServerOpenError({ cause }) })
    )
  )

  const run = Effect.fnUntraced(function* <R, E, _>(handler: (socket: Socket.Socket) => Effect.Effect<_, E, R>) {
    const scope = yield* Scope.make()
    const handlerServices = Context.omit(Scope.Scope)(yield* Effect.context<R>()) as Context.Context<R>
    const track = Fiber.runIn(scope)
    const previous = onConnection
    onConnection = (conn) => {
      const open = Effect.acquireRelease(
        Effect.suspend(() =>
          conn.closed
            ? Effect.fail(new Socket.SocketError({ reason: new Socket.SocketCloseError({ code: 1000 }) }))
            : Effect.succeed(conn as Net.Socket)
        ),
        (socket) => Effect.sync(() => socket.closed || socket.destroySoon())
      )
      NodeSocket.fromDuplex(open, { tlsServer: true }).pipe(
        Effect.flatMap(handler),
        Effect.ignoreCause({ log: "Debug", message: "Runner connection ended" }),
        Effect.runForkWith(Context.add(handlerServices, NodeSocket.NetSocket, conn as Net.Socket)),
        track
      )
    }
    for (const socket of pending) {
      pending.delete(socket)
      onConnection(socket)
    }
    return yield* Effect.callback<never>(() =>
      Effect.suspend(() => {
        onConnection = previous
        return Scope.close(scope, Exit.void)
      })
    )
  })

  return SocketServer.SocketServer.of({ address, run })
})

export const layerServer = (listen: RunnerEndpoint, settings: TlsSettings) =>
  Layer.effect(SocketServer.SocketServer, makeServer(listen, settings))
