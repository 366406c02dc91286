/**
 * The outbox's way out: due reports in batches of one campaign, resent byte for byte
 * (docs/protocol.md, steps 9–10; docs/client.md, "What the client sends").
 *
 * A report leaves the outbox only when the collector has answered for it: `accepted` or
 * `duplicate` (delivered), or a refusal of the report itself (dropped; its ε stays spent).
 * Network errors, timeouts, 429 and 5xx keep the batch and hold sending off (Retry-After or
 * backoff); a 413 halves the batch; any answer that is not a Chorus refusal of the reports
 * (a proxy's page, a 401) keeps them too. Nothing here ever sees a true value: the outbox holds
 * randomized reports only, and log lines name counts, statuses and problem kinds.
 */
import type { RandomSource } from "./random.js";
import type { OutboxEntry, SentStatus, Store } from "./store.js";
import { backoffMs, retryAfterMs, sendWithRetries, TransportError, type HttpResponse, type RetryPolicy, type Sleep, type Transport } from "./transport.js";

export const PROBLEM_BASE = "https://chorus.dev/problems/";
/** The problem kinds by which a collector refuses reports for what they are: resending cannot help. */
export const REFUSED_REPORT_KINDS = new Set([
  "malformed-json", "invalid-request", "unsupported-media-type", "invalid-report", "digest-mismatch",
  "report-conflict", "report-too-large", "body-too-large", "too-many-reports", "campaign-retired",
]);

export interface FlushResult {
  accepted: number;
  duplicate: number;
  rejected: number;
  /** Still in the outbox afterwards (not due, or the collector could not take them). */
  pending: number;
}

export type Log = (level: "warn" | "info", message: string) => void;

export const consoleLog: Log = (level, message) => (level === "warn" ? console.warn(message) : console.info(message));

export interface SenderOptions {
  url: string;
  transport: Transport;
  store: Store;
  retry: RetryPolicy;
  sleep: Sleep;
  clock: () => number;
  rng: RandomSource;
  batchSize: number;
  timeoutMs: number;
  sentLogSize: number;
  log: Log;
  /** Sent as `Authorization: Bearer` with report uploads (never with config fetches): the same for every install. */
  ingestKey?: string | undefined;
}

function problemKind(response: HttpResponse): string | null {
  const type = (response.header("Content-Type") ?? "").split(";")[0]?.trim().toLowerCase();
  if (type !== "application/problem+json") return null;
  try {
    const body = JSON.parse(response.body) as { type?: unknown };
    const kind = typeof body?.type === "string" ? body.type : "";
    return kind.startsWith(PROBLEM_BASE) ? kind.slice(PROBLEM_BASE.length) : null;
  } catch {
    return null;
  }
}

export class Sender {
  /** No sending before this clock time (Unix seconds): Retry-After, or backoff after failures. */
  holdUntil = 0;
  private failures = 0;
  private flushing: Promise<FlushResult> | null = null;
  readonly totals: FlushResult = { accepted: 0, duplicate: 0, rejected: 0, pending: 0 };
  private readonly headers: Record<string, string>;

  constructor(private readonly o: SenderOptions) {
    this.headers = { "Content-Type": "application/json", Accept: "application/json" };
    if (o.ingestKey !== undefined) this.headers.Authorization = `Bearer ${o.ingestKey}`;
  }

  /** Sends the due reports (all of them with `everything`) until none is left or the collector cannot take more. One flush at a time. */
  flush(everything = false): Promise<FlushResult> {
    if (this.flushing === null) {
      this.flushing = this.run(everything).finally(() => {
        this.flushing = null;
      });
    }
    return this.flushing;
  }

  /** Clears any hold-off: the next flush is a last attempt (close()). */
  release(): void {
    this.holdUntil = 0;
  }

  private async run(everything: boolean): Promise<FlushResult> {
    const result: FlushResult = { accepted: 0, duplicate: 0, rejected: 0, pending: 0 };
    let size = this.o.batchSize;
    const rounds = (await this.o.store.read((s) => s.outbox.length)) * 2 + 8; // every round settles, splits or stops
    for (let round = 0; round < rounds && this.o.clock() >= this.holdUntil; round++) {
      const dueBy = everything ? Infinity : this.o.clock();
      const rows = await this.o.store.read((s) => dueBatch(s.outbox, dueBy, size));
      if (rows.length === 0) break;
      // The store shows a row only after the transaction that charged it was durable: the
      // charge of everything sent here is on disk already.
      const outcome = await this.sendBatch(rows, result);
      if (outcome === "split") size = Math.max(1, Math.floor(rows.length / 2));
      else if (outcome !== "done") break;
    }
    result.pending = await this.o.store.read((s) => s.outbox.length);
    this.totals.accepted += result.accepted;
    this.totals.duplicate += result.duplicate;
    this.totals.rejected += result.rejected;
    this.totals.pending = result.pending;
    return result;
  }

