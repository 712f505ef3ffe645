import chromium from "@sparticuz/chromium"
import axe from "axe-core"
import * as Fs from "node:fs/promises"
import * as Path from "node:path"
import { type Browser, chromium as playwright, type Page } from "playwright-core"

/**
 * A headless Chromium from the npm registry (@sparticuz/chromium unpacks the
 * binary its package ships), or the one at CHROMIUM_PATH on platforms it does
 * not cover.
 */
export const launch = async (): Promise<Browser> => {
  const executablePath = process.env.CHROMIUM_PATH ?? (await chromium.executablePath())
  return playwright.launch({
    executablePath,
    args: process.env.CHROMIUM_PATH ? [] : chromium.args,
    headless: true
  })
}

export interface Violation {
  readonly id: string
  readonly impact: string | null
  readonly help: string
  readonly targets: ReadonlyArray<string>
}

/**
 * axe-core's WCAG 2.0, 2.1 and 2.2 A and AA rules on the page as it is; the
 * serious and critical violations. (Evaluated through the DevTools protocol,
 * which the page's Content-Security-Policy does not govern.)
 */
export const seriousViolations = async (page: Page): Promise<Array<Violation>> => {
  if (!(await page.evaluate("typeof window.axe !== 'undefined'"))) await page.evaluate(axe.source)
  const results = (await page.evaluate(`axe.run(document, {
    runOnly: { type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa"] }
  }).then((r) => r.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help, targets: v.nodes.map((n) => String(n.target)) })))`)) as Array<Violation>
  return results.filter((v) => v.impact === "serious" || v.impact === "critical")
}

/** Where the dashboard test writes its screenshots, for people to look at: DASHBOARD_SCREENSHOTS or test-results/dashboard. */
export const screenshotDir = Path.resolve(
  import.meta.dirname,
  "..",
  "..",
  process.env.DASHBOARD_SCREENSHOTS ?? "test-results/dashboard"
)

/** Empties the screenshot folder, so it shows one run. */
export const resetScreenshots = () => Fs.rm(screenshotDir, { recursive: true, force: true })

export const screenshot = async (page: Page, name: string) => {
  await Fs.mkdir(screenshotDir, { recursive: true })
  await page.screenshot({ path: Path.join(screenshotDir, `${name}.png`), fullPage: true })
}

/**
 * The visible controls of the page that Tab never reaches (an open modal
 * dialog keeps focus inside, so then only its controls count). Tabs through
 * the page once from the top.
 */
export const unreachableByKeyboard = async (page: Page): Promise<Array<string>> => {
  const describe = `(el) => (el.getAttribute("aria-label") || el.textContent || el.getAttribute("name") || el.id || el.tagName).trim().slice(0, 60)`
  const controls = (await page.evaluate(`(() => {
    const describe = ${describe}
    const root = document.querySelector("dialog[open]") ?? document
    const all = [...root.querySelectorAll("a[href], button, input, select, textarea, summary, [tabindex]:not([tabindex='-1'])")]
    const visible = all.filter((el) => !el.disabled && el.getAttribute("tabindex") !== "-1" &&
      (el.checkVisibility({ visibilityProperty: true }) || el.matches("input[type=file]")))
    visible.forEach((el, i) => el.setAttribute("data-focus-probe", String(i)))
    return visible.length
  })()`)) as number
  await page.evaluate(`document.activeElement?.blur()`)
  const reached = new Set<string>()
  for (let i = 0; i < controls * 2 + 5; i++) {
    await page.keyboard.press("Tab")
    const probe = (await page.evaluate(`document.activeElement?.getAttribute("data-focus-probe") ?? null`)) as
      | string
      | null
    if (probe !== null) reached.add(probe)
    if (reached.size === controls) break
  }
  const missed = (await page.evaluate(`(() => {
    const describe = ${describe}
    const reached = new Set(${JSON.stringify([...reached])})
    const missed = [...document.querySelectorAll("[data-focus-probe]")].filter((el) => !reached.has(el.getAttribute("data-focus-probe"))).map(describe)
    document.querySelectorAll("[data-focus-probe]").forEach((el) => el.removeAttribute("data-focus-probe"))
    return missed
  })()`)) as Array<string>
  return missed
}
