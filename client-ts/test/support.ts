/** Helpers shared by the runtime tests: configs, a scripted transport, a movable clock. */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { JsonFloat, type HttpResponse, type Json, type RequestOptions, type Transport } from "../src/index.js";

export const NOW = 1_767_225_600; // 2026-01-01T00:00:00Z
export const DAY = 86400;
type Obj = { [key: string]: Json };

/** A k-RR public config with the given privacy policy (and schedule), as the collector would publish it (floats typed). */
export function krrConfig(name: string, options: { epsilon?: number; privacy?: Obj; schedule?: Obj; values?: string[]; other?: string; precision?: number } = {}): Obj {
  const epsilon = options.epsilon ?? 1;
  const domain: Obj = { kind: "categories", values: options.values ?? ["light", "dark", "hc", "sepia"] };
  if (options.other !== undefined) domain.other = options.other;
  const config: Obj = {
    format: "chorus.campaign/1", name, description: "", mechanism: "krr", epsilon: new JsonFloat(epsilon), domain, params: {},
    time_precision: options.precision ?? 3600, min_batch_size: 100, report_expiry: 7776000,
    privacy: options.privacy ?? { unit: "lifetime", budget: new JsonFloat(epsilon), max_reports: 1 },
  };
  if (options.schedule !== undefined) config.schedule = options.schedule;
  return config;
}

export class Clock {
  constructor(public now: number = NOW) {}
  readonly read = (): number => this.now;
}

export interface Sent {
  method: string;
  url: string;
  body: string | undefined;
  headers: Record<string, string>;
}

export type Answer = HttpResponse | "network-error";

export function answer(status: number, body: unknown = "", headers: Record<string, string> = {}): HttpResponse {
  const lower = Object.fromEntries(Object.entries(headers).map(([k, v]) => [k.toLowerCase(), v]));
  return { status, body: typeof body === "string" ? body : JSON.stringify(body), header: (n) => lower[n.toLowerCase()] ?? null };
}

/** Accepts every report of a batch (or answers from `script` first), recording every request. */
export class ScriptedTransport implements Transport {
  readonly sent: Sent[] = [];
  constructor(public script: Answer[] = [], readonly configs: Record<string, string> = {}) {}

  async request(method: "GET" | "POST", url: string, options: RequestOptions): Promise<HttpResponse> {
    this.sent.push({ method, url, body: options.body, headers: { ...options.headers } });
    const next = this.script.shift();
    if (next === "network-error") {
      const { TransportError } = await import("../src/index.js");
      throw new TransportError("no answer (scripted)");
    }
    if (next !== undefined) return next;
    if (method === "GET") {
      const name = decodeURIComponent(url.split("/").pop() as string);
      const config = this.configs[name];
      return config === undefined ? answer(404, "") : answer(200, config, { "Content-Type": "application/json" });
    }
    const reports = (JSON.parse(options.body as string) as { reports: unknown[] }).reports;
    return answer(200, { results: reports.map(() => ({ status: "accepted" })) }, { "Content-Type": "application/json" });
  }

  posts(): Sent[] {
    return this.sent.filter((s) => s.method === "POST");
  }

  /** Every report posted, parsed. */
  reports(): { report_id: string; digest: string; time: number; payload: Json }[] {
    return this.posts().flatMap((s) => (JSON.parse(s.body as string) as { reports: never[] }).reports);
  }
}

export const noSleep = async (): Promise<void> => {};
export const quiet = (): void => {};

/** A new directory under the system's temporary one, removed when the test file's process exits
 * (each test file runs in a process of its own): the tests leave nothing behind in /tmp. */
export function scratchDir(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  process.once("exit", () => rmSync(dir, { recursive: true, force: true }));
  return dir;
}
