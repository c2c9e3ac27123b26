// check-viewer.mjs URL SECONDS SCREENSHOT
// Opens the viewer page in Debian's Chromium (playwright-core; no browser
// download), waits until it is connected and decoding the avatar's video,
// counts decoded frames over SECONDS, saves a screenshot, and prints one JSON
// line: {framesDecoded0, framesDecoded1, width, height, fps}. Exits non-zero
// with a message if the page never gets there.
import { chromium } from 'playwright-core';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const [url, seconds = '4', screenshot = ''] = process.argv.slice(2);
if (!url) {
  console.error('usage: check-viewer.mjs URL [SECONDS] [SCREENSHOT]');
  process.exit(2);
}
const profile = mkdtempSync(join(tmpdir(), 'viewer-chromium-'));
const browser = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  viewport: { width: 760, height: 700 },
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync', '--autoplay-policy=no-user-gesture-required'],
});
let code = 0;
try {
  const page = browser.pages()[0] ?? await browser.newPage();
  page.on('console', (m) => { if (m.type() === 'error') console.error('page:', m.text()); });
  await page.goto(url);
  await page.waitForFunction(() => window.viewerStats?.connected && window.viewerStats.framesDecoded > 5, null, { timeout: 30000 });
  const before = await page.evaluate(() => ({ ...window.viewerStats }));
  await page.waitForTimeout(Number(seconds) * 1000);
  const after = await page.evaluate(() => ({ ...window.viewerStats }));
  if (screenshot) await page.screenshot({ path: screenshot });
  console.log(JSON.stringify({
    framesDecoded0: before.framesDecoded, framesDecoded1: after.framesDecoded,
    width: after.width, height: after.height, fps: after.fps ?? 0,
  }));
} catch (e) {
  console.error('check-viewer:', e.message);
  code = 1;
} finally {
  await browser.close();
  rmSync(profile, { recursive: true, force: true });
}
process.exit(code);
