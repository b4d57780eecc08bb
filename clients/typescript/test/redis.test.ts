// RedisBackend beside the Go Redis store on one Redis (SLUICE_REDIS_URL, or 127.0.0.1:6379): the
// Go side is clients/gointerop/peer (go run), a process of store/redis on the same prefix and
// policy. Go and Node alternate checks on one key and share one limit; a vector replayed half by
// each decides every step as the vector says; peek, forecast, refund, reset and checkMany answer as
// the Go store's; the scripts RedisBackend assembles are byte for byte those the Go store sends
// (their SHA-1s, seen with MONITOR). Then bad input, refused before anything is sent, and Redis
// failures. Without Redis or Go the tests skip, except under CI=true, where they fail.

import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test, type TestContext } from "node:test";

import { Redis } from "ioredis";

import { InvalidArgumentError, ServiceUnavailableError } from "../src/errors.js";
import { RedisBackend, script, type RedisClient } from "../src/redis.js";
import {
  FixedWindow,
  fromSpec,
  Gcra,
  SlidingWindow,
  SlidingWindowLog,
  TokenBucket,
  type Strategy,
} from "../src/strategies.js";
import type { Decision } from "../src/types.js";
import { ci, connect, dropPrefix, freshPrefix, full, goPeer, type Peer, type PeerReply, spec } from "./peers.js";
import { repoRoot } from "./serve.js";

/** goOf returns what the Go store answers for backend's policy under its prefix. */
function goOf(peer: Peer, b: RedisBackend) {
  const base = { prefix: b.prefix, policy: b.policyName, strategy: spec(b.strategy) };
  const call = async (req: Record<string, unknown>): Promise<PeerReply> => {
    const r = await peer.request({ ...base, ...req });
    assert.equal(r.error, undefined, `go peer: ${r.error}`);
    return r;
  };
  return {
    check: async (key: string, cost = 1, now = 0) => full((await call({ op: "check", key, cost, now })).decision!),
    peek: async (key: string, now = 0) => full((await call({ op: "peek", key, now })).decision!),
    forecast: async (key: string, cost = 1, now = 0) => (await call({ op: "forecast", key, cost, now })).forecast!,
    refund: async (key: string, cost = 1, now = 0) => void (await call({ op: "refund", key, cost, now })),
    checkMany: async (keys: string[], cost = 1, now = 0) => (await call({ op: "checkMany", keys, cost, now })).decisions!.map(full),
    checkAll: async (keys: string[], cost = 1, now = 0) => void (await call({ op: "checkAll", keys, cost, now })),
  };
}

/** plain is a decision as a plain object, to compare with deepStrictEqual. */
function plain(d: Decision): Decision {
  return { ...d, parts: [...d.parts] };
}

/** The strategies of the interop tests: limit 10, slow enough that nothing refills during a test. */
const shared: [string, Strategy][] = [
  ["gcra", Gcra(10, 3_600_000, 10)],
  ["tokenBucket", TokenBucket(10, 10 / 3600)],
  ["fixedWindow", FixedWindow(10, 1e12)],
  ["fixedWindow calendar month", FixedWindow(10, 0, "month", "Europe/Rome")],
  ["slidingWindow", SlidingWindow(10, 3_600_000, 60)],
  ["slidingWindowLog", SlidingWindowLog(10, 3_600_000)],
];

