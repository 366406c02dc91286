/**
 * What this device sent ({@link Client.sentLog}), for the app to show its user: each report as
 * it left, with the ε it was charged and the collector's answer, and the budget spent and left.
 * It holds nothing the collector does not already get: never a true value. `sentLogText` and
 * `sentLogHtml` (sent-log-view.ts, outside the core browser bundle) render it.
 */
import { parseJsonExact, type Json } from "./json.js";
import type { SentEntry, SentStatus } from "./store.js";

export interface SentReport {
  campaign: string;
  reportId: string;
  /** The report's time bucket (Unix seconds). */
  bucket: number;
  /** The randomized payload, as sent. */
  payload: Json;
  epsilon: number;
  status: SentStatus;
  /** UTC date of the collector's answer. */
  day: string;
}

export class SentLog {
  readonly reports: readonly SentReport[];

  constructor(
    entries: readonly SentEntry[],
    readonly spent: number,
    readonly lifetimeBudget: number,
    /** Reports still waiting in the outbox. */
    readonly waiting: number,
  ) {
    this.reports = entries.map((e) => {
      const report = parseJsonExact(e.wire) as { report_id: string; time: number; payload: Json };
      return {
        campaign: e.campaign, reportId: report.report_id, bucket: report.time, payload: report.payload,
        epsilon: e.epsilon, status: e.status, day: new Date(e.day * 86400_000).toISOString().slice(0, 10),
      };
    });
  }

  get remaining(): number {
    return Math.max(0, this.lifetimeBudget - this.spent);
  }
}
