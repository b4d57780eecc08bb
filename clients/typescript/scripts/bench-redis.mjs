#!/usr/bin/env node
// bench-redis.mjs: the latency of one check through RedisBackend, one caller, one check at a time,
// beside the Go Redis store doing the same on the same Redis (the bench op of
// clients/gointerop/peer, go run, which answers the latencies it measured): the same policy (GCRA,
// 1,000,000 a second, burst 1,000,000: every check admitted), 1000 keys checked in turn, on
// Redis's clock, N measured checks after a warm-up. Rounds alternate Node and Go.
//
//   npm run build && node scripts/bench-redis.mjs [--n 5000] [--warm 500] [--keys 1000] [--rounds 3]
//
// SLUICE_REDIS_URL (or --url) names the Redis; 127.0.0.1:6379 by default. Prints one JSON line
// per round and implementation, then the medians of the rounds' p50 and p99, in ms; both sides'
// latencies are summarized here alike.

import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

import { Redis } from "ioredis";

const here = dirname(fileURLToPath(import.meta.url));
const { RedisBackend } = await import(join(here, "..", "dist", "src", "redis.js"));
const { Gcra } = await import(join(here, "..", "dist", "src", "strategies.js"));

const { values: opts } = parseArgs({
  options: {
    url: { type: "string", default: process.env.SLUICE_REDIS_URL || "redis://127.0.0.1:6379" },
    n: { type: "string", default: "5000" },
    warm: { type: "string", default: "500" },
    keys: { type: "string", default: "1000" },
    rounds: { type: "string", default: "3" },
  },
});
const n = Number(opts.n);
const warm = Number(opts.warm);
const keys = Number(opts.keys);
const rounds = Number(opts.rounds);

/** quantile is the q-quantile of sorted by nearest rank. */
function quantile(sorted, q) {
  const i = Math.ceil(sorted.length * q - 1e-9) - 1;
  return sorted[Math.max(0, Math.min(i, sorted.length - 1))];
}

/** benchNode measures n checks through RedisBackend after warm unmeasured ones. */
async function benchNode() {
  const client = new Redis(opts.url);
  const prefix = `sluicebench-node-${randomBytes(6).toString("hex")}`;
  const backend = new RedisBackend(client, "bench", Gcra(1_000_000, 1000, 1_000_000), { prefix });
  const lat = [];
  for (let i = 0; i < warm + n; i++) {
    const key = `k${i % keys}`;
    const start = process.hrtime.bigint();
    await backend.check(key);
    const ms = Number(process.hrtime.bigint() - start) / 1e6;
    if (i >= warm) lat.push(ms);
  }
  for (let i = 0; i < keys; i++) await backend.reset(`k${i}`);
  client.disconnect();
  return summary("node RedisBackend", lat);
}

/** summary is the n, p50, p99 and mean of latencies in ms, of either side. */
function summary(impl, lat) {
  lat.sort((a, b) => a - b);
  const mean = lat.reduce((a, b) => a + b, 0) / lat.length;
  return { impl, n: lat.length, p50Ms: quantile(lat, 0.5), p99Ms: quantile(lat, 0.99), meanMs: mean };
}

/** benchGo runs the Go store's measurement (the peer's bench op) with the same parameters. */
async function benchGo() {
  const prefix = `sluicebench-go-${randomBytes(6).toString("hex")}`;
  const strategy = { kind: "gcra", limit: 1_000_000, periodMs: 1000, burst: 1_000_000 };
  const ks = Array.from({ length: keys }, (_, i) => `k${i}`);
  const request = { prefix, policy: "bench", strategy, op: "bench", keys: ks, cost: 1, n, warm };
  const args = ["run", "./clients/gointerop/peer", "-url", opts.url];
  const r = spawnSync("go", args, { cwd: join(here, "..", "..", ".."), input: JSON.stringify(request) + "\n", encoding: "utf8", maxBuffer: 64 << 20 });
  if (r.status !== 0) throw new Error(`go ${args.join(" ")}: ${r.error ?? r.stderr}`);
  const reply = JSON.parse(r.stdout.trim());
  if (reply.error) throw new Error(`go peer: ${reply.error}`);
  const client = new Redis(opts.url);
  const backend = new RedisBackend(client, "bench", Gcra(1_000_000, 1000, 1_000_000), { prefix });
  for (const k of ks) await backend.reset(k);
  client.disconnect();
  return summary("go store/redis", reply.latenciesNs.map((ns) => ns / 1e6));
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const results = { node: [], go: [] };
for (let r = 0; r < rounds; r++) {
  const node = await benchNode();
  console.log(JSON.stringify({ round: r + 1, ...node }));
  results.node.push(node);
  const go = await benchGo();
  console.log(JSON.stringify({ round: r + 1, ...go }));
  results.go.push(go);
}
for (const [impl, rs] of Object.entries(results)) {
  const p50 = median(rs.map((x) => x.p50Ms)).toFixed(3);
  const p99 = median(rs.map((x) => x.p99Ms)).toFixed(3);
  console.log(`${impl}: median over ${rounds} rounds of ${n} checks: p50 ${p50} ms, p99 ${p99} ms`);
}
