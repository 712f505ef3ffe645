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
  const executablePath = process.env.CHROMIUM_PATH ?? await chromium.executablePath()
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
  const results = await page.evaluate(`axe.run(document, {
    runOnly: { type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa"] }
  }).then((r) => r.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help, targets: v.nodes.map((n) => String(n.target)) })))`) as Array<Violation>
  return results.filter((v) => v.impact === "serious" || v.impact === "critical")
}

/** Where the dashboard test writes its screenshots, for people to look at: DASHBOARD_SCREENSHOTS or test-results/dashboard. */
export const screenshotDir = Path.resolve(import.meta.dirname, "..", "..", process.env.DASHBOARD_SCREENSHOTS ?? "test-results/dashboard")

export const screenshot = async (page: Page, name: string) => {
  await Fs.mkdir(screenshotDir, { recursive: true })
  await page.screenshot({ path: Path.join(screenshotDir, `${name}.png`), fullPage: true })
}
