/**
 * JSON as the Chorus protocol writes it (docs/protocol.md, "Canonical JSON").
 *
 * JavaScript has one number type, but the digest tells `1` from `1.0`. A value here is
 * therefore typed: a `number` that is an integer is written as an integer, a `bigint` as an
 * integer too (for integers beyond 2^53), and a float is either a non-integral `number` or a
 * {@link JsonFloat} (needed for integral floats such as `0.0`, `100.0`).
 */

/** A float that must be written as a float even when it is integral (`1.0`, not `1`). */
export class JsonFloat {
  constructor(readonly value: number) {}
}

export type Json =
  | null
  | boolean
  | string
  | number
  | bigint
  | JsonFloat
  | Json[]
  | { [key: string]: Json };

export class JsonError extends Error {
  override name = "JsonError";
}

/** Python's `repr` of a finite binary64 value, from the platform's shortest round-trip digits. */
export function formatFloat(x: number): string {
  if (!Number.isFinite(x)) {
    throw new JsonError(Number.isNaN(x) ? "NaN is not JSON" : "infinity is not JSON");
  }
  if (x === 0) return Object.is(x, -0) ? "-0.0" : "0.0";
  const sign = x < 0 ? "-" : "";
  // String(x) gives the shortest digits that read back as x (closest when several do);
  // only its layout differs from Python's, so read the digits and exponent out of it.
  const match = /^(\d+)(?:\.(\d+))?(?:e([+-]\d+))?$/.exec(String(Math.abs(x)));
  if (match === null) throw new JsonError("unexpected number text");
  const whole = match[1] ?? "";
  const all = whole + (match[2] ?? "");
  const lead = /^0*/.exec(all)?.[0].length ?? 0;
  const digits = all.slice(lead).replace(/0+$/, "");
  const exponent = whole.length - 1 - lead + Number(match[3] ?? "0");
  let body: string;
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      body = "0." + "0".repeat(-exponent - 1) + digits;
    } else if (digits.length <= exponent + 1) {
      body = digits + "0".repeat(exponent + 1 - digits.length) + ".0";
    } else {
      body = digits.slice(0, exponent + 1) + "." + digits.slice(exponent + 1);
    }
  } else {
    const mantissa = digits.length > 1 ? `${digits[0]}.${digits.slice(1)}` : digits;
    const e = Math.abs(exponent).toString().padStart(2, "0");
    body = `${mantissa}e${exponent < 0 ? "-" : "+"}${e}`;
  }
  return sign + body;
}

function formatInteger(n: number | bigint): string {
  if (typeof n === "bigint") return n.toString();
  if (!Number.isSafeInteger(n)) {
    throw new JsonError("an integer beyond 2^53 must be given as a bigint");
  }
  return Object.is(n, -0) ? "0" : n.toString();
}

/** Compare by Unicode code point (not UTF-16 code unit, JavaScript's default). */
export function compareCodePoints(a: string, b: string): number {
  const x = Array.from(a, (c) => c.codePointAt(0) as number);
  const y = Array.from(b, (c) => c.codePointAt(0) as number);
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    const d = (x[i] as number) - (y[i] as number);
    if (d !== 0) return d;
  }
  return x.length - y.length;
}

const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

function formatString(s: string, asciiOnly: boolean): string {
  if (LONE_SURROGATE.test(s)) throw new JsonError("a string holds a lone surrogate (not Unicode text)");
  // JSON.stringify escapes exactly what Python's json.dumps does (", \, \b \f \n \r \t and
  // the other controls as lowercase \u00xx), and nothing else.
  const text = JSON.stringify(s);
  if (!asciiOnly) return text;
  return text.replace(/[\u0080-\uffff]/g, (c) =>
    "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"),
  );
}

