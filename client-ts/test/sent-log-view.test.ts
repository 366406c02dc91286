import assert from "node:assert/strict";
import { test } from "node:test";

import { escapeHtml, SentLog, sentLogHtml, sentLogText, type SentEntry } from "../src/index.js";
import { NOW } from "./support.js";

const DAY_NUMBER = Math.floor(NOW / 86400);

function entry(campaign: string, payload: unknown, status: SentEntry["status"] = "accepted"): SentEntry {
  const wire = JSON.stringify({ report_id: "0".repeat(32), digest: "a".repeat(64), time: NOW, payload });
  return { campaign, wire, epsilon: 0.5, status, day: DAY_NUMBER };
}

test("the sent log as text: what left, newest first, with ε and the budget", () => {
  const log = new SentLog([entry("theme", 2), entry("font", { bits: "0f" }, "refused")], 1, 8, 3);
  const lines = sentLogText(log).split("\n");
  assert.equal(lines[0], "What this device sent, newest first.");
  assert.match(lines[1] as string, /randomized on this device/);
  assert.equal(lines[2], "ε spent: 1 of 8 (7 left); 3 reports wait to be sent");
  assert.equal(lines[3], "2026-01-01  theme  ε 0.5  accepted  bucket 2026-01-01 00:00 UTC  payload 2");
  assert.equal(lines[4], '2026-01-01  font  ε 0.5  refused  bucket 2026-01-01 00:00 UTC  payload {"bits":"0f"}');
  const empty = sentLogText(new SentLog([], 0.25, Infinity, 1));
  assert.match(empty, /ε spent: 0.25 \(no lifetime budget set\); 1 report waits to be sent\nNothing sent yet\.$/);
});

test("the sent log as HTML escapes every field and carries no script or style", () => {
  const hostile = `<img src=x onerror="alert('x')">&`;
  const log = new SentLog([entry(hostile, hostile)], 0.5, 8, 0);
  const html = sentLogHtml(log);
  assert.ok(html.startsWith('<section class="chorus-sent-log">') && html.endsWith("</section>"));
  assert.ok(!html.includes("<img") && !html.includes("onerror=\"") && !/<script|<style|style=/i.test(html), html);
  assert.ok(html.includes("&lt;img src=x onerror=&quot;alert(&#x27;x&#x27;)&quot;&gt;&amp;"));
  // The payload is JSON text, escaped in turn: its quotes too.
  assert.ok(html.includes("<code>&quot;&lt;img src=x onerror=\\&quot;alert(&#x27;x&#x27;)\\&quot;&gt;&amp;&quot;</code>"), html);
  assert.equal(html.match(/<tr>/g)?.length, 2); // the header and one report
  assert.match(sentLogHtml(new SentLog([], 0, 8, 0)), /<p>Nothing sent yet\.<\/p><\/section>$/);
  assert.equal(escapeHtml(`&<>"'`), "&amp;&lt;&gt;&quot;&#x27;");
});
