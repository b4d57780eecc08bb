// sluice's five strategies, validated exactly as the Go library validates them (policy.go): every
// parameter finite and in range, or an InvalidArgumentError naming it by the conformance vectors'
// parameter name. A strategy is a frozen object with its kind, its parameters, the ceiling of one
// check and the window the RateLimit-Policy header reports (header.Window in header/header.go).

import { InvalidArgumentError } from "./errors.js";

/** maxParam bounds every numeric parameter: past 2^53 a double no longer counts whole units. */
const maxParam = 2 ** 53;

/** The longest Duration Go's header.Window returns, in ms (math.MaxInt64 ns). */
const maxWindowMs = 9223372036854775807 / 1e6;

/** The strategies' wire names, as the vectors and the Go library's Kind() spell them. */
export type StrategyKind = "gcra" | "tokenBucket" | "fixedWindow" | "slidingWindow" | "slidingWindowLog";

/** What every strategy has beside its parameters. */
interface StrategyBase {
  readonly kind: StrategyKind;
  /** The most units one check can ever be admitted for (Go's Strategy.Ceiling). */
  readonly ceiling: number;
  /**
   * The time in which the limit gives back its whole ceiling, ms, which the RateLimit-Policy
   * header reports as w (Go's header.Window): periodMs/limit*burst for GCRA, capacity/refillPerSec
   * s for a token bucket, and the windowMs parameter itself for the window strategies.
   */
  readonly windowMs: number;
}

/** GCRA: limit cells per periodMs with burst cells of headroom; its ceiling is burst. */
export interface GcraStrategy extends StrategyBase {
  readonly kind: "gcra";
  readonly limit: number;
  readonly periodMs: number;
  readonly burst: number;
}

/** A bucket of capacity tokens refilled at refillPerSec tokens a second; its ceiling is capacity. */
export interface TokenBucketStrategy extends StrategyBase {
  readonly kind: "tokenBucket";
  readonly capacity: number;
  readonly refillPerSec: number;
}

/**
 * limit units per epoch-aligned window of windowMs; or, with calendar "day" or "month" (and
 * windowMs 0), per calendar day or month of timezone (an IANA name; "" is UTC).
 */
export interface FixedWindowStrategy extends StrategyBase {
  readonly kind: "fixedWindow";
  readonly limit: number;
  readonly windowMs: number;
  readonly calendar: Calendar;
  readonly timezone: string;
}

/** A calendar period a fixed window can align to; "" for windows of windowMs. */
export type Calendar = "" | "day" | "month";

/** limit units over the trailing windowMs, estimated from buckets sub-windows. */
export interface SlidingWindowStrategy extends StrategyBase {
  readonly kind: "slidingWindow";
  readonly limit: number;
  readonly windowMs: number;
  readonly buckets: number;
}

/** limit units (a whole number) over the trailing windowMs, counted exactly. */
export interface SlidingWindowLogStrategy extends StrategyBase {
  readonly kind: "slidingWindowLog";
  readonly limit: number;
  readonly windowMs: number;
}

export type Strategy =
  | GcraStrategy
  | TokenBucketStrategy
  | FixedWindowStrategy
  | SlidingWindowStrategy
  | SlidingWindowLogStrategy;

/**
 * goFloat prints x as Go's strconv.FormatFloat(x, 'g', -1, 64) and fmt's %v do: the shortest
 * digits that read back as the same double, in exponent form (at least two exponent digits) when
 * the decimal exponent is below -4 or at least 6, Go's rule for the shortest 'g' (1e+06, 123456,
 * 1.234567e+06, 1e-05, 0.0001). JS's String(x) has the same digits but switches at 1e21 and 1e-7.
 */
export function goFloat(x: number): string {
  if (!Number.isFinite(x)) return x > 0 ? "+Inf" : x < 0 ? "-Inf" : "NaN";
  if (x === 0) return Object.is(x, -0) ? "-0" : "0";
  const [mantissa, expText] = x.toExponential().split("e");
  const exp = Number(expText);
  if (exp >= -4 && exp < 6) return String(x);
  const sign = exp < 0 ? "-" : "+";
  const digits = String(Math.abs(exp)).padStart(2, "0");
  return `${mantissa}e${sign}${digits}`;
}

