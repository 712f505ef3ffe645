import * as HttpApiGroup from "effect/http-api/HttpApiGroup"
import * as OpenApi from "effect/http-api/OpenApi"
import { SessionAuth, sessionCredential } from "../Auth/Api.ts"
import { managementEndpoints } from "../Domain/Management.ts"
import { PageOf } from "../Domain/Page.ts"
import { Conflict, NotFound, QuotaReached } from "../Domain/Problems.ts"
import { maxSecretValueChars, Secret } from "./Secret.ts"

export { Secret }

export const SecretList = PageOf(Secret.json)

export class SecretsApi extends HttpApiGroup.make("secrets")
  .add(
    ...managementEndpoints({
      name: "secret",
      model: Secret,
      credential: sessionCredential,
      errors: { create: [Conflict, QuotaReached], update: NotFound },
      docs: {
        list: {
          description:
            "The tenant's secrets, a page at a time (`limit`, `cursor`): names, last four characters and " +
            "times, never a value."
        },
        create: {
          description:
            "Stores a secret, encrypted at rest, under a name tools refer to it by. The value is write-only: " +
            "no answer, log line or trace ever shows it again.",
          errors:
            `400 on an invalid name or a value that is empty or over ${maxSecretValueChars} characters, 409 when ` +
            "the tenant has a secret of that name, 429 when it has as many secrets as its plan allows " +
            "(MAX_SECRETS)."
        },
        get: { description: "The secret's name, last four characters and times; never its value." },
        update: {
          summary: "Rotate a secret",
          description: "Replaces the secret's value; tools use the new one from their next call.",
          errors: `400 on a value that is empty or over ${maxSecretValueChars} characters, 404 when the secret is not the tenant's.`
        },
        remove: { description: "Deletes the secret and its value." }
      }
    })
  )
  .middleware(SessionAuth)
  .prefix("/api/secrets")
  .annotateMerge(
    OpenApi.annotations({
      title: "Secrets",
      description:
        "A tenant's secrets vault: values tools send at call time (API keys, tokens), encrypted at rest and " +
        "never shown again once written."
    })
  ) {}
