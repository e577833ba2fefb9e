// Cairn's web UI in a real browser: Debian's Chromium driven by Playwright
// (playwright-core, which never downloads a browser), against `cairn serve
// --sample`. Sign in, list, open a session and see its verdict, verify a
// bundle in the browser and see a tampered one fail at its line, tamper
// with the store and see the verdict turn red at the right step, sign out;
// axe-core finds no serious accessibility violation on any page. A
// screenshot of each page is saved in target/ui-screenshots.
//
// Needs CAIRN_BIN (the cairn binary) and Chromium at /usr/bin/chromium (or
// CAIRN_CHROMIUM). Under CI=true a missing browser fails the test.

import assert from "node:assert/strict";
import { spawn, execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { after, before, test } from "node:test";
import { chromium } from "playwright-core";
import { AxeBuilder } from "@axe-core/playwright";

const root = resolve(import.meta.dirname, "..", "..");
const cairn = process.env.CAIRN_BIN ?? join(root, "target", "debug", "cairn");
const browserPath = process.env.CAIRN_CHROMIUM ?? "/usr/bin/chromium";
const shots = join(root, "target", "ui-screenshots");
const SESSION = "revenue-analysis-q4";

let server;
let base;
let admin;
let browser;
let dir;

// The bundle page's witness policy: a bundle of the tamper corpus whose
// checkpoint two witnesses cosigned verifies under them (and names them),
// the server's own export (no cosignature) is refused for want of them,
// and a quorum beyond the witnesses is a policy the verifier refuses.
async function witnessPolicy(page, exported) {
  const specPath = join(root, "target", "tamper-corpus", "witnessed-quorum-met.json");
  if (!existsSync(specPath)) {
    if (process.env.CI === "true") assert.fail(`no tamper corpus at ${specPath}: run cargo test -p cairn --test tamper`);
    return;
  }
  const spec = JSON.parse(readFileSync(specPath, "utf8"));
  const witnessed = readFileSync(join(root, "target", "tamper-corpus", spec.bundle));
  await page.getByLabel(/Server keys to trust/).fill(spec.keys.join("\n"));
  await page.getByLabel(/Witness keys/).fill(spec.witnesses.join("\n"));
  await page.getByLabel(/Drop a bundle/).setInputFiles({ name: "witnessed.ndjson", mimeType: "application/x-ndjson", buffer: witnessed });
  await page.locator("#result").getByText("Verified: witnessed.ndjson").waitFor();
  assert.equal(await page.locator("#cosigned").textContent(), "Cosigned by w1.example, w2.example (2 needed).");
  await accessible(page, "verify with witnesses");
  await page.getByLabel(/Server keys to trust/).fill("");
  await page.getByLabel(/Drop a bundle/).setInputFiles({ name: "uncosigned.ndjson", mimeType: "application/x-ndjson", buffer: Buffer.from(exported) });
  await page.locator("#result").getByText("Not cosigned enough: uncosigned.ndjson").waitFor();
  assert.match(await page.locator("#result").textContent(), /insufficient-cosignatures/);
  assert.equal(await page.locator("#cosigned").textContent(), "Cosigned by none of the witnesses (2 needed).");
  await page.getByLabel(/Cosignatures needed/).fill("3");
  await page.getByLabel(/Drop a bundle/).setInputFiles({ name: "witnessed.ndjson", mimeType: "application/x-ndjson", buffer: witnessed });
  await page.locator("#result").getByText(/Could not verify: the quorum must be 1 to 2/).waitFor();
  await page.getByLabel(/Cosignatures needed/).fill("");
  await page.getByLabel(/Witness keys/).fill("");
}

// A `cairn serve` of its own data directory (`home`), with `extraEnv`.
function startServer(extraEnv = {}) {
  const home = mkdtempSync(join(tmpdir(), "cairn-ui-"));
  const child = spawn(cairn, ["serve", "--listen", "127.0.0.1:0", "--sample"], {
    env: { ...process.env, CAIRN_DATA_DIR: join(home, "data"), CAIRN_ORG: "acme", CAIRN_LOG: "warn", ...extraEnv },
    stdio: ["ignore", "pipe", "inherit"],
  });
  return new Promise((resolveStart, reject) => {
    let text = "";
    const timer = setTimeout(() => reject(new Error(`cairn serve did not start: ${text}`)), 30_000);
    child.stdout.on("data", (chunk) => {
      text += chunk.toString();
      const key = text.match(/admin API key[^:]*: (cairn_[A-Za-z0-9_-]+)/);
      const at = text.match(/listening on (http:\/\/[0-9.:]+)/);
      if (key && at) {
        clearTimeout(timer);
        resolveStart({ child, base: at[1], admin: key[1], home });
      }
    });
    child.on("exit", (code) => reject(new Error(`cairn serve exited (${code}): ${text}`)));
  });
}

before(async () => {
  if (!existsSync(browserPath)) {
    const message = `no Chromium at ${browserPath}: install Debian's chromium (apt-get install chromium) or set CAIRN_CHROMIUM`;
    if (process.env.CI === "true") throw new Error(message);
    console.warn(message);
    return;
  }
  mkdirSync(shots, { recursive: true });
  ({ child: server, base, admin, home: dir } = await startServer());
  browser = await chromium.launch({
    executablePath: browserPath,
    args: [
      "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
      "--disable-component-update", "--disable-sync",
    ],
  });
});

after(async () => {
  await browser?.close();
  // Still running: neither exited nor killed by a signal (a server killed
  // by one has a null exitCode and would never emit "exit" again).
  if (server && server.exitCode === null && server.signalCode === null) {
    const exited = new Promise((resolveExit) => server.once("exit", resolveExit));
    server.kill();
    await exited;
  }
  if (dir) rmSync(dir, { recursive: true, force: true });
});

async function accessible(page, name) {
  const results = await new AxeBuilder({ page }).analyze();
  const serious = results.violations.filter((v) => v.impact === "serious" || v.impact === "critical");
  assert.deepEqual(
    serious.map((v) => `${v.id}: ${v.help} (${v.nodes.map((n) => n.target.join(" ")).join(", ")})`),
    [],
    `${name}: serious accessibility violations`,
  );
}

// Nothing wider than the window (no sideways scrolling on a phone).
async function fitsTheWidth(page, name) {
  const [scroll, width] = await page.evaluate(() => [document.documentElement.scrollWidth, window.innerWidth]);
  assert.ok(scroll <= width, `${name}: ${scroll}px wide in a ${width}px window`);
}

async function shot(page, name) {
  await page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });
}