/** isNumber reports whether v is a number, NaN included (range checks refuse NaN). */
function isNumber(v: unknown): v is number {
  return typeof v === "number";
}

/** positive is Go's positive: v above 0 and at most 2^53. */
function positive(field: string, v: unknown): InvalidArgumentError | undefined {
  if (!isNumber(v) || !(v > 0 && v <= maxParam)) {
    return new InvalidArgumentError(field, `must be above 0 and at most 2^53, got ${show(v)}`);
  }
  return undefined;
}

/** atLeast is Go's atLeast: v from lo to 2^53. */
function atLeast(field: string, v: unknown, lo: number): InvalidArgumentError | undefined {
  if (!isNumber(v) || !(v >= lo && v <= maxParam)) {
    return new InvalidArgumentError(field, `must be from ${goFloat(lo)} to 2^53, got ${show(v)}`);
  }
  return undefined;
}

/** show prints a parameter's value for a reason: numbers as Go's %v does. */
function show(v: unknown): string {
  return isNumber(v) ? goFloat(v) : JSON.stringify(v) ?? String(v);
}

/** firstErr throws the first error of errs, as Go's firstErr returns it. */
function firstErr(...errs: (InvalidArgumentError | undefined)[]): void {
  const err = errs.find((e) => e !== undefined);
  if (err) throw err;
}

/** headerWindow is ms as Go's header.Window keeps it: whole ns rounded up, 0 to MaxInt64 ns. */
function headerWindow(ms: number): number {
  const ns = Math.ceil(ms * 1e6);
  if (!(ns > 0)) return 0;
  if (ns >= 9223372036854775807) return maxWindowMs;
  return ns / 1e6;
}

/** Gcra is limit cells per periodMs with burst cells of headroom (Go's sluice.GCRA). */
export function Gcra(limit: number, periodMs: number, burst: number): GcraStrategy {
  firstErr(positive("limit", limit), atLeast("periodMs", periodMs, 1), atLeast("burst", burst, 1));
  // The emission interval must stay well above a double's resolution at an epoch instant, and a
  // full burst must drain within 2^53 ms.
  const t = periodMs / limit;
  if (t < 0.001 || t * burst > maxParam) {
    throw new InvalidArgumentError(
      "limit",
      `periodMs/limit must be at least 0.001 ms and periodMs/limit*burst at most 2^53 ms, got ${goFloat(t)} ms`,
    );
  }
  return Object.freeze({ kind: "gcra", limit, periodMs, burst, ceiling: burst, windowMs: headerWindow((periodMs / limit) * burst) });
}

/** TokenBucket holds capacity tokens refilled at refillPerSec a second (Go's sluice.TokenBucket). */
export function TokenBucket(capacity: number, refillPerSec: number): TokenBucketStrategy {
  firstErr(atLeast("capacity", capacity, 1), positive("refillPerSec", refillPerSec));
  const fill = capacity / (refillPerSec / 1000);
  if (fill > maxParam) {
    throw new InvalidArgumentError("refillPerSec", `refilling capacity must take at most 2^53 ms, got ${goFloat(fill)} ms`);
  }
  return Object.freeze({
    kind: "tokenBucket",
    capacity,
    refillPerSec,
    ceiling: capacity,
    windowMs: headerWindow((capacity / refillPerSec) * 1000),
  });
}

/**
 * FixedWindow admits limit units per epoch-aligned window of windowMs (Go's sluice.FixedWindow);
 * or, with calendar "day" or "month" and windowMs 0, per calendar day or month of timezone (an
 * IANA name such as "Europe/Rome"; "" is UTC): a day in Europe/Rome starts at local midnight and
 * lasts 23, 24 or 25 hours.
 */
export function FixedWindow(limit: number, windowMs: number, calendar: Calendar = "", timezone = ""): FixedWindowStrategy {
  firstErr(atLeast("limit", limit, 1));
  if (calendar === "") {
    if (timezone !== "") throw new InvalidArgumentError("timezone", "applies only to calendar windows (calendar day or month)");
    firstErr(atLeast("windowMs", windowMs, 1));
  } else if (calendar !== "day" && calendar !== "month") {
    throw new InvalidArgumentError("calendar", `must be day or month, got ${JSON.stringify(calendar)}`);
  } else if (windowMs !== 0) {
    throw new InvalidArgumentError("windowMs", `must be 0 with a calendar window, got ${show(windowMs)}`);
  } else {
    zone(timezone);
  }
  return Object.freeze({ kind: "fixedWindow", limit, windowMs, calendar, timezone, ceiling: limit });
}