describe("RedisBackend with the Go store", () => {
  let client: Redis | undefined;
  let peer: Peer | undefined;
  const prefixes: string[] = [];

  before(async () => {
    client = await connect();
    if (!client) return;
    const p = goPeer();
    try {
      await p.ready();
      peer = p;
    } catch (err) {
      p.close();
      if (ci) throw new Error(`the Go peer did not start (CI=true requires go): ${String(err)}`);
    }
  });
  after(async () => {
    peer?.close();
    if (client) for (const p of prefixes) await dropPrefix(client, p);
    client?.disconnect();
  });

  /** setup is a backend under a fresh prefix and the Go store beside it, or a skip. */
  function setup(t: TestContext, policy: string, s: Strategy) {
    if (!client || !peer) {
      t.skip(client ? "no go toolchain" : "no Redis");
      return undefined;
    }
    const prefix = freshPrefix();
    prefixes.push(prefix);
    const node = new RedisBackend(client, policy, s, { prefix });
    return { node, go: goOf(peer, node), client };
  }

  for (const [name, s] of shared) {
    for (const policy of ["api", "login:ip"]) {
      test(`${name}, policy ${policy}: Go and Node alternating on one key admit the limit, on Redis's clock`, async (t) => {
        const env = setup(t, policy, s);
        if (!env) return;
        const { node, go } = env;
        const got: Decision[] = [];
        for (let i = 0; i < 26; i++) got.push(i % 2 === 0 ? await node.check("k") : await go.check("k"));
        const admitted = got.filter((d) => d.allowed).length;
        assert.equal(admitted, 10, "total admitted");
        got.forEach((d, i) => {
          assert.equal(d.allowed, i < 10, `check ${i} by ${i % 2 === 0 ? "Node" : "Go"}`);
          assert.equal(d.limit, 10);
          if (d.allowed) assert.equal(d.remaining, 9 - i, `remaining after check ${i}`);
          else assert.ok(d.retryAfterMs > 0, `check ${i}: a denial says when to retry`);
        });
        // A denial from one is a denial from the other: both peeks agree, and so do their next checks.
        const [np, gp] = [await node.peek("k"), await go.peek("k")];
        assert.equal(np.allowed, false);
        assert.deepStrictEqual({ ...np, resetAt: 0, retryAfterMs: 0 }, { ...gp, resetAt: 0, retryAfterMs: 0, parts: np.parts });
        assert.equal((await go.check("k")).allowed, false);
        assert.equal((await node.check("k")).allowed, false);
      });
    }
  }

  test("every vector replayed half by Go and half by Node decides every step as the vector says", async (t) => {
    if (!client || !peer) return t.skip(client ? "no go toolchain" : "no Redis");
    const dir = join(repoRoot(), "conformance", "testdata", "vectors");
    let steps = 0;
    for (const file of readdirSync(dir).filter((f) => f.endsWith(".json")).sort()) {
      const doc = JSON.parse(readFileSync(join(dir, file), "utf8")) as {
        cases: { name: string; strategy: { kind: string } & Record<string, unknown>; steps: { key: string; now: number; cost: number; expect: Record<string, unknown> }[] }[];
      };
      for (const c of doc.cases) {
        const { kind, ...params } = c.strategy;
        const prefix = freshPrefix();
        prefixes.push(prefix);
        const node = new RedisBackend(client, "vector", fromSpec(kind, params), { prefix });
        const go = goOf(peer, node);
        for (const [i, st] of c.steps.entries()) {
          const d = i % 2 === 0 ? await node.check(st.key, st.cost, { now: st.now }) : await go.check(st.key, st.cost, st.now);
          const got = { allowed: d.allowed, limit: d.limit, remaining: d.remaining, resetAt: d.resetAt, retryAfterMs: d.retryAfterMs };
          assert.deepStrictEqual(got, st.expect, `${file} ${c.name} step ${i} by ${i % 2 === 0 ? "Node" : "Go"}`);
          steps++;
        }
        await dropPrefix(client, prefix);
      }
    }
    assert.ok(steps >= 1400, `${steps} steps`);
  });

  for (const [name, s] of shared) {
    test(`${name}: peek, forecast, refund, reset and checkMany answer as the Go store's`, async (t) => {
      const env = setup(t, "ops:x", s);
      if (!env) return;
      const { node, go, client } = env;
      const now = 1_800_000_000_000;
      for (const [i, cost] of [3, 2, 1].entries()) await node.check("k", cost, { now: now + i });
      const before = plain(await node.peek("k", { now: now + 10 }));
      assert.deepStrictEqual(before, await go.peek("k", now + 10));
      assert.deepStrictEqual({ ...(await node.forecast("k", 2, { now: now + 10 })) }, await go.forecast("k", 2, now + 10));
      await node.refund("k", 2, { now: now + 11 });
      const refunded = plain(await node.peek("k", { now: now + 12 }));
      assert.deepStrictEqual(refunded, await go.peek("k", now + 12));
      assert.equal(refunded.remaining, before.remaining + 2, "Node's refund, seen by Go");
      await go.refund("k", 1, now + 13);
      assert.equal((await node.peek("k", { now: now + 14 })).remaining, before.remaining + 3, "Go's refund, seen by Node");
      const many = await node.checkMany(["a", "b", "a"], 4, { now: now + 20 });
      const prefix2 = freshPrefix();
      prefixes.push(prefix2);
      const node2 = new RedisBackend(client, "ops:x", s, { prefix: prefix2 });
      assert.deepStrictEqual(many.map(plain), await goOf(peer!, node2).checkMany(["a", "b", "a"], 4, now + 20));
      await node.reset("k");
      assert.equal(await client.exists(node.redisKey("k")), 0);
      assert.equal((await go.peek("k", now + 30)).remaining, 10, "a reset key is full for Go too");
    });
  }

  test("calendar days: Go and Node alternating across Rome's midnights (one a DST change) decide as each alone", async (t) => {
    const s = FixedWindow(3, 0, "day", "Europe/Rome");
    const envs = [setup(t, "calendar:day", s), setup(t, "calendar:day", s), setup(t, "calendar:day", s)];
    if (!envs[0] || !envs[1] || !envs[2]) return;
    // Rome's midnight of 26 March 2023 (DST starts at 02:00 that day) is 2023-03-25T23:00Z.
    const midnights = [Date.UTC(2023, 2, 25, 23), Date.UTC(2023, 2, 26, 22)];
    const instants = midnights.flatMap((m) => [-3000, -2000, -1000, -500, -1, 0, 1, 500, 1000, 2000].map((d) => m + d));
    const mixed: Decision[] = [];
    const nodeOnly: Decision[] = [];
    const goOnly: Decision[] = [];
    for (const [i, now] of instants.entries()) {
      const cost = 1 + (i % 2);
      mixed.push(i % 2 === 0 ? await envs[0].node.check("k", cost, { now }) : await envs[0].go.check("k", cost, now));
      nodeOnly.push(plain(await envs[1].node.check("k", cost, { now })));
      goOnly.push(await envs[2].go.check("k", cost, now));
    }
    assert.deepStrictEqual(mixed.map(plain), goOnly);
    assert.deepStrictEqual(nodeOnly, goOnly);
    for (const [j, m] of midnights.entries()) {
      const first = instants.indexOf(m);
      assert.equal(goOnly[first]!.allowed, true, `the day starting at midnight ${j} starts full`);
      assert.equal(goOnly[first]!.resetAt, j === 0 ? Date.UTC(2023, 2, 26, 22) : Date.UTC(2023, 2, 27, 22), `a 23-hour day, then a 24-hour one`);
    }
  });

  test("the scripts are byte for byte the Go store's (their SHA-1s, seen with MONITOR)", async (t) => {
    if (!client || !peer) return t.skip(client ? "no go toolchain" : "no Redis");
    const monitor = await client.monitor();
    const seen = new Map<string, Set<string>>(); // prefix → SHA-1s its keys were sent with
    monitor.on("monitor", (_time: string, args: string[]) => {
      if (String(args[0]).toLowerCase() !== "evalsha") return;
      const key = String(args[3] ?? "");
      const prefix = key.slice(0, key.indexOf(":"));
      if (!seen.has(prefix)) seen.set(prefix, new Set());
      seen.get(prefix)!.add(String(args[1]));
    });
    try {
      for (const [name, s] of shared) {
        const env = setup(t, "scripts", s)!;
        const go = env.go;
        await go.peek("a");
        await go.forecast("a");
        await go.refund("a");
        await go.checkAll(["a", "b"]); // two steps: the general check script
        await env.client.echo("flush"); // MONITOR shows commands in order: wait for ours
        const want = ["check", "peek", "forecast", "refund"].map((op) => script(op as "check", s.kind).sha).sort();
        for (let i = 0; i < 50 && (seen.get(env.node.prefix)?.size ?? 0) < 4; i++) await new Promise((r) => setTimeout(r, 10));
        assert.deepStrictEqual([...(seen.get(env.node.prefix) ?? [])].sort(), want, `${name}: the Go store's EVALSHAs`);
      }
    } finally {
      monitor.disconnect();
    }
  });

  test("keys are the Go store's: prefix:{policy:key}, :n<length> for a name holding ':', with a TTL", async (t) => {
    const env = setup(t, "login:ip", Gcra(5, 1000, 5));
    if (!env) return;
    const { node, client } = env;
    await node.check("1.2.3.4");
    const key = `${node.prefix}:{login:ip:1.2.3.4}:n8`;
    assert.equal(node.redisKey("1.2.3.4"), key);
    assert.equal(await client.exists(key), 1);
    assert.ok((await client.pttl(key)) > 0, "the state expires");
    const api = new RedisBackend(client, "api", Gcra(5, 1000, 5), { prefix: node.prefix });
    assert.equal(api.redisKey("u1"), `${node.prefix}:{api:u1}`);
    assert.equal(new RedisBackend(client, "api", Gcra(5, 1000, 5)).redisKey("u1"), "sluice:{api:u1}");
  });

  test("NOSCRIPT: the script is run with EVAL, which loads it", async (t) => {
    const env = setup(t, "noscript", FixedWindow(3, 60_000));
    if (!env) return;
    const calls: string[] = [];
    let refused = false;
    const flaky: RedisClient = {
      call: async (command, args) => {
        calls.push(command);
        if (command === "EVALSHA" && !refused) {
          refused = true;
          throw new Error("NOSCRIPT No matching script. Please use EVAL.");
        }
        return env.client.call(command, args);
      },
    };
    const b = new RedisBackend(flaky, "noscript", FixedWindow(3, 60_000), { prefix: env.node.prefix });
    const now = 1_800_000_000_000;
    assert.equal((await b.check("k", 2, { now })).remaining, 1);
    assert.equal((await b.check("k", 1, { now })).remaining, 0);
    assert.deepStrictEqual(calls, ["SCRIPT", "EVALSHA", "EVAL", "EVALSHA"]);
  });
});

