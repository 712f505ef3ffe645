import { useState } from "react"
import { allScopes, type ApiKey, type Scope } from "../../../src/Auth/Api.ts"
import { ApiCall, Confirm, CopyButton, Field, formatDate, LoadMore, ProblemMessage } from "../shared/components.tsx"
import { expiryPresets, useKeys } from "./hooks.ts"

const scopeHelp: Record<Scope, string> = {
  read: "list agents",
  chat: "chat with agents",
  execute: "run orchestrations and read executions",
  teams: "list and run teams",
  approvals: "read and decide approvals of tool calls"
}

/** API keys: make one (its secret shown once), see them with their use, revoke. */
export const KeysScreen = () => {
  const { keys, list, error, form, create, created, dismissCreated, revoke, problem, fieldError } = useKeys()
  const [revoking, setRevoking] = useState<ApiKey>()

  return (
    <>
      <h1>API keys</h1>
      <p>
        Programs call <code>/api/v1</code> and <code>/api/public</code> with a key. Its secret is shown once, when it is
        made.
      </p>

      {created && (
        <section className="reveal" aria-labelledby="reveal-title">
          <h2 id="reveal-title">Your new key “{created.name}”</h2>
          <p>Copy it now: it will not be shown again.</p>
          <p>
            <output className="secret" data-testid="new-key">
              {created.key}
            </output>
          </p>
          <CopyButton text={created.key} label="Copy the key" />
          <pre tabIndex={0}>
            <code>{`curl -s '${location.origin}/api/v1/agents' -H "authorization: Bearer ${created.key}"`}</code>
          </pre>
          <button type="button" className="secondary" onClick={dismissCreated}>
            I have stored it
          </button>
        </section>
      )}

      <section aria-labelledby="create-title">
        <h2 id="create-title">Create a key</h2>
        <form onSubmit={create} noValidate>
          <Field label="Name" hint="What uses it, to tell keys apart." error={fieldError("payload.name")}>
            {(props) => (
              <input
                {...props}
                required
                maxLength={200}
                value={form.name}
                onChange={(e) => form.setName(e.target.value)}
              />
            )}
          </Field>
          <fieldset>
            <legend>Scopes</legend>
            {allScopes.map((scope) => (
              <label key={scope} className="check">
                <input
                  type="checkbox"
                  checked={form.scopes.includes(scope)}
                  onChange={(e) => form.toggleScope(scope, e.target.checked)}
                />
                <code>{scope}</code>: {scopeHelp[scope]}
              </label>
            ))}
            {fieldError("payload.scopes") && <p className="field-error">{fieldError("payload.scopes")}</p>}
          </fieldset>
          <Field
            label="Expires"
            hint={form.expiry === null ? "The key works until it is revoked." : `On ${formatDate(form.expiry)}.`}
            error={fieldError("payload.expiresAt")}
          >
            {(props) => (
              <select {...props} value={form.preset} onChange={(e) => form.setPreset(e.target.value)}>
                {expiryPresets.map((p) => (
                  <option key={p.value} value={p.value}>
                    {p.label}
                  </option>
                ))}
              </select>
            )}
          </Field>
          <ProblemMessage problem={problem} />
          <button type="submit">Create key</button>
        </form>
        <ApiCall call={{ method: "POST", path: "/api/keys", body: form.request }} />
      </section>

      <section aria-labelledby="list-title">
        <h2 id="list-title">Your keys</h2>
        {error !== undefined && <ProblemMessage problem={error} />}
        {keys && keys.length === 0 && <p>No keys yet.</p>}
        {keys && keys.length > 0 && (
          <table>
            <caption className="visually-hidden">API keys</caption>
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Prefix</th>
                <th scope="col">Scopes</th>
                <th scope="col">Created</th>
                <th scope="col">Expires</th>
                <th scope="col">Last used</th>
                <th scope="col">
                  <span className="visually-hidden">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {keys.map((key) => (
                <tr key={key.id}>
                  <th scope="row">{key.name}</th>
                  <td>
                    <code>{key.prefix}</code>
                  </td>
                  <td>{key.scopes.join(", ")}</td>
                  <td>{formatDate(key.createdAt)}</td>
                  <td>{formatDate(key.expiresAt)}</td>
                  <td>{formatDate(key.lastUsedAt, "not yet")}</td>
                  <td>
                    <button
                      type="button"
                      className="danger"
                      onClick={() => setRevoking(key)}
                      aria-label={`Revoke ${key.name}`}
                    >
                      Revoke
                    </button>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
        <LoadMore list={list} label="Load more keys" />
        <ApiCall call={{ method: "GET", path: "/api/keys" }} />
      </section>

      <Confirm
        open={revoking !== undefined}
        title={`Revoke “${revoking?.name ?? ""}”?`}
        confirmLabel="Revoke key"
        onCancel={() => setRevoking(undefined)}
        onConfirm={() => {
          if (revoking === undefined) return
          setRevoking(undefined)
          void revoke(revoking)
        }}
      >
        <p>Programs using this key get 401 from now on. This cannot be undone.</p>
      </Confirm>
    </>
  )
}