// ---- Calendar windows: Go's FixedWindow.Bounds, on the zone data of Intl ----

/** zones caches each zone's formatter of local date and time, by name. */
const zones = new Map<string, Intl.DateTimeFormat>();

/**
 * zone returns the formatter of the named zone, refusing what Go's time.LoadLocation refuses:
 * "Local" (a fleet's hosts need not share a zone), a name Intl does not know, and a known name
 * spelled in another case (Go finds zone files by their exact names). "" and "UTC" are UTC.
 */
function zone(name: string): Intl.DateTimeFormat {
  let f = zones.get(name);
  if (f) return f;
  const refuse = () => new InvalidArgumentError("timezone", `must be an IANA time zone such as Europe/Rome, got ${JSON.stringify(name)}`);
  if (typeof name !== "string" || name.toLowerCase() === "local" || /^[+-]/.test(name)) throw refuse();
  try {
    f = new Intl.DateTimeFormat("en-US", {
      timeZone: name === "" ? "UTC" : name,
      hourCycle: "h23",
      year: "numeric",
      month: "numeric",
      day: "numeric",
      hour: "numeric",
      minute: "numeric",
      second: "numeric",
      era: "short",
    });
  } catch {
    throw refuse();
  }
  const resolved = f.resolvedOptions().timeZone;
  if (name !== "" && resolved !== name && resolved.toLowerCase() === name.toLowerCase()) throw refuse();
  zones.set(name, f);
  return f;
}

/** localParts is the local date and time in f's zone at the instant ms (whole seconds). */
function localParts(f: Intl.DateTimeFormat, ms: number): { y: number; m: number; d: number; secs: number } {
  const p: Record<string, string> = {};
  for (const part of f.formatToParts(new Date(ms))) p[part.type] = part.value;
  const year = p.era === "BC" || p.era === "B" ? 1 - Number(p.year) : Number(p.year);
  const secs = Date.UTC(year, Number(p.month) - 1, Number(p.day), Number(p.hour), Number(p.minute), Number(p.second)) / 1000;
  return { y: year, m: Number(p.month), d: Number(p.day), secs };
}

/** offset is the zone's offset from UTC at the instant unix (epoch s), in seconds. */
function offset(f: Intl.DateTimeFormat, unix: number): number {
  return localParts(f, unix * 1000).secs - unix;
}

/**
 * midnight is the first instant (epoch ms) of day d of month m (from 1, either may overflow, as
 * Go's time.Date normalizes) of year y in f's zone, as Go's dayStart finds it: local midnight, read
 * as time.Date reads it (the offset at the local time read as UTC and, when that is not 0, the
 * offset at the instant it gives); and where a DST change skips midnight, so that instant is still
 * the day before, the change, when the day's own offset (its noon's) begins.
 */
function midnight(f: Intl.DateTimeFormat, y: number, m: number, d: number): number {
  const unix = Date.UTC(y, m - 1, d) / 1000;
  let off = offset(f, unix);
  if (off !== 0) off = offset(f, unix - off);
  let t = unix - off;
  const day = new Date(unix * 1000);
  const local = localParts(f, t * 1000);
  if (local.y !== day.getUTCFullYear() || local.m !== day.getUTCMonth() + 1 || local.d !== day.getUTCDate()) {
    const before = offset(f, t);
    t += offset(f, unix + 12 * 3600 - before) - before;
  }
  return t * 1000;
}

/**
 * calendarBounds returns the calendar window of s holding the instant now (epoch ms): its start,
 * included, and its end, excluded (Go's FixedWindow.Bounds).
 */
export function calendarBounds(s: FixedWindowStrategy, now: number): [number, number] {
  const f = zone(s.timezone);
  const { y, m, d } = localParts(f, Math.floor(now / 1000) * 1000);
  if (s.calendar === "month") return [midnight(f, y, m, 1), midnight(f, y, m + 1, 1)];
  return [midnight(f, y, m, d), midnight(f, y, m, d + 1)];
}

