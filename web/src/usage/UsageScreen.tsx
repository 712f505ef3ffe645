import { navigate, type Route, withQuery } from "../router.tsx"
import { ApiCall, formatDate, ProblemMessage } from "../shared/components.tsx"
import { ranges, useUsage } from "./hooks.ts"

/** Bars of one series per day, with the plan's daily limit as a line; the table below holds the same numbers. */
const Chart = ({
  title,
  days,
  values,
  limit
}: {
  readonly title: string
  readonly days: ReadonlyArray<string>
  readonly values: ReadonlyArray<number>
  readonly limit: number | null
}) => {
  const width = 640
  const height = 160
  const peak = Math.max(1, ...values)
  // The limit line is drawn when it is within reach; far above the bars it would flatten them.
  const showLimit = limit !== null && limit <= peak * 4
  const top = Math.max(peak, showLimit ? limit : 0)
  const bar = width / Math.max(1, values.length)
  const y = (value: number) => height - (value / top) * (height - 10)
  return (
    <figure>
      <svg
        viewBox={`0 0 ${width} ${height}`}
        role="img"
        aria-label={`${title} per day, last ${days.length} days (the table below has the numbers)`}
        className="chart"
      >
        {values.map((value, i) => (
          <rect
            key={days[i]}
            x={i * bar + 1}
            y={y(value)}
            width={Math.max(1, bar - 2)}
            height={height - y(value)}
            className="bar"
          >
            <title>{`${days[i]}: ${value.toLocaleString("en")}`}</title>
          </rect>
        ))}
        {showLimit && <line x1={0} x2={width} y1={y(limit)} y2={y(limit)} className="limit" />}
      </svg>
      <figcaption>
        {title} per day
        {limit === null
          ? " (no daily limit)"
          : showLimit
            ? `; the dashed line is the plan's limit of ${limit.toLocaleString("en")}`
            : `; the plan's limit of ${limit.toLocaleString("en")} is far above`}
      </figcaption>
    </figure>
  )
}

/** Usage and plan: requests and tokens per day against the plan's limits. */
export const UsageScreen = ({ route }: { readonly route: Route }) => {
  const days = ranges.find((r) => r === route.query.get("days")) ?? "30"
  const { usage, status } = useUsage(days)
  const data = usage.data
  return (
    <>
      <h1>Usage and plan</h1>
      {status.error !== undefined && <ProblemMessage problem={status.error} />}
      {status.data && (
        <section aria-labelledby="plan-title" className="cards">
          <h2 id="plan-title" className="visually-hidden">
            Today
          </h2>
          <div className="card">
            <span className="muted">Plan</span>
            <strong data-testid="plan">{status.data.plan}</strong>
          </div>
          <div className="card">
            <span className="muted">Requests today</span>
            <strong data-testid="requests-today">
              {status.data.usedToday.toLocaleString("en")}
              {status.data.limit !== null && ` / ${status.data.limit.toLocaleString("en")}`}
            </strong>
          </div>
          <div className="card">
            <span className="muted">Tokens today</span>
            <strong>
              {status.data.tokensUsedToday.toLocaleString("en")}
              {status.data.tokenBudget !== null && ` / ${status.data.tokenBudget.toLocaleString("en")}`}
            </strong>
          </div>
          <div className="card">
            <span className="muted">Resets</span>
            <strong>{formatDate(status.data.resetAt)}</strong>
          </div>
        </section>
      )}
      <div className="toolbar">
        <label htmlFor="days">Period</label>
        <select
          id="days"
          value={days}
          onChange={(e) => navigate(withQuery(route, { days: e.target.value === "30" ? null : e.target.value }))}
        >
          {ranges.map((r) => (
            <option key={r} value={r}>
              Last {r} days
            </option>
          ))}
        </select>
      </div>
      {usage.error !== undefined && <ProblemMessage problem={usage.error} />}
      {data && (
        <>
          <Chart
            title="Requests"
            days={data.days.map((d) => d.day)}
            values={data.days.map((d) => d.requests)}
            limit={data.limit}
          />
          <Chart
            title="Model tokens"
            days={data.days.map((d) => d.day)}
            values={data.days.map((d) => d.tokens)}
            limit={data.tokenBudget}
          />
          <table data-testid="usage-table">
            <caption>Requests and model tokens per UTC day</caption>
            <thead>
              <tr>
                <th scope="col">Day</th>
                <th scope="col">Requests</th>
                <th scope="col">Tokens</th>
              </tr>
            </thead>
            <tbody>
              {[...data.days].reverse().map((d) => (
                <tr key={d.day}>
                  <th scope="row">{d.day}</th>
                  <td>{d.requests.toLocaleString("en")}</td>
                  <td>{d.tokens.toLocaleString("en")}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </>
      )}
      <ApiCall call={{ method: "GET", path: `/api/billing/usage?days=${days}` }} />
    </>
  )
}