async function exportBundle() {
  const response = await fetch(`${base}/v1/export?all=true`, { headers: { Authorization: `Bearer ${admin}` } });
  assert.equal(response.status, 200);
  return new Uint8Array(await response.arrayBuffer());
}

test("sign in, sessions, a verdict, bundles verified in the browser, tampering seen, sign out", { skip: !existsSync(browserPath) && process.env.CI !== "true" }, async () => {
  for (const [width, height, label] of [[1280, 800, "laptop"], [390, 844, "phone"]]) {
    for (const scheme of ["light", "dark"]) {
      const context = await browser.newContext({ viewport: { width, height }, colorScheme: scheme });
      const page = await context.newPage();
      const errors = [];
      page.on("pageerror", (e) => errors.push(e.message));

      // The first page is the sign-in page.
      await page.goto(`${base}/`);
      await page.waitForURL(/\/ui\/sign-in$/);
      await accessible(page, "sign-in");
      await shot(page, `sign-in-${label}-${scheme}`);
      await page.getByLabel("API key").fill("cairn_not_a_key");
      await page.getByRole("button", { name: "Sign in" }).click();
      assert.match(await page.getByRole("alert").textContent(), /unknown, revoked or expired/);
      await page.getByLabel("API key").fill(admin);
      await page.getByRole("button", { name: "Sign in" }).click();
      await page.waitForURL(/\/ui\/sessions$/);
      const cookies = await context.cookies();
      assert.ok(cookies.every((c) => !c.value.includes(admin)), "the key is not in a cookie");
      assert.ok(cookies.some((c) => c.name === "cairn_ui" && c.httpOnly && c.sameSite === "Strict"));

      // The list, with the sample session verified.
      const row = page.getByRole("row", { name: new RegExp(SESSION) });
      await row.getByText("verified").waitFor();
      await accessible(page, "sessions");
      await fitsTheWidth(page, `sessions (${label})`);
      await shot(page, `sessions-${label}-${scheme}`);

      // The session, verified.
      await page.getByRole("link", { name: SESSION }).click();
      await page.getByRole("status").getByText("Verified").waitFor();
      await accessible(page, "session");
      await fitsTheWidth(page, `session (${label})`);
      await shot(page, `session-${label}-${scheme}`);

      // A step's proof, checked in the browser (SHA-256 and Ed25519).
      await page.locator("#step-1").getByRole("link", { name: "proof" }).click();
      await page.getByRole("status").getByText("Proof checked in your browser").waitFor();
      await accessible(page, "proof");
      await fitsTheWidth(page, `proof (${label})`);
      await shot(page, `proof-${label}-${scheme}`);
      await page.goBack();

      // A bundle verified in the browser; a tampered one fails at its line.
      const bundle = await exportBundle();
      await page.getByRole("link", { name: "Verify a bundle" }).click();
      await accessible(page, "verify");
      await fitsTheWidth(page, `verify (${label})`);
      await page.getByLabel(/Drop a bundle/).setInputFiles({ name: "acme.ndjson", mimeType: "application/x-ndjson", buffer: Buffer.from(bundle) });
      await page.locator("#result").getByText("Verified: acme.ndjson").waitFor();
      await shot(page, `verify-${label}-${scheme}`);
      const text = new TextDecoder().decode(bundle);
      const lines = text.split("\n");
      const target = lines.findIndex((l) => l.includes("\"type\":\"step\"") && l.includes("\"content\""));
      assert.ok(target > 0);
      lines[target] = lines[target].replace(/"content":"([^"])/, "\"content\":\"X");
      await page.getByLabel(/Drop a bundle/).setInputFiles({ name: "tampered.ndjson", mimeType: "application/x-ndjson", buffer: Buffer.from(lines.join("\n")) });
      await page.locator("#result").getByText("Tampered: tampered.ndjson").waitFor();
      assert.match(await page.locator("#failing").textContent(), new RegExp(`line ${target + 1}\\b`));
      await shot(page, `verify-tampered-${label}-${scheme}`);
      if (label === "laptop" && scheme === "light") await witnessPolicy(page, bundle);

      // Sign out: back to the sign-in page, and the session is gone.
      await page.getByRole("button", { name: "Sign out" }).click();
      await page.waitForURL(/\/ui\/sign-in$/);
      await page.goto(`${base}/ui/sessions`);
      await page.waitForURL(/\/ui\/sign-in$/);
      assert.deepEqual(errors, []);
      await context.close();
    }
  }
});

