import * as Schema from "effect/Schema"
import * as Model from "effect/schema/Model"
import * as Entity from "../Domain/Entity.ts"
import { SecretId } from "../Domain/Ids.ts"
import { text } from "../Domain/Input.ts"

export const maxSecretNameChars = 64
export const maxSecretValueChars = 8192

/** What `{{secrets.NAME}}` names: a letter or `_`, then letters, digits and `_`. */
export const SecretName = text(
  Schema.isMaxLength(maxSecretNameChars, { message: `Expected a name of at most ${maxSecretNameChars} characters` }),
  Schema.isPattern(/^[A-Za-z_][A-Za-z0-9_]*$/, {
    message: "Expected a name of letters, digits and _, not starting with a digit"
  })
).annotate({
  description: "Unique in the tenant, `^[A-Za-z_][A-Za-z0-9_]{0,63}$`: what tools name the secret by."
})

/**
 * A secret's value as a client sends it: redacted as soon as it is decoded, so
 * nothing that prints it (a log line, an error, a trace) shows it. Every check
 * has its own message: a default one would quote the value.
 */
export const SecretValue = Schema.RedactedFromValue(
  text(
    Schema.isMinLength(1, { message: "Expected a non-empty value" }),
    Schema.isMaxLength(maxSecretValueChars, {
      message: `Expected a value of at most ${maxSecretValueChars} characters`
    })
  ).annotate({ description: `1 to ${maxSecretValueChars} characters; write-only: never shown again.` })
)

/**
 * A secret of the vault, declared once: its row as read and its JSON (no
 * value: only its last four characters), what a client sends to create it
 * (`Secret.jsonCreate`: name and value) and to rotate it (`Secret.jsonUpdate`:
 * the new value). The value is stored sealed (Vault.ts) by statements of the
 * repository's own; no read and no JSON variant holds it.
 */
export class Secret extends Model.Class<Secret>("Secret")({
  id: Entity.id(SecretId),
  name: Model.Field({ select: Schema.String, json: Schema.String, jsonCreate: SecretName }),
  value: Model.Field({ jsonCreate: SecretValue, jsonUpdate: SecretValue }),
  lastFour: Model.Field({
    select: Schema.String,
    json: Schema.String.annotate({
      description:
        "The value's last four characters, to tell secrets apart; empty when the value has fewer than " +
        "12, where four would give away too much of it."
    })
  }),
  createdAt: Entity.generated(Schema.Date),
  rotatedAt: Model.Field({
    select: Schema.NullOr(Schema.Date),
    json: Schema.NullOr(Schema.Date).annotate({ description: "When the value was last replaced; null: never." })
  })
}) {}

/** What the list and the answers show of a value: its last four characters, for a value of 12 or more. */
export const lastFourOf = (value: string): string => {
  // By code point: a cut surrogate pair would be no text at all.
  const characters = Array.from(value)
  return characters.length < 12 ? "" : characters.slice(-4).join("")
}