describe("RedisBackend with a timeout", () => {
  let client: Redis | undefined;
  const prefix = freshPrefix();
  before(async () => {
    client = await connect();
  });
  after(async () => {
    if (client) await dropPrefix(client, prefix);
    client?.disconnect();
  });

  /** slow is client with every EVALSHA and EVAL held back ms, each script's reply or error kept in replies. */
  function slow(c: Redis, ms: number, replies: unknown[]): RedisClient {
    return {
      call: async (command, args) => {
        if (command !== "EVALSHA" && command !== "EVAL") return c.call(command, args);
        await new Promise((r) => setTimeout(r, ms));
        try {
          const v = await c.call(command, args);
          replies.push(v);
          return v;
        } catch (err) {
          replies.push(String(err));
          throw err;
        }
      },
    };
  }

  test("a check that reaches Redis past its instant to give up counts nothing (LATE), and its caller hears so in time", async (t) => {
    if (!client) return t.skip("no Redis");
    const replies: unknown[] = [];
    const s = FixedWindow(5, 60_000);
    const late = new RedisBackend(slow(client, 400, replies), "late", s, { prefix, timeoutMs: 40 });
    const start = Date.now();
    await assert.rejects(() => late.check("k", 2), ServiceUnavailableError);
    assert.ok(Date.now() - start < 300, `answered after ${Date.now() - start} ms, before the script reached Redis`);
    const open = new RedisBackend(slow(client, 400, replies), "late", s, { prefix, timeoutMs: 40, failMode: "open" });
    assert.equal((await open.check("k", 2)).failOpen, true);
    for (let i = 0; i < 100 && replies.length < 2; i++) await new Promise((r) => setTimeout(r, 20));
    assert.equal(replies.length, 2);
    for (const r of replies) assert.match(String(r), /LATE/);
    const prompt = new RedisBackend(client, "late", s, { prefix, timeoutMs: 1000 });
    assert.equal((await prompt.peek("k")).remaining, 5, "nothing was counted");
    assert.equal((await prompt.check("k", 2)).remaining, 3, "a check in time counts");
  });

  test("timeoutMs must be above 0", () => {
    assert.throws(() => new RedisBackend({ call: async () => [] }, "api", Gcra(1, 1000, 1), { timeoutMs: 0 }), (e: unknown) => e instanceof InvalidArgumentError && e.field === "timeoutMs");
  });
});

