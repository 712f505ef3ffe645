import * as Redacted from "effect/Redacted"
import { type FormEvent, useState } from "react"
import type { Secret } from "../../../src/Secrets/Api.ts"
import { ApiProblem, call } from "../shared/api.ts"
import { allPages, pageQuery, useLoad, usePaged } from "../shared/data.ts"

// A secret's value is typed into a password field, sent once and forgotten:
// the form clears it as soon as the service has it, and no answer holds it.

/** Every secret of the tenant (names only), for the hints of the tools' form; undefined until read. */
export const useAllSecrets = () =>
  useLoad(() => allPages((cursor, limit) => call((c) => c.secrets.list({ query: pageQuery(cursor, limit) }))), []).data

/** The tenant's secrets, a page at a time, with creating, rotating and deleting one. */
export const useSecrets = () => {
  const list = usePaged((cursor) => call((c) => c.secrets.list({ query: pageQuery(cursor) })), [])
  const [name, setName] = useState("")
  const [value, setValue] = useState("")
  const [problem, setProblem] = useState<unknown>()
  const [saved, setSaved] = useState("")

  const create = async (event: FormEvent) => {
    event.preventDefault()
    setProblem(undefined)
    setSaved("")
    try {
      const made = await call((c) => c.secrets.create({ payload: { name, value: Redacted.make(value) } }))
      setName("")
      setValue("")
      setSaved(`Stored ${made.name}.`)
      list.reload()
    } catch (error) {
      setProblem(error)
    }
  }

  /** Replaces the value of `secret`; resolves to whether it was replaced (the problem is shown otherwise). */
  const rotate = async (secret: Secret, newValue: string) => {
    setProblem(undefined)
    setSaved("")
    try {
      await call((c) => c.secrets.update({ params: { id: secret.id }, payload: { value: Redacted.make(newValue) } }))
      setSaved(`Rotated ${secret.name}.`)
      list.reload()
      return true
    } catch (error) {
      setProblem(error)
      return false
    }
  }

  const remove = async (secret: Secret) => {
    setProblem(undefined)
    setSaved("")
    try {
      await call((c) => c.secrets.remove({ params: { id: secret.id } }))
      setSaved(`Deleted ${secret.name}.`)
    } catch (error) {
      setProblem(error)
    }
    list.reload()
  }

  const fieldError = (path: string) => (problem instanceof ApiProblem ? problem.messagesFor(path)[0] : undefined)

  return { list, form: { name, setName, value, setValue }, create, rotate, remove, problem, saved, fieldError }
}