function write(value: Json, sortKeys: boolean, asciiOnly: boolean): string {
  if (value === null) return "null";
  if (value === true) return "true";
  if (value === false) return "false";
  if (typeof value === "string") return formatString(value, asciiOnly);
  if (typeof value === "bigint") return formatInteger(value);
  if (typeof value === "number") {
    return Number.isInteger(value) ? formatInteger(value) : formatFloat(value);
  }
  if (value instanceof JsonFloat) return formatFloat(value.value);
  if (Array.isArray(value)) return "[" + value.map((v) => write(v, sortKeys, asciiOnly)).join(",") + "]";
  if (typeof value === "object") {
    const keys = Object.keys(value);
    if (sortKeys) keys.sort(compareCodePoints);
    return (
      "{" +
      keys
        .map((k) => formatString(k, asciiOnly) + ":" + write(value[k] as Json, sortKeys, asciiOnly))
        .join(",") +
      "}"
    );
  }
  throw new JsonError(`not a JSON value: ${typeof value}`);
}

/** Canonical JSON text: sorted keys, no whitespace, UTF-8 characters as they are. */
export function canonicalJson(value: Json): string {
  return write(value, true, false);
}

/** Canonical JSON as the UTF-8 bytes the digest covers. */
export function canonicalBytes(value: Json): Uint8Array<ArrayBuffer> {
  return new TextEncoder().encode(canonicalJson(value));
}

/** Compact JSON with keys in their given order and non-ASCII escaped: the Python client's bytes. */
export function compactAsciiJson(value: Json): string {
  return write(value, false, true);
}

/**
 * A strict JSON parser that keeps what `JSON.parse` forgets: a number written with a fraction
 * or an exponent becomes a {@link JsonFloat}, an integer beyond 2^53 a `bigint`. Writing the
 * result back as canonical JSON therefore gives the text the digest was taken over.
 */
export function parseJsonExact(text: string): Json {
  let i = 0;
  const fail = (what: string): never => {
    throw new JsonError(`invalid JSON at offset ${i}: ${what}`);
  };
  const ws = () => {
    while (i < text.length && " \t\n\r".includes(text[i] as string)) i++;
  };
  const NUMBER = /-?(?:0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?/y;
  const value = (): Json => {
    ws();
    const c = text[i];
    if (c === "{") {
      i++;
      const out: { [key: string]: Json } = {};
      ws();
      if (text[i] === "}") {
        i++;
        return out;
      }
      for (;;) {
        ws();
        if (text[i] !== '"') fail("expected a key");
        const key = str();
        ws();
        if (text[i++] !== ":") fail("expected ':'");
        if (Object.prototype.hasOwnProperty.call(out, key)) fail("duplicate key");
        Object.defineProperty(out, key, { value: value(), enumerable: true, writable: true, configurable: true });
        ws();
        const sep = text[i++];
        if (sep === "}") return out;
        if (sep !== ",") fail("expected ',' or '}'");
      }
    }
    if (c === "[") {
      i++;
      const out: Json[] = [];
      ws();
      if (text[i] === "]") {
        i++;
        return out;
      }
      for (;;) {
        out.push(value());
        ws();
        const sep = text[i++];
        if (sep === "]") return out;
        if (sep !== ",") fail("expected ',' or ']'");
      }
    }
    if (c === '"') return str();
    for (const [word, v] of [["true", true], ["false", false], ["null", null]] as const) {
      if (text.startsWith(word, i)) {
        i += word.length;
        return v;
      }
    }
    NUMBER.lastIndex = i;
    const m = NUMBER.exec(text);
    if (m === null) return fail("unexpected character");
    i += m[0].length;
    if (m[1] !== undefined || m[2] !== undefined) {
      const x = Number(m[0]);
      if (!Number.isFinite(x)) fail("number out of range");
      return new JsonFloat(x);
    }
    const n = Number(m[0]);
    return Number.isSafeInteger(n) ? n : BigInt(m[0]);
  };
  const STRING = /"((?:[^"\\\u0000-\u001f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*)"/y;
  const str = (): string => {
    STRING.lastIndex = i;
    const m = STRING.exec(text);
    if (m === null) return fail("invalid string");
    i += m[0].length;
    return JSON.parse(m[0]) as string;
  };
  const result = value();
  ws();
  if (i !== text.length) fail("trailing text");
  return result;
}