describe("RedisBackend refuses bad input before sending anything", () => {
  const never: RedisClient = {
    call: async (command) => {
      throw new Error(`sent ${command}`);
    },
  };
  const b = new RedisBackend(never, "api", Gcra(10, 1000, 5));
  const cases: [string, () => Promise<unknown>, string][] = [
    ["cost 0", () => b.check("k", 0), "cost"],
    ["cost -1", () => b.check("k", -1), "cost"],
    ["cost 1.5", () => b.check("k", 1.5), "cost"],
    ["cost NaN", () => b.check("k", NaN), "cost"],
    ["cost a string", () => b.check("k", "1" as unknown as number), "cost"],
    ["cost above the ceiling (burst 5)", () => b.check("k", 6), "cost"],
    ["an empty key", () => b.check(""), "key"],
    ["a key of 1025 bytes", () => b.check("k".repeat(1025)), "key"],
    ["a key of 1026 bytes of UTF-8 in 513 characters", () => b.check("é".repeat(513)), "key"],
    ["now 0", () => b.check("k", 1, { now: 0 }), "now"],
    ["now 1.5", () => b.check("k", 1, { now: 1.5 }), "now"],
    ["checkMany with one bad key", () => b.checkMany(["a", ""], 1), "key"],
    ["checkMany cost above the ceiling", () => b.checkMany(["a"], 6), "cost"],
    ["peek an empty key", () => b.peek(""), "key"],
    ["forecast cost above the ceiling", () => b.forecast("k", 6), "cost"],
    ["refund cost 0", () => b.refund("k", 0), "cost"],
    ["reset an empty key", () => b.reset(""), "key"],
    ["policy name empty", async () => new RedisBackend(never, "", Gcra(1, 1000, 1)), "policy"],
    ["policy name with a space", async () => new RedisBackend(never, "my api", Gcra(1, 1000, 1)), "policy"],
    ["policy name of 129 bytes", async () => new RedisBackend(never, "p".repeat(129), Gcra(1, 1000, 1)), "policy"],
    ["failMode maybe", async () => new RedisBackend(never, "api", Gcra(1, 1000, 1), { failMode: "maybe" as "open" }), "failMode"],
    ["a strategy of unknown kind", async () => new RedisBackend(never, "api", { kind: "leaky" } as unknown as Strategy), "strategy"],
    ["a strategy object not made valid", async () => new RedisBackend(never, "api", { ...Gcra(1, 1000, 1), burst: 0 }), "burst"],
  ];
  for (const [name, run, field] of cases) {
    test(`${name}: InvalidArgumentError on ${field}`, async () => {
      await assert.rejects(run, (err: unknown) => err instanceof InvalidArgumentError && err.field === field);
    });
  }
  test("a key of 1024 bytes of UTF-8 and a refund above the ceiling are accepted (Go's rules)", async () => {
    await assert.rejects(() => b.check("é".repeat(512)), /sent SCRIPT/);
    await assert.rejects(() => b.refund("k", 6), /sent SCRIPT/);
  });
});

