// check-links.mjs PLAN.json WAV
// Opens several link pages one after another in one Debian Chromium
// (playwright-core; launching a browser per page costs seconds on a small
// box), with a fake microphone that plays WAV. PLAN.json is a list of
// {url, expect}: expect "live" waits until the avatar's video is decoding,
// counts frames for 2 s, waits for the avatar's first caption (its greeting),
// then closes the page (the visitor leaves); expect "ended" waits for the page
// to say the session ended before the avatar came. With end: {api, key}, once
// the page has joined the room the script ends its session as the link's
// owner would (POST /v1/sessions/{id}/end). Prints one JSON line: a list of
// what each page showed, in PLAN's order.
import { chromium } from 'playwright-core';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const [planFile, wav] = process.argv.slice(2);
if (!planFile || !wav) {
  console.error('usage: check-links.mjs PLAN.json WAV');
  process.exit(2);
}
const plan = JSON.parse(readFileSync(planFile, 'utf8'));
const profile = mkdtempSync(join(tmpdir(), 'links-chromium-'));
const browser = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  viewport: { width: 900, height: 820 },
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync', '--autoplay-policy=no-user-gesture-required',
    '--use-fake-ui-for-media-stream', '--use-fake-device-for-media-stream', `--use-file-for-fake-audio-capture=${wav}`],
});
const stats = () => ({ ...window.linkStats, shown: document.getElementById('message')?.textContent ?? '' });
const results = [];
let code = 0;
try {
  for (const { url, expect, end } of plan) {
    const page = await browser.newPage();
    page.on('console', (m) => { if (m.type() === 'error') console.error('page:', m.text()); });
    const r = { url, expect, failed: '' }; // failed: what the page never got to
    try {
      await page.goto(url);
      if (expect === 'live') {
        // A page that ended or was refused will not go live: stop waiting.
        await page.waitForFunction(() => (window.linkStats?.state === 'live' && window.linkStats.framesDecoded > 5)
          || ['ended', 'refused', 'error'].includes(window.linkStats?.state), null, { timeout: 45000 });
        if (await page.evaluate(() => window.linkStats.state) !== 'live') throw new Error('the page did not go live');
        r.frames0 = await page.evaluate(() => window.linkStats.framesDecoded);
        await page.waitForTimeout(2000);
        r.frames1 = await page.evaluate(() => window.linkStats.framesDecoded);
        try {
          await page.waitForFunction(() => window.linkStats.captions.some((c) => c.who === 'avatar' && c.text), null, { timeout: 30000 });
        } catch {
          // reported below as no caption
        }
      } else {
        if (end) {
          await page.waitForFunction(() => window.linkStats?.connectedAt > 0, null, { timeout: 45000 });
          const id = await page.evaluate(() => window.linkStats.sessionId);
          const res = await fetch(`${end.api}/v1/sessions/${id}/end`, { method: 'POST', headers: { 'x-api-key': end.key } });
          if (!res.ok) throw new Error(`end ${id}: ${res.status} ${await res.text()}`);
        }
        await page.waitForFunction(() => ['ended', 'refused', 'error'].includes(window.linkStats?.state), null, { timeout: 45000 });
      }
    } catch (e) {
      r.failed = e.message;
    }
    Object.assign(r, await page.evaluate(stats), { url, expect, failed: r.failed });
    await page.close();
    results.push(r);
  }
  console.log(JSON.stringify(results));
} catch (e) {
  console.error('check-links:', e.message);
  code = 1;
} finally {
  await browser.close();
  rmSync(profile, { recursive: true, force: true });
}
process.exit(code);