  /** Holds sending off for `ms` (default: the backoff after this many failures in a row). */
  holdOff(ms = backoffMs(this.o.retry, Math.min(this.failures, 10), this.o.rng)): void {
    this.failures += 1;
    this.holdUntil = this.o.clock() + ms / 1000;
  }

  private async sendBatch(rows: OutboxEntry[], result: FlushResult): Promise<"done" | "split" | "kept"> {
    const body = `{"reports":[${rows.map((r) => r.wire).join(",")}]}`;
    let response: HttpResponse;
    try {
      response = await sendWithRetries(
        this.o.transport, "POST", `${this.o.url}/v1/reports`,
        { body, headers: this.headers, timeoutMs: this.o.timeoutMs }, this.o.retry, this.o.sleep, this.o.rng,
      );
    } catch (error) {
      if (!(error instanceof TransportError)) throw error;
      this.o.log("warn", `chorus: collector unreachable, ${rows.length} reports kept: ${error.message}`);
      this.holdOff();
      return "kept";
    }
    if (response.status === 200) {
      this.failures = 0;
      let answers: unknown[] = [];
      try {
        const parsed = JSON.parse(response.body) as { results?: unknown };
        if (Array.isArray(parsed?.results)) answers = parsed.results;
      } catch {
        // not an answer for the reports: keep them
      }
      const settled: [number, SentStatus][] = [];
      for (let i = 0; i < Math.min(rows.length, answers.length); i++) {
        const answer = answers[i] as { status?: unknown; error?: unknown } | null;
        const status = answer?.status;
        if (status === "accepted") result.accepted++;
        else if (status === "duplicate") result.duplicate++; // stored before: delivered
        else {
          result.rejected++;
          const kind = typeof answer?.error === "string" ? answer.error.slice(0, 60) : "no reason";
          this.o.log("warn", `chorus: a report was rejected by the collector (${kind}); dropped`);
        }
        settled.push([(rows[i] as OutboxEntry).seq, status === "accepted" || status === "duplicate" ? status : "refused"]);
      }
      await this.settle(settled);
      if (settled.length === rows.length) return "done";
      this.holdOff(); // an answer for part of the batch: the rest waits, so no timer spins on it
      return "kept";
    }
    if (response.status === 413 && rows.length > 1) return "split"; // over a request limit: halves
    const kind = problemKind(response);
    if (response.status >= 400 && response.status < 500 && kind !== null && REFUSED_REPORT_KINDS.has(kind)) {
      this.o.log("warn", `chorus: the collector refused ${rows.length} reports (${response.status} ${kind}); dropped`);
      result.rejected += rows.length;
      await this.settle(rows.map((r) => [r.seq, "refused"]));
      return "done";
    }
    // 401/403/404, 429, 5xx, a proxy's page: not the reports' fault; keep them.
    const delay = Math.max(backoffMs(this.o.retry, Math.min(this.failures, 10), this.o.rng), retryAfterMs(response) ?? 0);
    this.o.log("warn", `chorus: collector answered ${response.status}, ${rows.length} reports kept for ${Math.round(delay / 1000)} s`);
    this.holdOff(delay);
    return "kept";
  }

  /** Moves answered reports from the outbox to the sent log, in one transaction. */
  private async settle(answered: [number, SentStatus][]): Promise<void> {
    if (answered.length === 0) return;
    const day = Math.floor(this.o.clock() / 86400);
    const keep = this.o.sentLogSize;
    await this.o.store.update((draft) => {
      const status = new Map(answered);
      const left: OutboxEntry[] = [];
      for (const row of draft.outbox) {
        const s = status.get(row.seq);
        if (s === undefined) left.push(row);
        else if (keep > 0) draft.sentLog.push({ campaign: row.campaign, wire: row.wire, epsilon: row.epsilon, status: s, day });
      }
      draft.outbox = left;
      if (draft.sentLog.length > keep) draft.sentLog = draft.sentLog.slice(draft.sentLog.length - keep);
    });
  }
}

/** The oldest due reports of one campaign (the campaign of the oldest due report): one campaign per request. */
export function dueBatch(outbox: readonly OutboxEntry[], dueBy: number, size: number): OutboxEntry[] {
  const first = outbox.find((r) => r.due <= dueBy);
  if (first === undefined) return [];
  return outbox.filter((r) => r.campaign === first.campaign && r.due <= dueBy).slice(0, size);
}
