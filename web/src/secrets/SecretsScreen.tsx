import { type FormEvent, useState } from "react"
import type { Secret } from "../../../src/Secrets/Api.ts"
import { Link } from "../router.tsx"
import { ApiCall, Confirm, Field, formatDate, LoadMore, ProblemMessage } from "../shared/components.tsx"
import { useSecrets } from "./hooks.ts"

/** Replacing a secret's value: a password field, sent once, then cleared. */
const RotateForm = ({
  secret,
  onRotate,
  onCancel
}: {
  readonly secret: Secret
  readonly onRotate: (value: string) => Promise<boolean>
  readonly onCancel: () => void
}) => {
  const [value, setValue] = useState("")
  const submit = async (event: FormEvent) => {
    event.preventDefault()
    if (await onRotate(value)) setValue("")
  }
  return (
    <section aria-labelledby="rotate-title" className="detail">
      <h2 id="rotate-title">Rotate {secret.name}</h2>
      <form onSubmit={submit} noValidate>
        <Field label="New value" hint="Tools use it from their next call. The old value is gone for good.">
          {(props) => (
            <input
              {...props}
              type="password"
              autoComplete="new-password"
              spellCheck={false}
              // biome-ignore lint/a11y/noAutofocus: the form opens on the user's click on Rotate, for this field
              autoFocus
              value={value}
              onChange={(e) => setValue(e.target.value)}
            />
          )}
        </Field>
        <div className="actions">
          <button type="submit">Rotate</button>
          <button type="button" className="secondary" onClick={onCancel}>
            Cancel
          </button>
        </div>
      </form>
    </section>
  )
}

/** Secrets: the vault's names with their last four characters; create (the value write-only), rotate, delete. */
export const SecretsScreen = () => {
  const { list, form, create, rotate, remove, problem, saved, fieldError } = useSecrets()
  const [rotating, setRotating] = useState<Secret>()
  const [deleting, setDeleting] = useState<Secret>()

  return (
    <>
      <h1>Secrets</h1>
      <p>
        Credentials your <Link to="/tools">tools</Link> send, such as API keys: a tool names one as{" "}
        <code>{"{{secrets.NAME}}"}</code> in a header value or its body, and gets the value only when it makes a call. A
        value is write-only: it is never shown again, here or by the API.
      </p>

      <section aria-labelledby="create-title">
        <h2 id="create-title">Store a secret</h2>
        <form onSubmit={create} noValidate>
          <Field
            label="Name"
            hint="Letters, digits and _, not starting with a digit, such as SHOP_TOKEN."
            error={fieldError("payload.name")}
          >
            {(props) => (
              <input
                {...props}
                required
                maxLength={64}
                spellCheck={false}
                autoComplete="off"
                value={form.name}
                onChange={(e) => form.setName(e.target.value)}
              />
            )}
          </Field>
          <Field label="Value" hint="1 to 8,192 characters." error={fieldError("payload.value")}>
            {(props) => (
              <input
                {...props}
                type="password"
                required
                autoComplete="new-password"
                spellCheck={false}
                value={form.value}
                onChange={(e) => form.setValue(e.target.value)}
              />
            )}
          </Field>
          <button type="submit">Store secret</button>
        </form>
        <ApiCall
          call={{ method: "POST", path: "/api/secrets", body: { name: form.name || "SHOP_TOKEN", value: "..." } }}
        />
      </section>

      <ProblemMessage problem={problem} />
      <p role="status" className="saved">
        {saved}
      </p>

      {rotating && (
        <RotateForm
          key={rotating.id}
          secret={rotating}
          onCancel={() => setRotating(undefined)}
          onRotate={async (value) => {
            const done = await rotate(rotating, value)
            if (done) setRotating(undefined)
            return done
          }}
        />
      )}

      <section aria-labelledby="list-title">
        <h2 id="list-title">Your secrets</h2>
        {list.error !== undefined && <ProblemMessage problem={list.error} />}
        {list.items && list.items.length === 0 && <p>No secrets yet.</p>}
        {list.items && list.items.length > 0 && (
          <table data-testid="secrets">
            <caption className="visually-hidden">Secrets</caption>
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Last four</th>
                <th scope="col">Created</th>
                <th scope="col">Rotated</th>
                <th scope="col">
                  <span className="visually-hidden">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {list.items.map((secret) => (
                <tr key={secret.id}>
                  <th scope="row">
                    <code>{secret.name}</code>
                  </th>
                  <td>
                    {secret.lastFour === "" ? (
                      <span className="muted" title="Values under 12 characters show none of it">
                        none shown
                      </span>
                    ) : (
                      <code data-testid="last-four">…{secret.lastFour}</code>
                    )}
                  </td>
                  <td>{formatDate(secret.createdAt)}</td>
                  <td>{formatDate(secret.rotatedAt)}</td>
                  <td>
                    <div className="actions">
                      <button
                        type="button"
                        className="secondary"
                        aria-label={`Rotate ${secret.name}`}
                        onClick={() => setRotating(secret)}
                      >
                        Rotate
                      </button>
                      <button
                        type="button"
                        className="danger"
                        aria-label={`Delete ${secret.name}`}
                        onClick={() => setDeleting(secret)}
                      >
                        Delete
                      </button>
                    </div>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
        <LoadMore list={list} label="Load more secrets" />
        <ApiCall call={{ method: "GET", path: "/api/secrets" }} />
      </section>

      <Confirm
        open={deleting !== undefined}
        title={`Delete “${deleting?.name ?? ""}”?`}
        confirmLabel="Delete secret"
        onCancel={() => setDeleting(undefined)}
        onConfirm={() => {
          if (deleting === undefined) return
          setDeleting(undefined)
          if (rotating?.id === deleting.id) setRotating(undefined)
          void remove(deleting)
        }}
      >
        <p>Tools that name it fail their calls until a secret of that name is stored again. This cannot be undone.</p>
      </Confirm>
    </>
  )
}
