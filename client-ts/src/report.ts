/** The report envelope (docs/protocol.md, "The report"). */
import { canonicalJson, compactAsciiJson, JsonFloat, type Json } from "./json.js";
import { cryptoRandom, randomHex, type RandomSource } from "./random.js";

export const REPORT_ID_PATTERN = /^[0-9a-f]{32}$/;
export const DIGEST_PATTERN = /^[0-9a-f]{64}$/;
export const MAX_TIME = 2 ** 40;

export interface Report {
  report_id: string;
  digest: string;
  time: number;
  payload: Json;
}

export class ReportError extends Error {
  override name = "ReportError";
}

/** A fresh report ID: 16 bytes of the CSPRNG, never derived from anything else. */
export function newReportId(rng: RandomSource = cryptoRandom): string {
  return randomHex(rng, 16);
}

/** The report time: ⌊now / precision⌋ · precision, now in Unix seconds. */
export function truncateTime(nowSeconds: number, precision: number): number {
  if (!Number.isSafeInteger(precision) || precision < 1) throw new RangeError("time_precision must be a positive integer");
  if (!Number.isFinite(nowSeconds) || nowSeconds < 0) throw new RangeError("now must be a non-negative number of seconds");
  return Math.floor(nowSeconds / precision) * precision;
}

/** A report with its four fields in wire order. */
export function buildReport(digest: string, time: number, payload: Json, rng: RandomSource = cryptoRandom): Report {
  const report = { report_id: newReportId(rng), digest, time, payload };
  checkEnvelope(report, undefined);
  return report;
}

/** The bytes to store and send (and resend unchanged): compact JSON, keys in wire order, non-ASCII escaped. */
export function reportWire(report: Report): string {
  return compactAsciiJson({ report_id: report.report_id, digest: report.digest, time: report.time, payload: report.payload });
}

/** The report's canonical JSON (what the collector compares two submissions of one ID by). */
export function reportCanonical(report: Report): string {
  return canonicalJson({ ...report });
}

/**
 * The envelope checks a collector makes without its clock or its campaigns: an object of
 * exactly the four fields, a 32-hex ID, a 64-hex digest, an integer time in [0, 2^40) that is a
 * multiple of `timePrecision` (when given). A client runs it on what it built before storing.
 */
export function checkEnvelope(report: unknown, timePrecision: number | undefined): asserts report is Report {
  if (typeof report !== "object" || report === null || Array.isArray(report) || report instanceof JsonFloat) {
    throw new ReportError("a report must be a JSON object");
  }
  const fields = ["report_id", "digest", "time", "payload"];
  const keys = Object.keys(report);
  const missing = fields.filter((f) => !keys.includes(f));
  if (missing.length > 0) throw new ReportError(`report is missing ${JSON.stringify(missing)}`);
  const extra = keys.filter((k) => !fields.includes(k));
  if (extra.length > 0) throw new ReportError(`report has unknown fields ${JSON.stringify(extra)}`);
  const r = report as { [k: string]: unknown };
  if (typeof r.report_id !== "string" || !REPORT_ID_PATTERN.test(r.report_id) || r.report_id.length !== 32) {
    throw new ReportError("report_id must be 32 lowercase hex digits (16 random bytes)");
  }
  if (typeof r.digest !== "string" || !DIGEST_PATTERN.test(r.digest) || r.digest.length !== 64) {
    throw new ReportError("digest must be 64 lowercase hex digits");
  }
  const time = r.time;
  if (typeof time !== "number" || !Number.isSafeInteger(time) || time < 0 || time >= MAX_TIME) {
    throw new ReportError("time must be a non-negative integer (Unix seconds)");
  }
  if (timePrecision !== undefined && time % timePrecision !== 0) {
    throw new ReportError(`time must be truncated to the campaign's time precision (${timePrecision} s)`);
  }
}
