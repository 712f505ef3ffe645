import { type FormEvent, useState } from "react"
import { ApiProblem, call } from "../api.ts"
import { ApiCall, Field, ProblemMessage } from "../components.tsx"
import { Link, navigate } from "../router.tsx"

/** Log in or register: the two screens a signed-out visitor sees. */
export const AuthScreen = ({ mode, onSignedIn }: { readonly mode: "login" | "register"; readonly onSignedIn: () => void }) => {
  const [email, setEmail] = useState("")
  const [password, setPassword] = useState("")
  const [problem, setProblem] = useState<unknown>()
  const [busy, setBusy] = useState(false)
  const register = mode === "register"
  const fieldError = (field: string) => problem instanceof ApiProblem ? problem.messagesFor(`payload.${field}`)[0] : undefined

  const submit = async (event: FormEvent) => {
    event.preventDefault()
    setBusy(true)
    setProblem(undefined)
    try {
      if (register) await call((c) => c.auth.register({ payload: { email, password } }))
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

  return (
    <main id="main" className="auth">
      <h1>{register ? "Create your account" : "Log in to Agent Host"}</h1>
      <form onSubmit={submit} noValidate>
        <Field label="E-mail" error={fieldError("email")}>
          {(props) => <input {...props} type="email" autoComplete="email" required value={email} onChange={(e) => setEmail(e.target.value)} />}
        </Field>
        <Field label="Password" hint={register ? "At least 8 characters." : undefined} error={fieldError("password")}>
          {(props) => (
            <input
              {...props}
              type="password"
              autoComplete={register ? "new-password" : "current-password"}
              required
              minLength={register ? 8 : undefined}
              value={password}
              onChange={(e) => setPassword(e.target.value)}
            />
          )}
        </Field>
        <ProblemMessage problem={problem} />
        <button type="submit" disabled={busy}>{register ? "Create account" : "Log in"}</button>
      </form>
      <p>
        {register ? <>Have an account? <Link to="/login">Log in</Link></> : <>New here? <Link to="/register">Create an account</Link></>}
      </p>
      <ApiCall
        call={{ method: "POST", path: register ? "/api/auth/register" : "/api/auth/login", body: { email: email || "you@example.com", password: "..." }, credential: "none" }}
      />
    </main>
  )
}
