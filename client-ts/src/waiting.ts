/**
 * What waits in the outbox and when it may leave ({@link Client.waiting}). A report leaves after
 * its time bucket has ended, at a random moment of the next, so a new app's first report
 * leaves an hour or more later; this says so in words, so that a developer does not take a
 * full outbox for a broken client.
 */

export interface CampaignWaiting {
  reports: number;
  /** Unix seconds when the earliest may leave. */
  firstDue: number;
  lastDue: number;
}

/** `14:00 UTC` within a day of `now`, `2026-12-03 14:00 UTC` further away. */
export function utcTime(moment: number, now: number): string {
  const iso = new Date(moment * 1000).toISOString();
  return Math.abs(moment - now) < 86400 ? `${iso.slice(11, 16)} UTC` : `${iso.slice(0, 10)} ${iso.slice(11, 16)} UTC`;
}

const count = (n: number) => (n === 1 ? "1 report" : `${n} reports`);

export class Waiting {
  constructor(
    readonly now: number,
    readonly campaigns: ReadonlyMap<string, CampaignWaiting>,
    /** The collector asked to wait or could not be reached: nothing leaves before this (Unix seconds). */
    readonly heldUntil: number | null,
  ) {}

  get reports(): number {
    return [...this.campaigns.values()].reduce((s, c) => s + c.reports, 0);
  }

  /** When the earliest report may leave (null: nothing waits). */
  get nextDue(): number | null {
    const dues = [...this.campaigns.values()].map((c) => c.firstDue);
    return dues.length === 0 ? null : Math.min(...dues);
  }

  toString(): string {
    if (this.campaigns.size === 0) return "nothing waits in the outbox";
    const parts = [...this.campaigns.entries()]
      .sort(([a], [b]) => (a < b ? -1 : 1))
      .map(([name, w]) => {
        let when = w.firstDue <= this.now ? "due now" : `leaving from ${utcTime(w.firstDue, this.now)}`;
        if (w.lastDue > w.firstDue && w.lastDue > this.now) when += ` to ${utcTime(w.lastDue, this.now)}`;
        return `${name}: ${count(w.reports)} ${when}`;
      });
    let text = `${count(this.reports)} ${this.reports === 1 ? "waits" : "wait"} (${parts.join("; ")})`;
    if (this.heldUntil !== null && this.heldUntil > this.now) {
      text += `; the collector asked to wait or could not be reached: nothing leaves before ${utcTime(this.heldUntil, this.now)}`;
    }
    return text;
  }

  /** The summary and why reports wait: for a log line or a developer's console. */
  explained(): string {
    if (this.campaigns.size === 0) return String(this);
    return `${String(this)}. A report leaves after the time bucket it was made in has ended, at a random moment of the next, so that when it leaves says nothing about when it was made; an app that stops sooner sends it on a later run (docs/client.md, "When reports leave").`;
  }
}
