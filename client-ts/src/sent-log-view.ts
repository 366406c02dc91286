/**
 * The sent log rendered for an app's settings or privacy page (the Python client's
 * `SentLog.text()` and `.html()`): what left, newest first, the ε each report was charged, the
 * collector's answer, and the budget spent and left. Its own module, so that the core browser
 * bundle carries it only for an app that shows it.
 */
import type { Json } from "./json.js";
import type { SentLog, SentReport } from "./sent-log.js";

const EXPLANATION = "Each report holds a value randomized on this device before it left (local differential privacy): "
  + "on its own it does not say what the true value was. ε measures how much a report can reveal at most; "
  + "the device stops reporting once its lifetime budget is spent.";

const g = (x: number): string => String(Number(x.toPrecision(4)));

/** The payload as sent, compact JSON (typed floats as their numbers). */
function payloadText(payload: Json): string {
  return JSON.stringify(payload, (_key, v: unknown) =>
    typeof v === "object" && v !== null && "value" in v && Object.keys(v).length === 1 ? (v as { value: number }).value : v);
}

function bucket(report: SentReport): string {
  const iso = new Date(report.bucket * 1000).toISOString();
  return `${iso.slice(0, 10)} ${iso.slice(11, 16)} UTC`;
}

/** ε spent and left, and how many reports wait. */
export function budgetLine(log: SentLog): string {
  let line = Number.isFinite(log.lifetimeBudget)
    ? `ε spent: ${g(log.spent)} of ${g(log.lifetimeBudget)} (${g(log.remaining)} left)`
    : `ε spent: ${g(log.spent)} (no lifetime budget set)`;
  if (log.waiting > 0) line += `; ${log.waiting} ${log.waiting === 1 ? "report waits" : "reports wait"} to be sent`;
  return line;
}

/** Plain text, newest first. */
export function sentLogText(log: SentLog): string {
  const lines = ["What this device sent, newest first.", EXPLANATION, budgetLine(log)];
  if (log.reports.length === 0) lines.push("Nothing sent yet.");
  for (const r of log.reports) {
    lines.push(`${r.day}  ${r.campaign}  ε ${g(r.epsilon)}  ${r.status}  bucket ${bucket(r)}  payload ${payloadText(r.payload)}`);
  }
  return lines.join("\n");
}

const ESCAPES: Record<string, string> = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#x27;" };

/** Text made safe for HTML content and attribute values (Python's `html.escape`). */
export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => ESCAPES[c] as string);
}

/** A self-contained HTML fragment: no script, no style, every field escaped. */
export function sentLogHtml(log: SentLog): string {
  const e = escapeHtml;
  const parts = ['<section class="chorus-sent-log">', `<p>${e(EXPLANATION)}</p>`, `<p>${e(budgetLine(log))}</p>`];
  if (log.reports.length === 0) parts.push("<p>Nothing sent yet.</p>");
  else {
    parts.push('<table><caption>What this device sent, newest first</caption><thead><tr><th scope="col">Answered</th>'
      + '<th scope="col">Campaign</th><th scope="col">ε</th><th scope="col">Answer</th><th scope="col">Time bucket</th>'
      + '<th scope="col">Randomized report</th></tr></thead><tbody>');
    for (const r of log.reports) {
      parts.push(`<tr><td>${e(r.day)}</td><td>${e(r.campaign)}</td><td>${e(g(r.epsilon))}</td><td>${e(r.status)}</td>`
        + `<td>${e(bucket(r))}</td><td><code>${e(payloadText(r.payload))}</code></td></tr>`);
    }
    parts.push("</tbody></table>");
  }
  parts.push("</section>");
  return parts.join("");
}