describe("RedisBackend when Redis fails", () => {
  /** dead is an ioredis client of a port nothing listens on, which fails every command at once. */
  function dead(): Redis {
    const client = new Redis({ host: "127.0.0.1", port: 1, lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => null });
    client.on("error", () => {}); // each command rejects with it
    return client;
  }

  test("fail mode closed: every operation throws ServiceUnavailableError", async () => {
    const client = dead();
    const b = new RedisBackend(client, "api", TokenBucket(5, 1));
    for (const op of [() => b.check("k"), () => b.checkMany(["a", "b"]), () => b.peek("k"), () => b.forecast("k"), () => b.refund("k"), () => b.reset("k")]) {
      await assert.rejects(op, ServiceUnavailableError);
    }
    client.disconnect();
  });

  test("fail mode open: checks are allowed with failOpen set and no numbers; the others still throw", async () => {
    const client = dead();
    const b = new RedisBackend(client, "api", TokenBucket(5, 1), { failMode: "open" });
    const d = await b.check("k");
    assert.deepStrictEqual(plain(d), { allowed: true, limit: 0, remaining: 0, resetAt: 0, retryAfterMs: 0, deniedBy: -1, parts: [], failOpen: true, override: false, plan: "" });
    const many = await b.checkMany(["a", "b", "c"]);
    assert.equal(many.length, 3);
    assert.ok(many.every((m) => m.allowed && m.failOpen));
    await assert.rejects(() => b.peek("k"), ServiceUnavailableError);
    await assert.rejects(() => b.forecast("k"), ServiceUnavailableError);
    client.disconnect();
  });

  test("a reply that is not the script's is ServiceUnavailableError, not a decision", async () => {
    const sha1 = (text: string): string => createHash("sha1").update(text).digest("hex");
    const odd: RedisClient = { call: async (command, args) => (command === "SCRIPT" ? sha1(String(args[1])) : [1, 2]) };
    const b = new RedisBackend(odd, "api", Gcra(5, 1000, 5));
    await assert.rejects(() => b.check("k"), ServiceUnavailableError);
  });
});
