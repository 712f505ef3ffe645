import { type AnchorHTMLAttributes, type MouseEvent, useEffect, useState } from "react"

// Every view is a URL under /app: its path picks the screen, its query holds
// the filters and the selection, so a view can be linked and reloaded.

export const base = "/app"

// A path under /app: `/app` itself or `/app/...`, not `/approvals`.
const underBase = (path: string) => path === base || path.startsWith(`${base}/`) || path.startsWith(`${base}?`)

const listeners = new Set<() => void>()
const notify = () => listeners.forEach((listener) => listener())
window.addEventListener("popstate", notify)

/** Goes to `to` (a path under /app, with its query), adding a history entry unless `replace`. */
export const navigate = (to: string, options: { readonly replace?: boolean } = {}) => {
  const url = underBase(to) ? to : `${base}${to === "/" ? "" : to}`
  if (options.replace) history.replaceState(null, "", url)
  else history.pushState(null, "", url)
  notify()
}

export interface Route {
  /** The path under /app: "/", "/keys", "/agents"... */
  readonly path: string
  readonly query: URLSearchParams
}

const current = (): Route => {
  const path = underBase(location.pathname) ? location.pathname.slice(base.length) || "/" : "/"
  return {
    path: path.length > 1 && path.endsWith("/") ? path.slice(0, -1) : path,
    query: new URLSearchParams(location.search)
  }
}

export const useRoute = (): Route => {
  const [route, setRoute] = useState(current)
  useEffect(() => {
    const listener = () => setRoute(current())
    listeners.add(listener)
    return () => void listeners.delete(listener)
  }, [])
  return route
}

/** The current query with `changes` applied (an empty or null value removes the key), as a path to navigate to. */
export const withQuery = (route: Route, changes: Record<string, string | null | undefined>) => {
  const query = new URLSearchParams(route.query)
  for (const [key, value] of Object.entries(changes)) {
    if (value === null || value === undefined || value === "") query.delete(key)
    else query.set(key, value)
  }
  const search = query.toString()
  return `${route.path}${search === "" ? "" : `?${search}`}`
}

/** A link inside the dashboard: a real anchor (open in a new tab works), navigated in place on a plain click. */
export const Link = ({ to, ...props }: AnchorHTMLAttributes<HTMLAnchorElement> & { readonly to: string }) => {
  const href = `${base}${to === "/" ? "" : to}`
  const onClick = (event: MouseEvent<HTMLAnchorElement>) => {
    if (
      event.defaultPrevented ||
      event.button !== 0 ||
      event.metaKey ||
      event.ctrlKey ||
      event.shiftKey ||
      event.altKey
    )
      return
    event.preventDefault()
    navigate(to)
  }
  return <a {...props} href={href} onClick={onClick} />
}
