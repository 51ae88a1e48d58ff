/**
 * A real browser for UI tests: Debian's Chromium, headless, driven by playwright-core. A missing browser fails the
 * test run (CI installs it: `apt-get install chromium`); a skipped UI test checks nothing.
 */
import { accessSync, constants } from 'node:fs';
import { chromium, type Browser, type Page } from 'playwright-core';

export const chromiumPath = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

export async function launchBrowser(): Promise<Browser> {
  try {
    accessSync(chromiumPath, constants.X_OK);
  } catch {
    throw new Error(`The UI tests need Chromium at ${chromiumPath} (apt-get install chromium, or set CHROMIUM_PATH).`);
  }
  return chromium.launch({
    executablePath: chromiumPath,
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
  });
}

/** Waits until the page's main content or one of its frames shows `text` (the Web UI loads its panels on its own). */
export async function waitForText(page: Page, text: string | RegExp, timeoutMs = 20_000): Promise<string> {
  const deadline = Date.now() + timeoutMs;
  let seen = '';
  for (;;) {
    // Markdown (summaries, current details) renders in sandboxed iframes: read every frame.
    const frames = await Promise.all(page.frames().slice(1).map((f) => f.locator('body').innerText().catch(() => '')));
    seen = [await page.locator('main').innerText().catch(() => ''), ...frames].join('\n');
    if (typeof text === 'string' ? seen.includes(text) : text.test(seen)) return seen;
    if (Date.now() > deadline) throw new Error(`the page never showed ${String(text)}; it shows:\n${seen.slice(0, 4000)}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}
