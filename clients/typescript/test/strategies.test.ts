// The strategies are validated exactly as the Go library validates them: a table of strategies,
// hand-picked boundaries and seeded random ones, goes through fromSpec here and through the Go
// library (clients/gointerop/validate, go run), and the two must agree on whether each is valid, the
// field and reason of each refusal, and each valid one's ceiling and header window. Without Go the
// comparison skips, except under CI=true. Tables of this client's own refusals follow.

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { describe, test } from "node:test";

import { InvalidArgumentError } from "../src/errors.js";
import {
  calendarBounds,
  FixedWindow,
  fromSpec,
  Gcra,
  goFloat,
  headerWindowMs,
  maxCost,
  SlidingWindow,
  SlidingWindowLog,
  TokenBucket,
  type Strategy,
} from "../src/strategies.js";
import { repoRoot } from "./serve.js";

type Spec = Record<string, number | string> & { kind: string };

/** Answer is what validating a spec gives: the Go program's reply, or this client's. */
interface Answer {
  ok: boolean;
  bounds?: number[];
  ceiling?: number;
  windowMs?: number;
  field?: string;
  reason?: string;
  error?: string;
}

/** tsAnswer validates spec with fromSpec, in the Go program's form. */
function tsAnswer(spec: Spec): Answer {
  const { kind, ...params } = spec;
  try {
    const { now, ...rest } = params;
    const s = fromSpec(kind, rest);
    const a: Answer = { ok: true, ceiling: s.ceiling };
    if (headerWindowMs(s) !== 0) a.windowMs = headerWindowMs(s); // Go's answer omits a zero
    if (now !== undefined && s.kind === "fixedWindow") {
      a.bounds = s.calendar === "" ? [Math.floor(Number(now) / s.windowMs) * s.windowMs, Math.floor(Number(now) / s.windowMs) * s.windowMs + s.windowMs] : calendarBounds(s, Number(now));
    }
    return a;
  } catch (err) {
    if (err instanceof InvalidArgumentError) return { ok: false, field: err.field, reason: err.reason };
    throw err;
  }
}

/** goAnswers validates every spec with the Go library, or returns undefined when there is no Go. */
function goAnswers(specs: readonly Spec[]): Answer[] | undefined {
  const r = spawnSync("go", ["run", "./clients/gointerop/validate"], {
    cwd: repoRoot(),
    input: specs.map((s) => JSON.stringify(s)).join("\n") + "\n",
    encoding: "utf8",
    maxBuffer: 64 << 20,
  });
  if (r.error && process.env.CI !== "true") return undefined;
  assert.equal(r.status, 0, `go run validate: ${r.error ?? r.stderr}`);
  return r.stdout.trim().split("\n").map((l) => JSON.parse(l) as Answer);
}

/** Boundary values of a parameter: below, at and above each bound the Go checks use. */
const edges = [-1, 0, 1e-9, 0.0005, 0.001, 0.5, 1, 1.5, 2, 3, 10, 4096, 4097, 1e6, 2 ** 53, 2 ** 53 + 2, 1e300];