test("a tampered store turns the verdict red at the step that was changed", { skip: !existsSync(browserPath) && process.env.CI !== "true" }, async () => {
  // An insider edits step 2's content in the database, past its trigger.
  execFileSync("python3", ["-c", `
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("DROP TRIGGER entries_no_update")
n = db.execute("UPDATE entries SET content = content || ' (edited)' WHERE step_index = 2 AND sid = (SELECT sid FROM sessions WHERE session_id = ?)", (sys.argv[2],)).rowcount
m = db.execute("UPDATE entries SET record_hash = zeroblob(32) WHERE step_index = 3 AND sid = (SELECT sid FROM sessions WHERE session_id = ?)", (sys.argv[2],)).rowcount
db.commit()
assert n == 1 and m == 1, (n, m)
`, join(dir, "data", "ledger.db"), SESSION]);
  const context = await browser.newContext();
  const page = await context.newPage();
  await page.goto(`${base}/ui/sign-in`);
  await page.getByLabel("API key").fill(admin);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.waitForURL(/\/ui\/sessions$/);
  await page.getByRole("row", { name: new RegExp(SESSION) }).getByText("tampered").waitFor();
  await page.getByRole("link", { name: SESSION }).click();
  await page.getByRole("status").getByText("Tampered").waitFor();
  const failing = page.locator("li.failing");
  assert.equal(await failing.count(), 1);
  assert.equal(await failing.getAttribute("id"), "step-2");
  assert.match(await page.getByRole("status").textContent(), /digest-mismatch/);
  await shot(page, "session-tampered");
  // The whole log's verdict fails at the same record.
  await page.getByRole("link", { name: "Log" }).click();
  await page.getByRole("button", { name: "Verify the whole log" }).click();
  await page.getByRole("status").getByText("Tampered").waitFor();
  assert.match(await page.locator("#failing").textContent(), /digest-mismatch/);
  await accessible(page, "log");
  await shot(page, "log-tampered");
  await page.goto(`${base}/ui/sessions/${SESSION}`);
  // The step whose recorded chain hash was replaced: its proof fails in
  // the browser.
  await page.locator("#step-3").getByRole("link", { name: "proof" }).click();
  await page.getByRole("status").getByText("The proof does not verify").waitFor();
  await shot(page, "proof-tampered");
  await context.close();
});

