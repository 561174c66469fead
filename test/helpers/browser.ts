import { existsSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Test } from 'tap'
import { chromium } from 'playwright-core'
import type { BrowserContext, Page } from 'playwright-core'

/**
 * Debian's Chromium, driven by playwright-core, for the live page tests: a fresh profile per
 * test, closed and removed in teardown. Locally a missing Chromium skips the test, saying so; in
 * CI (`CI=true`) it fails instead.
 */

const CHROMIUM = '/usr/bin/chromium'
const ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync']

/** A page in a headless Chromium (its profile folder in `profile`), or undefined after a skip (or a CI failure). */
export async function openChromium(t: Test): Promise<{ page: Page; browser: BrowserContext; profile: string } | undefined> {
  if (!existsSync(CHROMIUM)) {
    if (process.env.CI === 'true') t.fail('chromium is not installed, and CI must run this test (apt-get install chromium)')
    else t.pass('chromium is needed', { skip: 'chromium is not installed (apt-get install chromium to run this; with CI=true it fails instead)' })
    return undefined
  }
  const profile = mkdtempSync(join(tmpdir(), 'tokentap-chromium-'))
  const browser = await chromium.launchPersistentContext(profile, { executablePath: CHROMIUM, headless: true, args: ARGS, viewport: { width: 1400, height: 1100 } })
  t.teardown(async () => {
    await browser.close()
    rmSync(profile, { recursive: true, force: true })
  })
  const page = browser.pages()[0] ?? (await browser.newPage())
  return { page, browser, profile }
}
