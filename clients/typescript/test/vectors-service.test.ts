// Replays every case of conformance/testdata/vectors/*.json through ServiceBackend (gRPC) and
// HttpBackend (HTTP JSON) against one sluice serve, whose config holds one policy per case. Each
// door keys its checks apart ("grpc:" and "http:" prefixes), so that both replay every step from
// empty state; every field of every decision must be exact.

import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import { HttpBackend, ServiceBackend, type Backend, type Decision } from "../src/index.js";
import { repoRoot, startServe, type Serve } from "./serve.js";

interface Step {
  key: string;
  now: number;
  cost: number;
  expect: { allowed: boolean; limit: number; remaining: number; resetAt: number; retryAfterMs: number };
}
interface Case {
  name: string;
  strategy: Record<string, unknown> & { kind: string };
  steps: Step[];
}
interface Vector extends Case {
  policy: string;
}

/** loadVectors reads every case of every vector file, naming each case's policy after its place. */
function loadVectors(): Vector[] {
  const dir = join(repoRoot(), "conformance", "testdata", "vectors");
  const files = readdirSync(dir).filter((f) => f.endsWith(".json")).sort();
  return files.flatMap((f, i) => {
    const doc = JSON.parse(readFileSync(join(dir, f), "utf8")) as { format: string; cases: Case[] };
    assert.equal(doc.format, "sluice-vectors/1", f);
    return doc.cases.map((c, j) => ({ ...c, policy: `vec-${i}-${j}` }));
  });
}

/** policyOf is a case's strategy as a config limit: its parameters under their own names. */
function policyOf(c: Case): Record<string, unknown> {
  const { kind, ...params } = c.strategy;
  return { strategy: kind, ...params };
}

/** expected is the whole decision a step must answer: the vector's numbers, and nothing else set. */
function expected(s: Step): Decision {
  return {
    ...s.expect,
    deniedBy: s.expect.allowed ? -1 : 0,
    parts: [],
    failOpen: false,
    override: false,
    plan: "",
  };
}

const vectors = loadVectors();
const total = vectors.reduce((n, c) => n + c.steps.length, 0);

describe("conformance vectors through sluice serve", () => {
  let serve: Serve;
  before(async () => {
    const policies = Object.fromEntries(vectors.map((c) => [c.policy, policyOf(c)]));
    serve = await startServe({ config: { failMode: "closed", policies } });
  });
  after(() => serve?.stop());

  test("the files hold 1454 steps", () => assert.equal(total, 1454));

  const replay = async (b: Backend, prefix: string): Promise<number> => {
    let n = 0;
    for (const c of vectors) {
      for (const [i, s] of c.steps.entries()) {
        const d = await b.check(c.policy, prefix + s.key, s.cost, { now: s.now });
        assert.deepEqual({ ...d, parts: [...d.parts] }, expected(s), `${c.name} step ${i} (${prefix}${s.key} at ${s.now})`);
        n++;
      }
    }
    return n;
  };

  test("ServiceBackend (gRPC) answers every step exactly", async () => {
    const b = new ServiceBackend(serve.grpcTarget, { timeoutMs: 5000 });
    try {
      assert.equal(await replay(b, "grpc:"), 1454);
    } finally {
      await b.close();
    }
  });

  test("HttpBackend (HTTP JSON) answers every step exactly", async () => {
    const b = new HttpBackend(serve.httpUrl, { timeoutMs: 5000 });
    try {
      assert.equal(await replay(b, "http:"), 1454);
    } finally {
      await b.close();
    }
  });
});

describe("both doors answer alike", () => {
  let serve: Serve;
  const T = 1_700_000_000_000;
  before(async () => {
    serve = await startServe({
      config: {
        policies: {
          duo: {
            limits: [
              { name: "requests", unit: "request", strategy: "slidingWindow", limit: 3, windowMs: 10000, buckets: 10 },
              { name: "tokens", strategy: "tokenBucket", capacity: 20, refillPerSec: 2 },
            ],
          },
          plans: {
            plans: { free: { strategy: "gcra", limit: 2, periodMs: 1000, burst: 2 }, pro: { strategy: "gcra", limit: 10, periodMs: 1000, burst: 10 } },
            plan: "free",
          },
          log: { strategy: "slidingWindowLog", limit: 2, windowMs: 5000 },
        },
      },
    });
  });
  after(() => serve?.stop());

  /** script runs one sequence of every call on b under keys prefixed by prefix, and returns the answers. */
  const script = async (b: Backend, p: string): Promise<unknown[]> => {
    const out: unknown[] = [];
    for (let i = 0; i < 5; i++) {
      const now = { now: T + i * 700 };
      out.push(await b.check("duo", `${p}k`, 6, now));
      out.push(await b.check("plans", `${p}k`, 1, now));
      out.push(await b.checkMany("log", [`${p}a`, `${p}b`], 1, now));
      out.push(await b.checkAll([{ policy: "duo", key: `${p}x`, cost: 5 }, { policy: "plans", key: `${p}x` }, { policy: "log", key: `${p}x` }], now));
      out.push(await b.peek("duo", `${p}k`, now));
      out.push(await b.forecast("duo", `${p}k`, 3, now));
      out.push(await b.peek("plans", `${p}x`, now));
    }
    await b.refund("duo", `${p}k`, 4, { now: T + 4000 });
    out.push(await b.peek("duo", `${p}k`, { now: T + 4000 }));
    await b.reset("duo", `${p}k`);
    out.push(await b.peek("duo", `${p}k`, { now: T + 4000 }));
    return JSON.parse(JSON.stringify(out)) as unknown[];
  };

  test("every call of one script, field for field", async () => {
    const svc = new ServiceBackend(serve.grpcTarget, { timeoutMs: 5000 });
    const http = new HttpBackend(serve.httpUrl, { timeoutMs: 5000 });
    try {
      const [a, b] = [await script(svc, "grpc:"), await script(http, "http:")];
      assert.equal(a.length, 37);
      assert.deepEqual(b, a);
      assert.ok(a.some((d) => (d as Decision).allowed === false), "the script reaches denials");
    } finally {
      await svc.close();
      await http.close();
    }
  });
});