async function newKey(role) {
  const response = await fetch(`${base}/v1/keys`, {
    method: "POST",
    headers: { Authorization: `Bearer ${admin}`, "Content-Type": "application/json" },
    body: JSON.stringify({ role, label: `ui-test-${role}` }),
  });
  assert.equal(response.status, 201);
  return (await response.json()).token;
}

async function signedIn(token) {
  const context = await browser.newContext();
  const page = await context.newPage();
  await page.goto(`${base}/ui/sign-in`);
  await page.getByLabel("API key").fill(token);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.waitForURL(/\/ui\/sessions$/);
  return { context, page };
}

test("an auditor approves a flagged step; a reader sees the queue but may not decide", { skip: !existsSync(browserPath) && process.env.CI !== "true" }, async () => {
  const response = await fetch(`${base}/v1/steps`, {
    method: "POST",
    headers: { Authorization: `Bearer ${admin}`, "Content-Type": "application/json" },
    body: JSON.stringify({
      session_id: "payments", agent_id: "treasurer", step_type: "decision", trace_id: "t-wire",
      content: "Wire $2M to the new vendor", status: "flagged",
    }),
  });
  assert.equal(response.status, 201);

  const reader = await signedIn(await newKey("reader"));
  await reader.page.getByRole("link", { name: "Review queue" }).click();
  await reader.page.getByText("Wire $2M to the new vendor").waitFor();
  assert.equal(await reader.page.getByRole("button", { name: "Approve" }).count(), 0);
  await reader.page.locator("#review-t-wire").getByText(/may not review/).waitFor();
  await accessible(reader.page, "reviews (reader)");
  await shot(reader.page, "reviews-reader");
  await reader.context.close();

  const auditor = await signedIn(await newKey("auditor"));
  await auditor.page.getByRole("link", { name: "Review queue" }).click();
  await accessible(auditor.page, "reviews (auditor)");
  await shot(auditor.page, "reviews-auditor");
  const item = auditor.page.locator("#review-t-wire");
  await item.getByLabel("Note (optional)").fill("checked the contract");
  await item.getByRole("button", { name: "Approve" }).click();
  await auditor.page.getByRole("status").getByText(/approve: recorded at seq/).waitFor();
  // Post/redirect/get: the decision's page is a plain GET, so a reload
  // cannot post the decision again.
  assert.match(auditor.page.url(), /\/ui\/reviews\?recorded=\d+&decision=approve$/);
  assert.equal(await auditor.page.locator("#review-t-wire").count(), 0, "the approved step left the queue");
  // The sample's flagged refund (cairn serve --sample) still waits.
  await auditor.page.locator("#review-sample-refund-decision").waitFor();
  await shot(auditor.page, "reviews-approved");
  await auditor.context.close();
});

