import { type FormEvent, useState } from "react"
import { allScopes, type ApiKey, defaultScopes, type Scope } from "../../../src/Auth/Api.ts"
import { ApiProblem, call } from "../shared/api.ts"
import { pageQuery, usePaged } from "../shared/data.ts"

// Expiry presets, in days; the form shows the date each one gives.
export const expiryPresets = [
  { value: "30", label: "30 days" },
  { value: "90", label: "90 days" },
  { value: "365", label: "1 year" },
  { value: "never", label: "Never" }
] as const

const expiryOf = (preset: string, now = Date.now()): Date | null =>
  preset === "never" ? null : new Date(now + Number(preset) * 86_400_000)

/** The tenant's keys, a page at a time, with making one (its secret kept until dismissed) and revoking. */
export const useKeys = () => {
  const keys = usePaged((cursor) => call((c) => c.keys.list({ query: pageQuery(cursor) })), [])
  const [name, setName] = useState("")
  // Deciding approvals is ticked, never given by default.
  const [scopes, setScopes] = useState<ReadonlyArray<Scope>>(defaultScopes)
  const [preset, setPreset] = useState<string>("90")
  const [problem, setProblem] = useState<unknown>()
  const [created, setCreated] = useState<{ key: string; name: string }>()
  const expiry = expiryOf(preset)
  const request = { name: name || "my key", scopes, expiresAt: expiry === null ? null : expiry.toISOString() }

  const create = async (event: FormEvent) => {
    event.preventDefault()
    setProblem(undefined)
    try {
      const key = await call((c) => c.keys.create({ payload: { ...request, name } }))
      setCreated({ key: key.key, name: key.name })
      setName("")
      keys.reload()
    } catch (error) {
      setProblem(error)
    }
  }

  const revoke = async (key: ApiKey) => {
    try {
      await call((c) => c.keys.revoke({ params: { id: key.id } }))
    } catch (error) {
      setProblem(error)
    }
    keys.reload()
  }

  /** Turns `scope` on or off, keeping the scopes in their usual order. */
  const toggleScope = (scope: Scope, on: boolean) =>
    setScopes(on ? allScopes.filter((s) => s === scope || scopes.includes(s)) : scopes.filter((s) => s !== scope))

  const fieldError = (path: string) => (problem instanceof ApiProblem ? problem.messagesFor(path)[0] : undefined)

  return {
    keys: keys.items,
    list: keys,
    error: keys.error,
    form: { name, setName, scopes, toggleScope, preset, setPreset, expiry, request },
    create,
    created,
    dismissCreated: () => setCreated(undefined),
    revoke,
    problem,
    fieldError
  }
}
