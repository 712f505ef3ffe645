import { type FormEvent, useState } from "react"
import { navigate } from "../router.tsx"
import { ApiProblem, call } from "../shared/api.ts"
import { useLoad } from "../shared/data.ts"

/** The signed-in account (null when signed out), and logging out. */
export const useSession = () => {
  const me = useLoad(
    () =>
      call((c) => c.auth.me()).then(
        (account) => account,
        (error: unknown) => {
          if (typeof error === "object" && error !== null && "status" in error && error.status === 401) return null
          throw error
        }
      ),
    []
  )
  const logout = async () => {
    await call((c) => c.auth.logout()).catch(() => undefined)
    navigate("/login", { replace: true })
    me.reload()
  }
  return { account: me.data, loading: me.loading, error: me.error, reload: me.reload, logout }
}

/** The log-in or register form: registering logs in too; the session is the HttpOnly cookie this sets. */
export const useSignIn = (mode: "login" | "register", onSignedIn: () => void) => {
  const [email, setEmail] = useState("")
  const [password, setPassword] = useState("")
  const [problem, setProblem] = useState<unknown>()
  const [busy, setBusy] = useState(false)

  const submit = async (event: FormEvent) => {
    event.preventDefault()
    setBusy(true)
    setProblem(undefined)
    try {
      if (mode === "register") await call((c) => c.auth.register({ payload: { email, password } }))
      // The session is the HttpOnly cookie this sets; the page keeps nothing.
      await call((c) => c.auth.login({ payload: { email, password } }))
      onSignedIn()
      navigate("/", { replace: true })
    } catch (error) {
      setProblem(error)
    } finally {
      setBusy(false)
    }
  }

  const fieldError = (field: string) =>
    problem instanceof ApiProblem ? problem.messagesFor(`payload.${field}`)[0] : undefined
  return { email, setEmail, password, setPassword, problem, busy, submit, fieldError }
}
