// The web page of `capstan serve` in headless Chromium (Debian's chromium,
// driven by playwright-core). Run by tests/run_ui.sh, which starts a server
// with an API key and sets CAPSTAN_URL, CAPSTAN_KEY, CAPSTAN_QUESTIONS and
// SCREENSHOT_DIR.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, mkdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

const URL = process.env.CAPSTAN_URL ?? assert.fail("CAPSTAN_URL is not set");
const KEY = process.env.CAPSTAN_KEY ?? "";
const QUESTIONS = readFileSync(process.env.CAPSTAN_QUESTIONS ?? assert.fail("CAPSTAN_QUESTIONS is not set"), "utf8")
  .split("\n")
  .filter((l) => l.trim())
  .map((l) => JSON.parse(l).text);
const SHOTS = process.env.SCREENSHOT_DIR ?? join(tmpdir(), "capstan-ui");
const page_url = (key) => `${URL}/${key ? `?key=${encodeURIComponent(key)}` : ""}`;

let context, profile;

before(async () => {
  mkdirSync(SHOTS, { recursive: true });
  profile = mkdtempSync(join(tmpdir(), "capstan-chromium-"));
  context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    headless: true,
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
    viewport: { width: 1100, height: 900 },
  });
});

after(async () => {
  await context?.close();
  if (profile) rmSync(profile, { recursive: true, force: true });
});

/** A new page that fails the test on any script error or console error. */
async function open(key) {
  const page = await context.newPage();
  const problems = [];
  page.on("pageerror", (e) => problems.push(`pageerror: ${e.message}`));
  page.on("console", (m) => {
    if (m.type() === "error") problems.push(`console: ${m.text()}`);
  });
  const resp = await page.goto(page_url(key));
  assert.equal(resp.status(), 200, "the page opens with its key");
  return { page, problems };
}

async function ask(page, question) {
  await page.fill("#question", question);
  const qa = page.waitForResponse((r) => r.url().endsWith("/v1/qa"));
  await page.press("#question", "Enter");
  return qa;
}

test("the page loads", async () => {
  const { page, problems } = await open(KEY);
  assert.equal(await page.title(), "Capstan");
  assert.ok(await page.isVisible("#question"));
  assert.ok(await page.isEnabled("#go"));
  assert.deepEqual(problems, []);
  await page.close();
});

test("a question streams an answer and shows the cited passage with the answer marked in its sentence", async () => {
  const question = QUESTIONS[0];
  const { page, problems } = await open(KEY);
  const resp = await ask(page, question);
  assert.equal(resp.status(), 200);
  assert.match(resp.headers()["content-type"], /^text\/event-stream/, "the page asks for a stream");
  await page.waitForSelector(".passage");
  await page.waitForFunction(() => document.getElementById("status").textContent.startsWith("reader "));
  await page.waitForFunction(() => !document.getElementById("go").disabled);

  const answer = (await page.textContent("#answer")).trim();
  assert.ok(answer.length > 0 && answer !== "(no answer)", `answer ${JSON.stringify(answer)}`);

  // The same question over the API: the page shows what the API answers.
  const api = await (
    await fetch(`${URL}/v1/qa`, {
      method: "POST",
      headers: { "Content-Type": "application/json", Authorization: `Bearer ${KEY}` },
      body: JSON.stringify({ question }),
    })
  ).json();
  assert.equal(answer, api.answer);

  const passages = await page.$$eval(".passage", (els) =>
    els.map((e) => ({
      id: e.dataset.passageId,
      cited: e.classList.contains("cited"),
      marks: Array.from(e.querySelectorAll("mark"), (m) => m.textContent),
      sentences: Array.from(e.querySelectorAll(".sentence"), (m) => m.textContent),
      text: e.querySelector("p").textContent,
      title: e.querySelector("h3").textContent,
    })),
  );
  assert.equal(passages.length, api.passages.length);
  assert.deepEqual(
    passages.map((p) => p.id),
    api.passages.map((p) => p.passage_id),
  );
  const cited = passages.filter((p) => p.cited);
  assert.equal(cited.length, 1, "one passage is marked cited");
  assert.equal(cited[0].id, api.citations[0]);
  assert.deepEqual(cited[0].marks, [answer], "the cited passage marks exactly the answer");
  assert.equal(api.kind, "span");
  const span = api.spans[0];
  if (span.in_title) {
    assert.ok(cited[0].title.includes(answer));
  } else {
    // The mark stands at the span's offsets, inside its shaded sentence.
    const chars = Array.from(cited[0].text);
    assert.equal(chars.slice(span.start, span.end).join(""), answer);
    const h = api.highlight;
    assert.deepEqual(cited[0].sentences, [chars.slice(h.start, h.end).join("")]);
    assert.ok(cited[0].sentences[0].includes(answer));
  }
  assert.equal(
    passages.filter((p) => !p.cited).flatMap((p) => p.marks).length,
    0,
    "no marks outside the cited passage",
  );
  // The passage text is shown whole around the mark.
  assert.equal(cited[0].text, api.passages.find((p) => p.passage_id === api.citations[0]).text);
  const visible = await page.isVisible(".passage.cited mark");
  assert.ok(visible, "the mark is visible");

  await page.screenshot({ path: join(SHOTS, "answer.png"), fullPage: true });
  assert.deepEqual(problems, []);
  await page.close();
});

test("a second question replaces the first answer", async () => {
  const { page } = await open(KEY);
  for (const q of QUESTIONS.slice(1, 3)) {
    await ask(page, q);
    await page.waitForFunction(() => document.getElementById("status").textContent.startsWith("reader "));
    const mark = await page.textContent(".passage.cited mark");
    assert.equal(mark, (await page.textContent("#answer")).trim());
  }
  assert.equal(await page.$$eval(".passage.cited", (e) => e.length), 1);
  await page.close();
});

test("errors from the server are shown, not swallowed", async () => {
  // Without the key the server refuses the page itself, with a JSON reason.
  if (KEY) {
    const refused = await context.newPage();
    const resp = await refused.goto(page_url(""));
    assert.equal(resp.status(), 401);
    assert.match((await resp.json()).error.message, /API key/);
    await refused.close();
  }
  const { page } = await open(KEY);
  // A question over the length limit.
  const withKey = await open(KEY);
  await ask(withKey.page, "why ".repeat(700));
  await withKey.page.waitForSelector("#status .error");
  assert.match(await withKey.page.textContent("#status .error"), /limit/);
  assert.ok(await withKey.page.isEnabled("#go"), "the button is usable again");
  await withKey.page.screenshot({ path: join(SHOTS, "error.png") });
  await page.close();
  await withKey.page.close();
});
