import { useEffect, useMemo, useRef, useState } from "react"
import { maxPageSize } from "../../../src/Agents/Api.ts"

// How the screens' data hooks load: one answer (`useLoad`), a list a page at
// a time through the API's cursors (`usePaged`), or a whole list for a choice
// among its items (`allPages`). No list is cut at a fixed length.

/** A page of a list, as every list route of the API answers it. */
export interface Page<A> {
  readonly data: ReadonlyArray<A>
  readonly total: number
  readonly nextCursor: string | null
}

/** How many items a list shows at first, and adds at each "Load more". */
export const pageSize = 50

/** The `limit` and `cursor` of a request for the page after `cursor` (the first page without one). */
export const pageQuery = (cursor: string | undefined, limit = pageSize) =>
  cursor === undefined ? { limit } : { limit, cursor }

/** Loads with `load` when `deps` change; `reload` loads again. */
export const useLoad = <A>(load: () => Promise<A>, deps: ReadonlyArray<unknown>) => {
  const [state, setState] = useState<{ data?: A; error?: unknown; loading: boolean }>({ loading: true })
  const [version, setVersion] = useState(0)
  useEffect(() => {
    let live = true
    setState((previous) => ({ ...previous, loading: true }))
    load().then(
      (data) => live && setState({ data, loading: false }),
      (error: unknown) => live && setState({ error, loading: false })
    )
    return () => {
      live = false
    }
  }, [...deps, version])
  return { ...state, reload: () => setVersion((v) => v + 1) }
}

/** Every item of a list, followed through its cursors in pages as large as the API gives: for a choice among them. */
export const allPages = async <A>(
  fetchPage: (cursor: string | undefined, limit: number) => Promise<Page<A>>
): Promise<Array<A>> => {
  const items: Array<A> = []
  let cursor: string | undefined
  do {
    const page = await fetchPage(cursor, maxPageSize)
    items.push(...page.data)
    cursor = page.nextCursor ?? undefined
  } while (cursor !== undefined)
  return items
}

export interface Paged<A> {
  /** The items of the pages loaded so far, in the list's order; undefined before the first page. */
  readonly items: ReadonlyArray<A> | undefined
  /** How many the whole list holds, as of the last page read. */
  readonly total: number | undefined
  readonly hasMore: boolean
  readonly loading: boolean
  readonly loadingMore: boolean
  readonly error: unknown
  /** Adds the next page. */
  readonly loadMore: () => void
  /** Reads the pages shown again, and the next one too when the list was shown to its end (so an item added there shows). */
  readonly reload: () => void
}

interface PagedState<A> {
  readonly pages?: ReadonlyArray<Page<A>>
  readonly error?: unknown
  readonly loading: boolean
  readonly loadingMore: boolean
}

/**
 * A list read a page at a time with `fetchPage` (given the cursor of the page
 * to read, none for the first), from its first page again when `deps` change.
 * No list at all while `fetchPage` is undefined (nothing selected).
 */
export const usePaged = <A>(
  fetchPage: ((cursor: string | undefined) => Promise<Page<A>>) | undefined,
  deps: ReadonlyArray<unknown>
): Paged<A> => {
  const [state, setState] = useState<PagedState<A>>({ loading: true, loadingMore: false })
  const latest = useRef(fetchPage)
  latest.current = fetchPage
  const shown = useRef(state)
  shown.current = state
  // `list` counts the lists read (another one when `deps` change), `read` the
  // reads from the first page: an older read's answer is dropped, and so is a
  // "Load more" of another list.
  const list = useRef(0)
  const read = useRef(0)

  const walk = (count: number, keepShown: boolean) => {
    const fetch = latest.current
    const mine = ++read.current
    if (fetch === undefined) {
      setState({ loading: false, loadingMore: false })
      return
    }
    setState((s) => ({ ...s, loading: true }))
    const pages: Array<Page<A>> = []
    // As many pages as asked for, or (read again) as are shown when more were loaded meanwhile.
    const wanted = () => (keepShown ? Math.max(count, shown.current.pages?.length ?? 0) : count)
    const from = (cursor: string | undefined): Promise<void> =>
      fetch(cursor).then((page) => {
        pages.push(page)
        return page.nextCursor !== null && pages.length < wanted() ? from(page.nextCursor) : undefined
      })
    from(undefined).then(
      () => read.current === mine && setState((s) => ({ pages, loading: false, loadingMore: s.loadingMore })),
      (error: unknown) =>
        read.current === mine && setState((s) => ({ error, loading: false, loadingMore: s.loadingMore }))
    )
  }

  useEffect(() => {
    list.current++
    walk(1, false)
    return () => {
      read.current++
    }
  }, deps)

  const items = useMemo(() => state.pages?.flatMap((page) => page.data), [state.pages])
  const last = state.pages?.[state.pages.length - 1]

  // The cursor of the page a "Load more" is reading, so that a second click before it ends reads nothing twice.
  const reading = useRef<string>(undefined)
  const loadMore = () => {
    const fetch = latest.current
    const pages = shown.current.pages
    const cursor = pages?.[pages.length - 1]?.nextCursor
    if (
      fetch === undefined ||
      pages === undefined ||
      cursor === undefined ||
      cursor === null ||
      reading.current === cursor
    )
      return
    reading.current = cursor
    const mine = list.current
    // The page is added where it follows: after the last page shown, if that
    // still ends where it began (a read from the first page may have replaced
    // the pages meanwhile, and then has read this one too).
    const follows = (s: PagedState<A>) => list.current === mine && s.pages?.[s.pages.length - 1]?.nextCursor === cursor
    setState((s) => ({ ...s, loadingMore: true }))
    fetch(cursor)
      .finally(() => {
        if (reading.current === cursor) reading.current = undefined
      })
      .then(
        (page) =>
          setState((s) => ({
            ...s,
            ...(follows(s) ? { pages: [...s.pages!, page] } : {}),
            loadingMore: reading.current !== undefined
          })),
        (error: unknown) =>
          setState((s) => ({
            ...s,
            ...(list.current === mine ? { error } : {}),
            loadingMore: reading.current !== undefined
          }))
      )
  }

  const reload = () => {
    const pages = shown.current.pages ?? []
    const complete = pages.length > 0 && pages[pages.length - 1]!.nextCursor === null
    walk(Math.max(1, pages.length + (complete ? 1 : 0)), true)
  }

  return {
    items,
    total: last?.total,
    hasMore: last !== undefined && last.nextCursor !== null,
    loading: state.loading,
    loadingMore: state.loadingMore,
    error: state.error,
    loadMore,
    reload
  }
}

/**
 * The item of `list` that `id` names: from the pages loaded when it is there,
 * else read alone with `get` (a link to an item on a page not loaded yet, or
 * one just made). Undefined while unknown, and when there is no such item.
 */
export const useSelected = <A extends { readonly id: string }, Id extends string>(
  list: Paged<A>,
  id: Id | null,
  get: (id: Id) => Promise<A>
) => {
  const listed = id === null ? undefined : list.items?.find((item) => item.id === id)
  const needed = id !== null && list.items !== undefined && listed === undefined
  const alone = useLoad(() => (needed ? get(id).catch(() => undefined) : Promise.resolve(undefined)), [id, needed])
  return { item: listed ?? (alone.data?.id === id ? alone.data : undefined), reload: alone.reload }
}