/** seeded is a small deterministic generator (mulberry32), so the random table is the same each run. */
function seeded(seed: number): () => number {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** table is the comparison's strategies: every kind over the edges, one parameter at a time, and random ones. */
function table(): Spec[] {
  const base: Record<string, Record<string, number>> = {
    gcra: { limit: 10, periodMs: 1000, burst: 5 },
    tokenBucket: { capacity: 10, refillPerSec: 5 },
    fixedWindow: { limit: 10, windowMs: 1000 },
    slidingWindow: { limit: 10, windowMs: 1000, buckets: 10 },
    slidingWindowLog: { limit: 10, windowMs: 1000 },
  };
  const out: Spec[] = [];
  for (const [kind, params] of Object.entries(base)) {
    out.push({ kind, ...params });
    for (const name of Object.keys(params)) {
      for (const v of edges) {
        if (name === "buckets" && !(Number.isInteger(v) && Math.abs(v) < 2 ** 63)) continue; // Go's buckets is an int: a JSON decode error
        out.push({ kind, ...params, [name]: v });
      }
    }
  }
  const fw = { kind: "fixedWindow", limit: 5 };
  out.push(
    { ...fw, calendar: "day" },
    { ...fw, calendar: "month", timezone: "UTC" },
    { ...fw, calendar: "day", timezone: "Europe/Rome" },
    { ...fw, calendar: "day", timezone: "europe/rome" },
    { ...fw, calendar: "day", timezone: "Local" },
    { ...fw, calendar: "day", timezone: "local" },
    { ...fw, calendar: "day", timezone: "Mars/Olympus_Mons" },
    { ...fw, calendar: "day", timezone: "+01:00" },
    { ...fw, calendar: "day", timezone: "EST5EDT" },
    { ...fw, calendar: "week" },
    { ...fw, calendar: "day", windowMs: 1000 },
    { ...fw, windowMs: 1000, timezone: "Europe/Rome" },
    { ...fw, limit: 0, calendar: "day" },
  );
  const rand = seeded(20261202);
  const pick = (): number => {
    const r = rand();
    if (r < 0.3) return edges[Math.floor(rand() * edges.length)]!;
    if (r < 0.6) return Math.floor(rand() * 5000);
    return 10 ** (rand() * 20 - 6);
  };
  for (let i = 0; i < 600; i++) {
    const [kind, params] = Object.entries(base)[i % 5]!;
    const spec: Spec = { kind };
    for (const name of Object.keys(params)) spec[name] = name === "buckets" ? Math.floor(rand() * 5000) : pick();
    out.push(spec);
  }
  return out;
}

describe("strategies against the Go library", () => {
  test("fromSpec agrees with conformance.ParseStrategy on validity, field, reason, ceiling and window", (t) => {
    const specs = table();
    const want = goAnswers(specs);
    if (!want) return t.skip("no go toolchain");
    assert.equal(want.length, specs.length);
    let valid = 0;
    specs.forEach((spec, i) => {
      assert.deepStrictEqual(tsAnswer(spec), want[i], `spec ${JSON.stringify(spec)}`);
      if (want[i]!.ok) valid++;
    });
    assert.ok(valid > 50 && valid < specs.length - 50, `a mix of valid (${valid}) and invalid specs`);
  });
});

/** Zones whose days and months Go's Bounds and calendarBounds must agree on, DST quirks and all. */
const calendarZones = [
  "UTC",
  "Europe/Rome",
  "America/Santiago", // DST starts at midnight: some days begin at 01:00
  "America/New_York",
  "America/Havana", // DST at midnight too
  "Australia/Lord_Howe", // a half-hour DST
  "Asia/Kolkata",
  "Asia/Tehran",
  "Pacific/Apia", // skipped 30 December 2011
  "Africa/Casablanca",
];

describe("calendar windows against the Go library", () => {
  test("calendarBounds equals sluice.FixedWindow.Bounds over 10 zones, 2010 to 2026, days and months", (t) => {
    const specs: Spec[] = [];
    const rand = seeded(7);
    const from = Date.UTC(2010, 0, 1);
    const to = Date.UTC(2027, 0, 1);
    for (const timezone of calendarZones) {
      for (const calendar of ["day", "month"]) {
        for (let i = 0; i < 400; i++) {
          specs.push({ kind: "fixedWindow", limit: 5, calendar, timezone, now: Math.floor(from + rand() * (to - from)) });
        }
        // Every hour across the spring and autumn changes of 2023 and 2011, where midnights move.
        for (const start of [Date.UTC(2023, 2, 8), Date.UTC(2023, 8, 1), Date.UTC(2023, 9, 26), Date.UTC(2011, 11, 28)]) {
          for (let h = 0; h < 24 * 6; h++) specs.push({ kind: "fixedWindow", limit: 5, calendar, timezone, now: start + h * 3_600_000 + 1 });
        }
      }
    }
    const want = goAnswers(specs);
    if (!want) return t.skip("no go toolchain");
    specs.forEach((spec, i) => assert.deepStrictEqual(tsAnswer(spec), want[i], `spec ${JSON.stringify(spec)}`));
  });
});

describe("strategies", () => {
  const refusals: [string, () => Strategy, string][] = [
    ["gcra limit 0", () => Gcra(0, 1000, 1), "limit"],
    ["gcra periodMs 0.5", () => Gcra(1, 0.5, 1), "periodMs"],
    ["gcra burst 0", () => Gcra(1, 1000, 0), "burst"],
    ["gcra interval under 0.001 ms", () => Gcra(2e6, 1000, 1), "limit"],
    ["gcra burst draining past 2^53 ms", () => Gcra(1, 2 ** 53, 2), "limit"],
    ["gcra NaN limit", () => Gcra(NaN, 1000, 1), "limit"],
    ["gcra Infinity periodMs", () => Gcra(1, Infinity, 1), "periodMs"],
    ["gcra string burst", () => Gcra(1, 1000, "3" as unknown as number), "burst"],
    ["token bucket capacity 0.5", () => TokenBucket(0.5, 1), "capacity"],
    ["token bucket refill 0", () => TokenBucket(1, 0), "refillPerSec"],
    ["token bucket refill too slow", () => TokenBucket(1e6, 1e-12), "refillPerSec"],
    ["fixed window limit 0", () => FixedWindow(0, 1000), "limit"],
    ["fixed window windowMs 0", () => FixedWindow(1, 0), "windowMs"],
    ["fixed window calendar with windowMs", () => FixedWindow(1, 1000, "day"), "windowMs"],
    ["fixed window calendar week", () => FixedWindow(1, 0, "week" as "day"), "calendar"],
    ["fixed window timezone without calendar", () => FixedWindow(1, 1000, "", "Europe/Rome"), "timezone"],
    ["fixed window timezone Local", () => FixedWindow(1, 0, "day", "Local"), "timezone"],
    ["fixed window unknown timezone", () => FixedWindow(1, 0, "month", "Nowhere/Town"), "timezone"],
    ["sliding window buckets 0", () => SlidingWindow(1, 1000, 0), "buckets"],
    ["sliding window buckets over windowMs", () => SlidingWindow(1, 10, 11), "buckets"],
    ["sliding window buckets over 4096", () => SlidingWindow(1, 1e6, 4097), "buckets"],
    ["sliding window buckets 2.5", () => SlidingWindow(1, 1000, 2.5), "buckets"],
    ["sliding log limit 2.5", () => SlidingWindowLog(2.5, 1000), "limit"],
    ["sliding log windowMs 0", () => SlidingWindowLog(1, 0), "windowMs"],
    ["fromSpec unknown kind", () => fromSpec("leakyBucket", {}), "kind"],
    ["fromSpec parameter of another kind", () => fromSpec("gcra", { limit: 1, periodMs: 1, burst: 1, capacity: 3 }), "capacity"],
    ["fromSpec calendar of a token bucket", () => fromSpec("tokenBucket", { capacity: 1, refillPerSec: 1, calendar: "day" }), "calendar"],
    ["fromSpec missing parameter", () => fromSpec("tokenBucket", { capacity: 3 }), "refillPerSec"],
  ];
  for (const [name, make, field] of refusals) {
    test(`refuses ${name}, naming ${field}`, () => {
      assert.throws(make, (err: unknown) => err instanceof InvalidArgumentError && err.field === field);
    });
  }

  test("valid strategies: kind, parameters, ceiling, header window, frozen", () => {
    const g = Gcra(100, 60000, 20);
    assert.deepStrictEqual({ ...g }, { kind: "gcra", limit: 100, periodMs: 60000, burst: 20, ceiling: 20, windowMs: 12000 });
    assert.ok(Object.isFrozen(g));
    const tb = TokenBucket(10, 100 / 60);
    assert.equal(tb.ceiling, 10);
    assert.equal(tb.windowMs, 6000);
    assert.deepStrictEqual({ ...FixedWindow(5, 1000) }, { kind: "fixedWindow", limit: 5, windowMs: 1000, calendar: "", timezone: "", ceiling: 5 });
    assert.deepStrictEqual(fromSpec("fixedWindow", { limit: 5, calendar: "day", timezone: "Europe/Rome" }), FixedWindow(5, 0, "day", "Europe/Rome"));
    assert.deepStrictEqual({ ...SlidingWindow(5, 1000, 4) }, { kind: "slidingWindow", limit: 5, windowMs: 1000, buckets: 4, ceiling: 5 });
    assert.deepStrictEqual({ ...SlidingWindowLog(5, 1000) }, { kind: "slidingWindowLog", limit: 5, windowMs: 1000, ceiling: 5 });
    assert.equal(maxCost(TokenBucket(2.5, 1)), 2);
    assert.deepStrictEqual(fromSpec("gcra", { kind: "gcra", limit: 3, periodMs: 1000, burst: 3 }), Gcra(3, 1000, 3));
  });

  test("goFloat prints as Go's strconv.FormatFloat(x, 'g', -1, 64)", () => {
    const cases: [number, string][] = [
      [1e6, "1e+06"],
      [123456, "123456"],
      [1234567, "1.234567e+06"],
      [1e20, "1e+20"],
      [1e21, "1e+21"],
      [0.0001, "0.0001"],
      [0.00001, "1e-05"],
      [1.5e-7, "1.5e-07"],
      [100 / 60, "1.6666666666666667"],
      [2.5, "2.5"],
      [2 ** 53, "9.007199254740992e+15"],
      [1e300, "1e+300"],
      [-2.5e-10, "-2.5e-10"],
      [0, "0"],
    ];
    for (const [x, want] of cases) assert.equal(goFloat(x), want, String(x));
  });
});
