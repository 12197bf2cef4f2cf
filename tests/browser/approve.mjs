// Opens an approval link in Debian's headless Chromium at a phone's size, saves a screenshot of
// the page, presses the button whose value is given (if any) and prints, as one JSON line,
// what the page showed, what it loaded and what it said after the press.
//
// Usage: node approve.mjs BROWSER_DIR URL SCREENSHOT [BUTTON_VALUE]

import { pathToFileURL } from "node:url";
import { join } from "node:path";

const [dir, url, shot, value] = process.argv.slice(2);
const { chromium } = await import(
  pathToFileURL(join(dir, "node_modules/playwright-core/index.mjs")).href
);
// The flags keep Chromium from reaching out to the network at start.
const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  args: [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
  ],
});
try {
  const page = await browser.newPage({
    viewport: { width: 390, height: 844 },
    deviceScaleFactor: 2,
    isMobile: true,
    hasTouch: true,
  });
  const loaded = [];
  page.on("request", (r) => loaded.push(r.url()));
  const response = await page.goto(url);
  const shown = {
    status: response.status(),
    title: await page.title(),
    text: await page.innerText("body"),
    buttons: await page.$$eval("button", (bs) => bs.map((b) => b.value)),
    scripts: await page.$$eval("script", (s) => s.length),
    width: await page.evaluate(() => document.documentElement.scrollWidth),
    headers: response.headers(),
    bytes: (await response.body()).length,
  };
  await page.screenshot({ path: shot, fullPage: true });
  if (value) {
    await Promise.all([page.waitForNavigation(), page.tap(`button[value="${value}"]`)]);
    shown.after = await page.innerText("body");
  }
  shown.loaded = loaded;
  console.log(JSON.stringify(shown));
} finally {
  await browser.close();
}
