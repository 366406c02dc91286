/**
 * How the client sends bytes: `fetch` without credentials, with generic headers only, and
 * retries that resend the identical body (docs/client.md, "What the client sends").
 */
import { cryptoRandom, uniform01, type RandomSource } from "./random.js";

export interface HttpResponse {
  status: number;
  body: string;
  header(name: string): string | null;
}

export interface RequestOptions {
  body?: string;
  headers: Record<string, string>;
  timeoutMs: number;
}

/** Sends one request; throws {@link TransportError} when no response arrived. */
export interface Transport {
  request(method: "GET" | "POST", url: string, options: RequestOptions): Promise<HttpResponse>;
}

/** No response: a network error or a timeout. Its message names the cause, never a report. */
export class TransportError extends Error {
  override name = "TransportError";
}

/**
 * The default transport: the platform's `fetch` with `credentials: "omit"` (no cookie is sent,
 * and none set by the collector is stored), no cache, no referrer, and redirects refused (a
 * redirect could carry the reports to another origin), a new connection per request. The only
 * headers are the request's own `Content-Type` and `Accept` and the platform's generic ones,
 * the same for every install.
 */
export const fetchTransport: Transport = {
  async request(method, url, options) {
    let response: Response;
    try {
      response = await globalThis.fetch(url, {
        method,
        body: options.body,
        // No connection reuse, which would link one install's requests (Node honours it; a
        // browser drops this forbidden header silently and pools as it likes).
        headers: { ...options.headers, Connection: "close" },
        credentials: "omit",
        cache: "no-store",
        redirect: "error",
        referrerPolicy: "no-referrer",
        signal: AbortSignal.timeout(options.timeoutMs),
      });
    } catch (error) {
      const cause = (error as { cause?: { code?: string } }).cause?.code;
      throw new TransportError(`no answer from the collector (${(error as Error).name}${cause ? `: ${cause}` : ""})`);
    }
    let body: string;
    try {
      body = await response.text();
    } catch (error) {
      throw new TransportError(`the collector's answer was cut off (${(error as Error).name})`);
    }
    return { status: response.status, body, header: (name) => response.headers.get(name) };
  },
};

export interface RetryPolicy {
  maxAttempts: number;
  baseDelayMs: number;
  maxDelayMs: number;
}

export const DEFAULT_RETRY: RetryPolicy = { maxAttempts: 5, baseDelayMs: 500, maxDelayMs: 30_000 };

/** Timeouts, connection errors, 429 and 5xx (but 501) may succeed later; any other status is final. */
export function isRetryable(status: number): boolean {
  return status === 429 || (status >= 500 && status <= 599 && status !== 501);
}

/** Full jitter: uniform in [0, min(max, base · 2^attempt)] milliseconds. */
export function backoffMs(policy: RetryPolicy, attempt: number, rng: RandomSource = cryptoRandom): number {
  return uniform01(rng) * Math.min(policy.maxDelayMs, policy.baseDelayMs * 2 ** attempt);
}

/** The Retry-After header in milliseconds, if it is a number of seconds. */
export function retryAfterMs(response: HttpResponse): number | null {
  const value = response.header("Retry-After");
  if (value === null || !/^\s*\d+(\.\d+)?\s*$/.test(value)) return null;
  return Math.max(0, Number(value) * 1000);
}

export type Sleep = (ms: number) => Promise<void>;
export const realSleep: Sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Sends until a final answer. The body is built once by the caller, so every attempt carries
 * the same bytes. Returns the last response when it is final, or the last retryable one once
 * the attempts are used up (or the collector asks to wait longer than the policy allows);
 * throws {@link TransportError} when no attempt got an answer.
 */
export async function sendWithRetries(
  transport: Transport,
  method: "GET" | "POST",
  url: string,
  options: RequestOptions,
  policy: RetryPolicy,
  sleep: Sleep,
  rng: RandomSource = cryptoRandom,
): Promise<HttpResponse> {
  let lastError: TransportError | undefined;
  let response: HttpResponse | undefined;
  for (let attempt = 0; attempt < policy.maxAttempts; attempt++) {
    try {
      response = await transport.request(method, url, options);
      lastError = undefined;
      if (!isRetryable(response.status)) return response;
    } catch (error) {
      if (!(error instanceof TransportError)) throw error;
      lastError = error;
      response = undefined;
    }
    if (attempt + 1 === policy.maxAttempts) break;
    let wait = backoffMs(policy, attempt, rng);
    const advised = response === undefined ? null : retryAfterMs(response);
    if (advised !== null) {
      if (advised > policy.maxDelayMs) break; // the collector asks for longer than we may wait
      wait = Math.max(wait, advised);
    }
    await sleep(wait);
  }
  if (response !== undefined) return response;
  throw lastError ?? new TransportError("no attempt was made");
}
