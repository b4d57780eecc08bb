// Replays every case of every file of conformance/testdata/vectors/*.json through RedisBackend on
// a real Redis (SLUICE_REDIS_URL, or 127.0.0.1:6379), each case under a fresh key prefix: every
// field of every step must equal the vector's. Without a Redis the tests skip, except under
// CI=true, where a missing Redis fails them.

import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import { Redis } from "ioredis";

import { RedisBackend } from "../src/redis.js";
import { fromSpec } from "../src/strategies.js";
import { repoRoot } from "./serve.js";

/** connect returns a client of the test Redis, or undefined (a skip) when none answers outside CI. */
async function connect(): Promise<Redis | undefined> {
  const url = process.env.SLUICE_REDIS_URL || "redis://127.0.0.1:6379";
  const client = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1, enableOfflineQueue: false, retryStrategy: () => null });
  client.on("error", () => {}); // connect() rejects with it
  try {
    await client.connect();
    await client.ping();
    return client;
  } catch (err) {
    client.disconnect();
    if (process.env.CI === "true") throw new Error(`no Redis at ${url} (CI=true requires one): ${String(err)}`);
    return undefined;
  }
}

/** dropPrefix deletes every key under prefix. */
async function dropPrefix(client: Redis, prefix: string): Promise<void> {
  let cursor = "0";
  do {
    const [next, keys] = await client.scan(cursor, "MATCH", `${prefix}:*`, "COUNT", 1000);
    if (keys.length > 0) await client.del(...keys);
    cursor = next;
  } while (cursor !== "0");
}

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
        const prefix = `sluicetest-${randomBytes(6).toString("hex")}`;
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
