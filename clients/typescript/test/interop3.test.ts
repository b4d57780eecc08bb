// Three languages on one limit: a Go process (clients/gointerop/peer, the Go store), a Python
// process (clients/python/tests/peer.py, the Python RedisBackend) and this Node process (the
// TypeScript RedisBackend) take turns checking one key on one Redis (SLUICE_REDIS_URL, or
// 127.0.0.1:6379), Go, then Python, then Node, on Redis's clock, well past the limit. For each of
// the five strategies, of limit 10 over a long window: exactly the limit is admitted in all, after
// the first denial every process denies, and remaining decreases across the processes' answers.
// Without Redis, Go or Python the tests skip, except under CI=true, where they fail.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import type { Redis } from "ioredis";

import { RedisBackend } from "../src/redis.js";
import { FixedWindow, Gcra, SlidingWindow, SlidingWindowLog, TokenBucket, type Strategy } from "../src/strategies.js";
import type { Decision } from "../src/types.js";
import { ci, connect, dropPrefix, freshPrefix, full, goPeer, type Peer, pythonPeer, spec } from "./peers.js";

const limit = 10;

/** One strategy of each kind, of limit 10, none giving anything back within a test. */
const strategies: [string, Strategy][] = [
  ["gcra", Gcra(limit, 3_600_000, limit)],
  ["tokenBucket", TokenBucket(limit, limit / 3600)],
  ["fixedWindow", FixedWindow(limit, 1e12)],
  ["slidingWindow", SlidingWindow(limit, 3_600_000, 60)],
  ["slidingWindowLog", SlidingWindowLog(limit, 3_600_000)],
];

/** start starts the Go and Python peers, or none (a skip, with why) when one cannot start outside CI. */
async function start(): Promise<{ go?: Peer; py?: Peer; why: string }> {
  const go = goPeer();
  const py = pythonPeer();
  const [g, p] = await Promise.allSettled([go.ready(), py.ready()]);
  if (g.status === "fulfilled" && p.status === "fulfilled") return { go, py, why: "" };
  go.close();
  py.close();
  const [peer, needs, err] = g.status === "rejected" ? [go, "go", g.reason] : [py, "Python 3 with redis-py", (p as PromiseRejectedResult).reason];
  const detail = err instanceof Error ? err.message : String(err);
  if (ci) throw new Error(`${peer.name} did not start (CI=true requires ${needs}): ${detail}`);
  return { why: `no ${needs} (${detail})` };
}

describe("Go, Python and Node on one limit", () => {
  let client: Redis | undefined;
  let go: Peer | undefined;
  let py: Peer | undefined;
  let skip = "";
  const prefixes: string[] = [];

  before(async () => {
    client = await connect();
    if (!client) {
      skip = "no Redis";
      return;
    }
    ({ go, py, why: skip } = await start());
  });
  after(async () => {
    go?.close();
    py?.close();
    if (client) for (const p of prefixes) await dropPrefix(client, p);
    client?.disconnect();
  });

  for (const [name, s] of strategies) {
    test(`${name}: checks taking turns Go, Python, Node on one key admit the limit in all`, async (t) => {
      if (skip !== "") return t.skip(skip);
      const prefix = freshPrefix();
      prefixes.push(prefix);
      const policy = "interop3:api"; // a name with ':' exercises the :n suffix in every language
      const node = new RedisBackend(client!, policy, s, { prefix });
      const peerCheck = (peer: Peer) => async (): Promise<Decision> => {
        const r = await peer.request({ prefix, policy, strategy: spec(s), op: "check", key: "k", cost: 1, now: 0 });
        assert.equal(r.error, undefined, `${peer.name}: ${r.error}`);
        return full(r.decision!);
      };
      const turns: [string, () => Promise<Decision>][] = [
        ["Go", peerCheck(go!)],
        ["Python", peerCheck(py!)],
        ["Node", () => node.check("k")],
      ];

      const got: [string, Decision][] = [];
      for (let i = 0; i < 3 * limit; i++) {
        const [who, check] = turns[i % turns.length]!;
        got.push([who, await check()]);
      }
      const admitted = got.filter(([, d]) => d.allowed).length;
      assert.equal(admitted, limit, "total admitted across the three processes");
      const firstDenial = got.findIndex(([, d]) => !d.allowed);
      assert.equal(firstDenial, limit, "the first denial is the check past the limit");
      const deniers = new Set<string>();
      got.forEach(([who, d], i) => {
        const at = `check ${i} by ${who}`;
        assert.equal(d.limit, limit, `${at}: limit`);
        if (i < firstDenial) {
          assert.ok(d.allowed, `${at}: admitted`);
          assert.equal(d.remaining, limit - 1 - i, `${at}: remaining`);
        } else {
          assert.ok(!d.allowed, `${at}: after the first denial every process denies`);
          assert.equal(d.remaining, 0, `${at}: remaining`);
          assert.ok(d.retryAfterMs > 0, `${at}: a denial says when to retry`);
          deniers.add(who);
        }
        if (i > 0) assert.ok(d.remaining <= got[i - 1]![1].remaining, `${at}: remaining never grows from one process to the next`);
      });
      assert.deepStrictEqual([...deniers].sort(), ["Go", "Node", "Python"], "each process denied");

      // A denial from one is a denial from all: one more check by each denies, and so does a peek.
      for (const [who, check] of turns) assert.equal((await check()).allowed, false, `${who} after the limit`);
      assert.equal((await node.peek("k")).allowed, false, "a peek after the limit");
    });
  }
});
