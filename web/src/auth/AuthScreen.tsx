import { Link } from "../router.tsx"
import { ApiCall, Field, ProblemMessage } from "../shared/components.tsx"
import { useSignIn } from "./hooks.ts"

/** Log in or register: the two screens a signed-out visitor sees. */
export const AuthScreen = ({
  mode,
  onSignedIn
}: {
  readonly mode: "login" | "register"
  readonly onSignedIn: () => void
}) => {
  const { email, setEmail, password, setPassword, problem, busy, submit, fieldError } = useSignIn(mode, onSignedIn)
  const register = mode === "register"
  return (
    <main id="main" className="auth">
      <h1>{register ? "Create your account" : "Log in to Agent Host"}</h1>
      <form onSubmit={submit} noValidate>
        <Field label="E-mail" error={fieldError("email")}>
          {(props) => (
            <input
              {...props}
              type="email"
              autoComplete="email"
              required
              value={email}
              onChange={(e) => setEmail(e.target.value)}
            />
          )}
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
        <button type="submit" disabled={busy}>
          {register ? "Create account" : "Log in"}
        </button>
      </form>
      <p>
        {register ? (
          <>
            Have an account? <Link to="/login">Log in</Link>
          </>
        ) : (
          <>
            New here? <Link to="/register">Create an account</Link>
          </>
        )}
      </p>
      <ApiCall
        call={{
          method: "POST",
          path: register ? "/api/auth/register" : "/api/auth/login",
          body: { email: email || "you@example.com", password: "..." },
          credential: "none"
        }}
      />
    </main>
  )
}
