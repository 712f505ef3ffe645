import { call } from "../shared/api.ts"
import { useLoad } from "../shared/data.ts"

/** The periods the usage screen offers, in days. */
export const ranges = ["7", "30", "90"] as const
export type Range = (typeof ranges)[number]

/** Requests and tokens per day over `days`, and the plan with today's use. */
export const useUsage = (days: Range) => {
  const usage = useLoad(() => call((c) => c.billing.usage({ query: { days: Number(days) } })), [days])
  const status = useLoad(() => call((c) => c.billing.status()), [])
  return { usage, status }
}
