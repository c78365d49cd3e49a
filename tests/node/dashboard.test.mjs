// The dashboard of pagedkv serve in a real browser: Debian's chromium, headless, driven by
// Playwright (playwright-core, pinned in package-lock.json). Run by tests/python/test_serve.py,
// which starts the server and sets PAGEDKV_BASE_URL, PAGEDKV_LOAD_CMD (a JSON argv: the load this
// test starts once the page is up, e.g. `pagedkv bench serve ...`) and PAGEDKV_SCREENSHOT.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { test } from 'node:test';
import { chromium } from 'playwright-core';

const baseURL = process.env.PAGEDKV_BASE_URL;
const screenshot = process.env.PAGEDKV_SCREENSHOT;
const executablePath = process.env.PAGEDKV_CHROMIUM ?? '/usr/bin/chromium';
const loadCommand = JSON.parse(process.env.PAGEDKV_LOAD_CMD ?? '[]');
if (!baseURL) throw new Error('set PAGEDKV_BASE_URL to a running pagedkv serve');
if (loadCommand.length === 0) throw new Error('set PAGEDKV_LOAD_CMD to the load to run (a JSON argv)');

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function poll(what, timeoutMs, fn) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await fn();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(100);
  }
}

test('the dashboard shows the pool live and settles when the load ends', async () => {
  const browser = await chromium.launch({
    executablePath,
    headless: true,
    // No network beyond loopback here: keep Chromium from trying.
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
           '--disable-component-update', '--disable-sync'],
  });
  try {
    const page = await browser.newPage({ viewport: { width: 1200, height: 900 } });
    const errors = [];
    page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
    page.on('pageerror', (e) => errors.push(String(e)));
    await page.goto(`${baseURL}/dashboard`);

    const state = await (await fetch(`${baseURL}/dashboard/state`)).json();
    await poll('one grid cell per block', 10000, async () => (await page.locator('#grid .cell').count()) === state.num_blocks);

    // Start the load now that the page is up (a browser can take seconds to start on a busy machine).
    // On a starved machine the page can be slow enough that a load is over before the test gets
    // to clicking a running request: then another round of the same load starts (each must end well).
    let loadDone = null, loadRunning = false;
    const loadExits = [];
    const startLoad = () => {
      const load = spawn(loadCommand[0], loadCommand.slice(1), { stdio: 'ignore' });
      loadRunning = true;
      loadDone = new Promise((resolve) => load.on('exit', (code) => { loadRunning = false; loadExits.push(code); resolve(code); }));
    };
    startLoad();

    // While the load runs the numbers move: several distinct readings of the used cells and tokens/s.
    const readings = new Set();
    let busy = false;
    for (let i = 0; i < 50 && (readings.size < 3 || !busy); i++) {
      const used = await page.locator('#grid .cell.u, #grid .cell.s').count();
      const tokens = await page.locator('#tokens').textContent();
      if (used > 0 && !busy) {
        busy = true;
        if (screenshot) await page.screenshot({ path: screenshot, fullPage: true });  // the pool at work
      }
      readings.add(`${used}/${tokens}`);
      await sleep(200);
    }
    assert.ok(busy, 'blocks in use while the load runs');
    assert.ok(readings.size >= 3, `the page changes while the load runs: ${[...readings]}`);

    // Clicking a running request marks exactly its blocks. A request can finish between the
    // click and the next refresh (stories260K decodes fast), so up to five tries, one must land.
    let markedTries = [];
    for (let attempt = 0; attempt < 5 && !markedTries.some((t) => t.ok); attempt++) {
      if (!loadRunning) startLoad();
      const row = await poll('a running request holding blocks', 10000, async () => {
        const rows = page.locator('#requests tr.req');
        const n = await rows.count();
        for (let i = 0; i < n; i++) {
          const cells = await rows.nth(i).locator('td').allTextContents().catch(() => []);
          if (cells[1] === 'running' && Number(cells[5]) > 0) return rows.nth(i);
        }
        return null;
      });
      await row.click().catch(() => {});  // redrawn under the pointer: the next try
      // The selected row and the marked cells, read from the same render.
      const seen = await page.evaluate(() => {
        const selectedRow = document.querySelector('#requests tr.req.selected');
        return { blocks: selectedRow ? Number(selectedRow.cells[5].textContent) : -1,
                 marked: document.querySelectorAll('#grid .cell.mark').length };
      });
      markedTries.push({ ...seen, ok: seen.blocks > 0 && seen.marked === seen.blocks });
      await page.evaluate(() => document.querySelector('#requests tr.req.selected')?.click());  // unmark
    }
    assert.ok(markedTries.some((t) => t.ok), `a click marks exactly the request's blocks: ${JSON.stringify(markedTries)}`);

    // The tiers the server runs with each have a row.
    for (const tier of (process.env.PAGEDKV_EXPECT_TIERS ?? '').split(',').filter(Boolean))
      assert.equal(await page.locator(`#tiers tr[data-tier="${tier}"]`).count(), 1, `a row for the ${tier} tier`);

    // After the load: nothing running, no block in use (cached blocks may stay), and the page says so.
    let timer;
    const timeout = new Promise((resolve) => { timer = setTimeout(() => resolve('timeout'), 120000); });
    const exit = await Promise.race([loadDone, timeout]);
    clearTimeout(timer);  // a pending timer would keep node alive
    assert.equal(exit, 0, 'the load ran to its end');
    assert.ok(loadExits.every((code) => code === 0), `every round of the load ended well: ${loadExits}`);
    await poll('an empty pool after the load', 60000, async () =>
      (await page.locator('#grid .cell.u, #grid .cell.s').count()) === 0 && (await page.locator('#running').textContent()) === '0');
    assert.equal(await page.locator('#usage').textContent(), '0.0%');
    assert.deepEqual(errors, [], 'no console errors');
  } finally {
    await browser.close();
  }
});
