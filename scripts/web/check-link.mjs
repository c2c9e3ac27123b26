// check-link.mjs URL MODE WAV [SCREENSHOT]
// Opens a link page in Debian's Chromium (playwright-core) with a fake
// microphone that plays WAV (Chromium loops it). MODE "live": waits until
// the avatar's video is decoding, counts frames for 3 s, waits for the
// conversation (the greeting heard and captioned, the visitor's words
// captioned, the avatar's answer captioned, the answer cut short when the
// visitor talks over it), takes the screenshot, clicks
// "End conversation" and waits for the page to say it ended. MODE "refused":
// waits for the page's refusal message. Prints one JSON line of what it saw.
import { chromium } from 'playwright-core';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const [url, mode, wav, screenshot = ''] = process.argv.slice(2);
if (!url || !mode || !wav) {
  console.error('usage: check-link.mjs URL live|refused WAV [SCREENSHOT]');
  process.exit(2);
}
const profile = mkdtempSync(join(tmpdir(), 'link-chromium-'));
const browser = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  viewport: { width: 900, height: 820 },
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync', '--autoplay-policy=no-user-gesture-required',
    '--use-fake-ui-for-media-stream', '--use-fake-device-for-media-stream', `--use-file-for-fake-audio-capture=${wav}`],
});
let code = 0;
try {
  const page = browser.pages()[0] ?? await browser.newPage();
  page.on('console', (m) => { if (m.type() === 'error') console.error('page:', m.text()); });
  await page.goto(url);
  if (mode === 'refused') {
    await page.waitForFunction(() => window.linkStats?.state === 'refused', null, { timeout: 30000 });
    if (screenshot) await page.screenshot({ path: screenshot });
    const s = await page.evaluate(() => ({ ...window.linkStats, shown: document.getElementById('message')?.textContent }));
    console.log(JSON.stringify(s));
  } else {
    await page.waitForFunction(() => window.linkStats?.state === 'live' && window.linkStats.framesDecoded > 5, null, { timeout: 45000 });
    const before = await page.evaluate(() => window.linkStats.framesDecoded);
    await page.waitForFunction(() => window.linkStats.mic !== '', null, { timeout: 30000 });
    const micPublished = await page.evaluate(() => window.linkStats.mic === 'on' && !document.getElementById('controls').hidden);
    await page.waitForTimeout(3000);
    const after = await page.evaluate(() => ({ ...window.linkStats }));
    // The renderer's expiry warning, shown as a notice (the test's worker
    // warns as soon as a session starts).
    let notice = '';
    try {
      await page.waitForFunction(() => !document.getElementById('notice').hidden, null, { timeout: 10000 });
      notice = await page.evaluate(() => document.getElementById('notice').textContent);
    } catch {}
    // The conversation: greeting, the visitor's words, the avatar's answer.
    let talked = true;
    try {
      await page.waitForFunction(() => {
        const cs = window.linkStats.captions;
        const you = cs.findIndex((c) => c.who === 'you' && c.final && c.text);
        return you >= 0 && cs.slice(you + 1).some((c) => c.who === 'avatar' && c.text.startsWith('I heard you say'));
      }, null, { timeout: 60000 });
    } catch {
      talked = false;
    }
    // Barge-in: the visitor's second sentence starts while the avatar is
    // still answering the first; the answer stops and its caption is cut
    // to what was spoken.
    let bargedIn = true;
    try {
      await page.waitForFunction(() => window.linkStats.captions.some((c) => c.who === 'avatar' && c.text.endsWith('…')), null, { timeout: 60000 });
    } catch {
      bargedIn = false;
    }
    const talk = await page.evaluate(() => ({ captions: window.linkStats.captions, avatarLoudMs: window.linkStats.avatarLoudMs }));
    if (screenshot) await page.screenshot({ path: screenshot });
    await page.click('#end');
    await page.waitForFunction(() => window.linkStats.state === 'ended', null, { timeout: 30000 });
    const shown = await page.evaluate(() => document.getElementById('message')?.textContent);
    console.log(JSON.stringify({ sessionId: after.sessionId, frames0: before, frames1: after.framesDecoded, micPublished, shown, talked, bargedIn, notice, ...talk }));
  }
} catch (e) {
  console.error('check-link:', e.message);
  code = 1;
} finally {
  await browser.close();
  rmSync(profile, { recursive: true, force: true });
}
process.exit(code);
