// Replays every case of every file of conformance/testdata/vectors/*.json through RedisBackend on
// a real Redis (SLUICE_REDIS_URL, or 127.0.0.1:6379), each case under a fresh key prefix: every
// field of every step must equal the vector's. Without a Redis the tests skip, except under
// CI=true, where a missing Redis fails them.

import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import { Redis } from "ioredis";

import { RedisBackend } from "../src/redis.js";
import { fromSpec } from "../src/strategies.js";
import { connect, dropPrefix, freshPrefix } from "./peers.js";
import { repoRoot } from "./serve.js";

interface Step {
  key: string;
  now: number;
  cost: number;
  expect: { allowed: boolean; limit: number; remaining: number; resetAt: number; retryAfterMs: number };
}
interface Case {
  name: string;
  strategy: { kind: string } & Record<string, unknown>;
  steps: Step[];
}

const vectorsDir = join(repoRoot(), "conformance", "testdata", "vectors");
const files = readdirSync(vectorsDir).filter((f) => f.endsWith(".json")).sort();

describe("conformance vectors through RedisBackend", () => {
  let client: Redis | undefined;
  before(async () => {
    client = await connect();
  });
  after(() => client?.disconnect());

  test("there are vector files", () => {
    assert.ok(files.length >= 2, `vector files in ${vectorsDir}: ${files.join(", ")}`);
  });

  for (const file of files) {
    const doc = JSON.parse(readFileSync(join(vectorsDir, file), "utf8")) as { format: string; cases: Case[] };
    test(`${file}: format`, () => assert.equal(doc.format, "sluice-vectors/1"));
    for (const c of doc.cases) {
      test(`${file}: ${c.name}`, async (t) => {
        if (!client) return t.skip("no Redis");
        const { kind, ...params } = c.strategy;
        const prefix = freshPrefix();
        const backend = new RedisBackend(client, "vector", fromSpec(kind, params), { prefix });
        try {
          for (const [i, step] of c.steps.entries()) {
            const d = await backend.check(step.key, step.cost, { now: step.now });
            const got = { allowed: d.allowed, limit: d.limit, remaining: d.remaining, resetAt: d.resetAt, retryAfterMs: d.retryAfterMs };
            assert.deepStrictEqual(got, step.expect, `step ${i} (key ${step.key}, now ${step.now}, cost ${step.cost})`);
            assert.equal(d.deniedBy, d.allowed ? -1 : 0, `step ${i}: deniedBy`);
            assert.equal(d.failOpen, false, `step ${i}: failOpen`);
          }
        } finally {
          await dropPrefix(client, prefix);
        }
      });
    }
  }
});