test("an open session's page shows new steps without a reload", { skip: !existsSync(browserPath) && process.env.CI !== "true" }, async () => {
  const { context, page } = await signedIn(admin);
  const post = (content) => fetch(`${base}/v1/steps`, {
    method: "POST",
    headers: { Authorization: `Bearer ${admin}`, "Content-Type": "application/json" },
    body: JSON.stringify({ session_id: "live", agent_id: "watcher", step_type: "observation", content }),
  });
  assert.equal((await post("first")).status, 201);
  await page.goto(`${base}/ui/sessions/live`);
  await page.locator("#step-0").waitFor();
  await page.evaluate(() => { window.cairnMarker = "still here"; });
  assert.equal((await post("second, while the page is open")).status, 201);
  await page.locator("#step-1").getByText("second, while the page is open").waitFor({ timeout: 15_000 });
  assert.equal(await page.evaluate(() => window.cairnMarker), "still here", "the page was not reloaded");
  await page.getByRole("status").getByText("Verified").waitFor();
  await accessible(page, "live session");
  await context.close();
});

test("long unbroken text wraps inside the page at every width", { skip: !existsSync(browserPath) && process.env.CI !== "true" }, async () => {
  // A token with no break opportunity, in a step's folded content (its
  // preview is the summary), its input, its metadata, a model, a task
  // id and an agent id of the longest kinds.
  const token = "x".repeat(5_000);
  const response = await fetch(`${base}/v1/steps`, {
    method: "POST",
    headers: { Authorization: `Bearer ${admin}`, "Content-Type": "application/json" },
    body: JSON.stringify({
      session_id: "unbroken", agent_id: "a".repeat(200), step_type: "tool_call", content: token,
      model: "m".repeat(200), task_id: "t".repeat(200), input_data: { [token.slice(0, 300)]: token }, metadata: { note: token },
    }),
  });
  assert.equal(response.status, 201, await response.text());
  for (const [width, height] of [[1280, 800], [390, 844]]) {
    const context = await browser.newContext({ viewport: { width, height } });
    const page = await context.newPage();
    await page.goto(`${base}/ui/sign-in`);
    await page.getByLabel("API key").fill(admin);
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.waitForURL(/\/ui\/sessions$/);
    await fitsTheWidth(page, `sessions with a long agent id (${width}px)`);
    await page.goto(`${base}/ui/sessions/unbroken`);
    await page.locator("#step-0").waitFor();
    for (const summary of await page.locator("#step-0 summary").all()) await summary.click();
    await fitsTheWidth(page, `a session of long unbroken text, unfolded (${width}px)`);
    await context.close();
  }
});

