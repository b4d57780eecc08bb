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