/** SlidingWindow admits limit over the trailing windowMs from buckets sub-windows (Go's sluice.SlidingWindow). */
export function SlidingWindow(limit: number, windowMs: number, buckets: number): SlidingWindowStrategy {
  firstErr(atLeast("limit", limit, 1), atLeast("windowMs", windowMs, 1));
  if (!Number.isInteger(buckets) || buckets < 1 || buckets > windowMs || buckets > 4096) {
    const got = Number.isInteger(buckets) ? String(buckets) : show(buckets); // Go's int prints with %d
    throw new InvalidArgumentError("buckets", `must be from 1 to 4096 and at most windowMs, got ${got}`);
  }
  return Object.freeze({
    kind: "slidingWindow",
    limit,
    windowMs,
    buckets,
    ceiling: limit,
  });
}

/** SlidingWindowLog admits limit (whole) units over the trailing windowMs, exactly (Go's sluice.SlidingWindowLog). */
export function SlidingWindowLog(limit: number, windowMs: number): SlidingWindowLogStrategy {
  if (atLeast("limit", limit, 1) || limit !== Math.trunc(limit)) {
    throw new InvalidArgumentError("limit", `must be a whole number from 1 to 2^53 (a log counts whole units), got ${show(limit)}`);
  }
  firstErr(atLeast("windowMs", windowMs, 1));
  return Object.freeze({ kind: "slidingWindowLog", limit, windowMs, ceiling: limit });
}

/** The parameters of each kind, in their constructors' order: the vectors' names. */
const params: Readonly<Record<StrategyKind, readonly string[]>> = {
  gcra: ["limit", "periodMs", "burst"],
  tokenBucket: ["capacity", "refillPerSec"],
  fixedWindow: ["limit", "windowMs", "calendar", "timezone"],
  slidingWindow: ["limit", "windowMs", "buckets"],
  slidingWindowLog: ["limit", "windowMs"],
};

type Maker = (...args: (number | string)[]) => Strategy;
const makers: Readonly<Record<StrategyKind, Maker>> = {
  gcra: Gcra as Maker,
  tokenBucket: TokenBucket as Maker,
  fixedWindow: FixedWindow as Maker,
  slidingWindow: SlidingWindow as Maker,
  slidingWindowLog: SlidingWindowLog as Maker,
};

/**
 * fromSpec builds a strategy from its wire form, as the vectors write it: the kind and its
 * parameters by name ({limit: 3, periodMs: 1000, burst: 3}). An options object may hold "kind"
 * too (a vector's strategy object as it stands). An unknown kind is an InvalidArgumentError on
 * "kind", a parameter the kind does not take one on that parameter, a missing one fails its
 * range check as Go's zero value does. A fixed window takes windowMs, or calendar and timezone.
 */
export function fromSpec(kind: string, options: Readonly<Record<string, unknown>> = {}): Strategy {
  if (!Object.hasOwn(params, kind)) {
    throw new InvalidArgumentError(
      "kind",
      `must be gcra, tokenBucket, fixedWindow, slidingWindow or slidingWindowLog, got ${JSON.stringify(kind)}`,
    );
  }
  const k = kind as StrategyKind;
  for (const name of Object.keys(options)) {
    if (name === "kind" && options[name] === kind) continue;
    if (!params[k].includes(name)) throw new InvalidArgumentError(name, `is not a parameter of ${k}`);
  }
  const zero = (name: string) => (name === "calendar" || name === "timezone" ? "" : 0); // Go's zero values
  const args = params[k].map((name) => (options[name] === undefined ? zero(name) : options[name])) as (number | string)[];
  return makers[k](...args);
}

/**
 * headerWindowMs is the window RateLimit-Policy's w reports for s, ms, exactly as Go's
 * header.Window computes it: s.windowMs in whole ns rounded up, at most the longest Go Duration
 * (about 292 years; only a window strategy's windowMs parameter can reach it).
 */
export function headerWindowMs(s: Strategy): number {
  return headerWindow(s.windowMs);
}

/** maxCost is the most units one check may ask for: the ceiling as Go's int64 conversion truncates it. */
export function maxCost(s: Strategy): number {
  return Math.trunc(s.ceiling);
}