test("filters, search, the Markdown view, and an export at a level downloaded and verified in the browser", { skip: !existsSync(browserPath) && process.env.CI !== "true" }, async () => {
  const post = (path, body) => fetch(`${base}${path}`, {
    method: "POST",
    headers: { Authorization: `Bearer ${admin}`, "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  assert.equal((await post("/v1/sessions", { session_id: "exported", agent_id: "broker", full_consent: true })).status, 201);
  for (const [step_type, content] of [["ToolCall", "quote EURUSD"], ["ToolResult", "1.0832"], ["decision", "hedge the invoice in euros"]]) {
    assert.equal((await post("/v1/steps", { session_id: "exported", agent_id: "broker", step_type, content })).status, 201);
  }
  const { context, page } = await signedIn(admin);
  // The second sample (cairn serve --sample): a tool call paired with its
  // result, an audit event, a flagged decision and its correction, the
  // closing reflection and the seal.
  await page.goto(`${base}/ui/sessions/support-refund-1182`);
  await page.getByRole("status").getByText("Verified").waitFor();
  await page.locator("#step-2").getByRole("link", { name: "#3" }).click();
  await page.waitForURL(/#step-3$/);
  await page.locator("#step-4").getByText("corrected by").waitFor();
  await page.getByRole("link", { name: "sample-order-lookup" }).first().waitFor();
  await accessible(page, "support sample");
  await shot(page, "session-support-sample");
  await page.setViewportSize({ width: 390, height: 844 });
  await page.goto(`${base}/ui/sessions`);

  // Sessions with a tool call: the form's kind filter.
  await page.getByLabel("With a step of kind").selectOption("tool_call");
  await page.getByRole("button", { name: "Filter" }).click();
  await page.waitForURL(/kind=tool_call/);
  await page.getByRole("link", { name: "exported" }).waitFor();
  await accessible(page, "sessions filtered");
  await fitsTheWidth(page, "sessions filtered");
  await shot(page, "sessions-filtered-phone");

  // Search finds the decision and links to its step.
  await page.getByRole("link", { name: "Search" }).click();
  await page.getByLabel("Steps about").fill("hedge invoice euros");
  await page.getByRole("button", { name: "Search" }).click();
  await page.getByRole("link", { name: "exported #2" }).waitFor();
  await accessible(page, "search");
  await fitsTheWidth(page, "search");
  await shot(page, "search-phone");

  // The Markdown view (seed 002).
  await page.goto(`${base}/ui/sessions/exported`);
  await page.getByRole("link", { name: "Markdown view" }).click();
  await page.getByText("# Session exported").waitFor();
  await accessible(page, "markdown");
  await fitsTheWidth(page, "markdown");
  await shot(page, "markdown-phone");

  // Export at the detailed level: downloaded, then verified in the browser.
  await page.goBack();
  await page.getByRole("link", { name: "Export…" }).click();
  assert.equal(await page.getByLabel("A session").inputValue(), "exported");
  await page.getByLabel("Detail level").selectOption("detailed");
  await accessible(page, "export");
  await fitsTheWidth(page, "export");
  await shot(page, "export-phone");
  const [download] = await Promise.all([
    page.waitForEvent("download"),
    page.getByRole("button", { name: "Download the bundle" }).click(),
  ]);
  assert.equal(download.suggestedFilename(), "cairn-exported-detailed.jsonl");
  const saved = join(dir, "exported.jsonl");
  await download.saveAs(saved);
  const bundle = readFileSync(saved, "utf8");
  assert.ok(!bundle.includes("hedge the invoice"), "detailed hides content");
  await page.goto(`${base}/ui/verify`);
  await page.getByLabel(/Drop a bundle/).setInputFiles(saved);
  await page.locator("#result").getByText("Verified: exported.jsonl").waitFor();
  await context.close();
});

// A web app on another origin (a page server of its own) calls the API
// from the browser when CAIRN_CORS_ORIGINS names its origin: the browser's
// preflight is answered and the step is recorded. The shared server names
// no origin: the browser blocks the same call before it is sent.
test("a page on another origin may call the API only when its origin is allowed", { skip: !existsSync(browserPath) && process.env.CI !== "true" }, async () => {
  const { createServer } = await import("node:http");
  const pages = createServer((_request, response) => {
    response.writeHead(200, { "content-type": "text/html" });
    response.end("<!doctype html><html lang=en><title>another app</title><p>app</p></html>");
  });
  await new Promise((resolveListen) => pages.listen(0, "127.0.0.1", resolveListen));
  const origin = `http://127.0.0.1:${pages.address().port}`;
  const open = await startServer({ CAIRN_CORS_ORIGINS: origin });
  const page = await browser.newPage();
  try {
    await page.goto(`${origin}/`);
    const record = (url, key) =>
      page.evaluate(async ([url, key]) => {
        try {
          const response = await fetch(`${url}/v1/steps`, {
            method: "POST",
            headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/json" },
            body: JSON.stringify({ session_id: "from-another-origin", agent_id: "web", step_type: "observation", content: "hi" }),
          });
          return { status: response.status, body: await response.json() };
        } catch (error) {
          return { error: String(error) };
        }
      }, [url, key]);
    const allowed = await record(open.base, open.admin);
    assert.equal(allowed.status, 201, JSON.stringify(allowed));
    assert.equal(allowed.body.step_index, 0, JSON.stringify(allowed));
    const blocked = await record(base, admin);
    assert.ok(blocked.error, JSON.stringify(blocked));
    const sessions = await fetch(`${base}/v1/sessions/from-another-origin`, { headers: { Authorization: `Bearer ${admin}` } });
    assert.equal(sessions.status, 404, "the blocked call was never sent");
  } finally {
    await page.close();
    const exited = new Promise((resolveExit) => open.child.once("exit", resolveExit));
    open.child.kill();
    await exited;
    rmSync(open.home, { recursive: true, force: true });
    pages.close();
  }
});
