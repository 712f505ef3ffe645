import * as OpenApi from "effect/http-api/OpenApi"

// What /docs and /openapi.json say about each operation. Every operation has
// a summary and a description in the same three parts, so a reader finds
// what it does, who may call it and how it fails in the same place each time
// (test/Project/OpenApi.test.ts holds every operation to it).

export interface OperationDoc {
  /** A short imperative title, shown in the reference's sidebar. */
  readonly summary: string
  /** What the operation does. */
  readonly description: string
  /** Who may call it: one of the sentences of src/Auth/Api.ts, or `noCredential`. */
  readonly credential: string
  /**
   * The failures particular to this operation. Those of the credential itself
   * (401, 403, 429 of a key's daily quota) are described once, in the
   * document's description and on its security schemes.
   */
  readonly errors?: string
}

export const noCredential = "No credential."

/** An operation's OpenAPI summary and description: one paragraph per part, as /docs renders Markdown. */
export const operation = (doc: OperationDoc) =>
  OpenApi.annotations({
    summary: doc.summary,
    description: [doc.description, doc.credential, doc.errors].filter((part) => part !== undefined).join("\n\n")
  })
