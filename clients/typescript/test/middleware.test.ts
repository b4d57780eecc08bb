// rateLimit in front of Node's http server on an ephemeral port, over both doors of a sluice
// serve, and its header fields against a stub backend whose decisions are known.

import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, test } from "node:test";

import {
  HttpBackend,
  ServiceBackend,
  failOpenDecision,
  quote,
  rateLimit,
  type Backend,
  type Checker,
  type Decision,
  type RateLimitMiddleware,
} from "../src/index.js";
import { freePort, startServe, type Serve } from "./serve.js";

/** listen serves mw in front of a handler answering 200 "ok", on an ephemeral port. */
async function listen(mw: RateLimitMiddleware): Promise<{ url: string; stop: () => Promise<void> }> {
  const srv: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    void mw(req, res, () => res.end("ok"));
  });
  await new Promise<void>((resolve) => srv.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(srv.address() as AddressInfo).port}`,
    stop: () => new Promise((resolve) => {
      srv.closeAllConnections();
      srv.close(() => resolve());
    }),
  };
}

/** with runs f against mw served on a port, and stops it after. */
async function withServer(mw: RateLimitMiddleware, f: (url: string) => Promise<void>): Promise<void> {
  const s = await listen(mw);
  try {
    await f(s.url);
  } finally {
    await s.stop();
  }
}

const doors: [string, (s: Serve) => Backend][] = [
  ["ServiceBackend", (s) => new ServiceBackend(s.grpcTarget, { timeoutMs: 5000 })],
  ["HttpBackend", (s) => new HttpBackend(s.httpUrl, { timeoutMs: 5000 })],
];

describe("rateLimit over sluice serve", () => {
  let serve: Serve;
  before(async () => {
    serve = await startServe({ config: { policies: { two: { strategy: "fixedWindow", limit: 2, windowMs: 60000 } } } });
  });
  after(() => serve?.stop());

  for (const [name, make] of doors) {
    test(`${name}: the third request under a limit of 2 is 429 with Retry-After and the RateLimit fields`, async () => {
      const b = make(serve);
      try {
        await withServer(rateLimit(b, "two", { key: "x-user", window: 60 }), async (url) => {
          const user = { "x-user": `${name}-u1` };
          for (const r of [1, 0]) {
            const res = await fetch(url, { headers: user });
            assert.equal(res.status, 200);
            assert.equal(await res.text(), "ok");
            assert.equal(res.headers.get("ratelimit-policy"), '"two";q=2;w=60');
            assert.match(res.headers.get("ratelimit") ?? "", new RegExp(`^"two";r=${r};t=([1-9]|[1-5][0-9]|60)$`));
            assert.equal(res.headers.get("retry-after"), null);
          }
          const res = await fetch(url, { headers: user });
          assert.equal(res.status, 429);
          const ra = Number(res.headers.get("retry-after"));
          assert.ok(Number.isInteger(ra) && ra >= 1 && ra <= 60, `Retry-After ${ra}`);
          assert.equal(res.headers.get("ratelimit-policy"), '"two";q=2;w=60');
          assert.match(res.headers.get("ratelimit") ?? "", /^"two";r=0;t=\d+$/);
          assert.equal(res.headers.get("content-type"), "application/problem+json");
          const body = (await res.json()) as { status: number; retryAfterMs: number };
          assert.equal(body.status, 429);
          assert.ok(body.retryAfterMs > 0);
          // Another key has a budget of its own.
          assert.equal((await fetch(url, { headers: { "x-user": `${name}-u2` } })).status, 200);
          // No key header: nothing to key the request by.
          assert.equal((await fetch(url)).status, 400);
        });
      } finally {
        await b.close();
      }
    });

    test(`${name}: keyed by the client address, or a function; no w without a window`, async () => {
      const b = make(serve);
      try {
        await b.reset("two", "127.0.0.1");
        await withServer(rateLimit(b, "two"), async (url) => {
          const res = await fetch(url);
          assert.equal(res.status, 200);
          assert.equal(res.headers.get("ratelimit-policy"), '"two";q=2');
          assert.equal((await b.peek("two", "127.0.0.1")).remaining, 1, "the address is the key");
        });
        await withServer(rateLimit(b, "two", { key: (req) => `${name}-path${req.url}` }), async (url) => {
          assert.equal((await fetch(`${url}/a`)).status, 200);
          assert.equal((await b.peek("two", `${name}-path/a`)).remaining, 1);
        });
        await b.reset("two", "127.0.0.1");
      } finally {
        await b.close();
      }
    });
  }
});

describe("rateLimit when the service cannot answer", () => {
  test("fail open: through, Sluice-Fail-Mode: open, no RateLimit fields", async () => {
    const b = new HttpBackend(`http://127.0.0.1:${await freePort()}`, { failMode: "open" });
    await withServer(rateLimit(b, "two"), async (url) => {
      const res = await fetch(url);
      assert.equal(res.status, 200);
      assert.equal(res.headers.get("sluice-fail-mode"), "open");
      assert.equal(res.headers.get("ratelimit"), null);
      assert.equal(res.headers.get("ratelimit-policy"), null);
    });
  });

  test("fail closed: 503, Retry-After: 1, Sluice-Fail-Mode: closed", async () => {
    const b = new ServiceBackend(`127.0.0.1:${await freePort()}`, { failMode: "closed" });
    try {
      await withServer(rateLimit(b, "two"), async (url) => {
        const res = await fetch(url);
        assert.equal(res.status, 503);
        assert.equal(res.headers.get("sluice-fail-mode"), "closed");
        assert.equal(res.headers.get("retry-after"), "1");
      });
    } finally {
      await b.close();
    }
  });
});

/** stub is a Checker answering d, with resetAt counted from the clock at the call. */
function stub(d: Partial<Decision> & { resetInMs: number }): Checker {
  return {
    check: async () => ({ ...failOpenDecision(), failOpen: false, ...d, resetAt: Date.now() + d.resetInMs }),
  };
}

describe("rateLimit's fields", () => {
  test("t and Retry-After are seconds rounded up; r below 0 is 0", async () => {
    const denied = stub({ allowed: false, limit: 5, remaining: -1, retryAfterMs: 1001, deniedBy: 0, resetInMs: 1500 });
    await withServer(rateLimit(denied, "api", { window: 2.4 }), async (url) => {
      const res = await fetch(url);
      assert.equal(res.status, 429);
      assert.equal(res.headers.get("ratelimit-policy"), '"api";q=5;w=2');
      assert.equal(res.headers.get("ratelimit"), '"api";r=0;t=2');
      assert.equal(res.headers.get("retry-after"), "2");
    });
    const tiny = stub({ allowed: false, limit: 1, remaining: 0, retryAfterMs: 1, deniedBy: 0, resetInMs: -5 });
    await withServer(rateLimit(tiny, "api", { window: 0.2 }), async (url) => {
      const res = await fetch(url);
      assert.equal(res.headers.get("retry-after"), "1", "at least 1");
      assert.equal(res.headers.get("ratelimit"), '"api";r=0;t=0');
      assert.equal(res.headers.get("ratelimit-policy"), '"api";q=1;w=1', "w at least 1");
    });
  });

  test("a policy name is a structured-field string", () => {
    assert.equal(quote('a"b\\c'), '"a\\"b\\\\c"');
    assert.equal(quote("é"), '"??"');
  });

  test("Express-style: next is called with nothing when allowed, never when denied", async () => {
    const calls: unknown[][] = [];
    const allowed = rateLimit(stub({ allowed: true, limit: 3, remaining: 2, resetInMs: 900 }), "api");
    const srv = createServer((req, res) => {
      void allowed(req, res, (...args: unknown[]) => {
        calls.push(args);
        res.end("ok");
      });
    });
    await new Promise<void>((resolve) => srv.listen(0, "127.0.0.1", resolve));
    try {
      const res = await fetch(`http://127.0.0.1:${(srv.address() as AddressInfo).port}`);
      assert.equal(res.status, 200);
      assert.equal(res.headers.get("ratelimit"), '"api";r=2;t=1');
      assert.deepEqual(calls, [[]]);
    } finally {
      srv.closeAllConnections();
      await new Promise((resolve) => srv.close(resolve));
    }
  });

  test("rateLimit needs a backend and a policy", () => {
    assert.throws(() => rateLimit(stub({ resetInMs: 0 }), ""), TypeError);
  });
});

describe("rateLimit over a RedisBackend", () => {
  test("asks it for its own policy: two allowed, the third 429", async (t) => {
    const { Redis } = await import("ioredis");
    const { FixedWindow, RedisBackend } = await import("../src/index.js");
    const url = process.env.SLUICE_REDIS_URL || "redis://127.0.0.1:6379";
    const client = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1, enableOfflineQueue: false, retryStrategy: () => null });
    client.on("error", () => {});
    try {
      await client.connect();
    } catch (err) {
      client.disconnect();
      if (process.env.CI === "true") throw new Error(`no Redis at ${url} (CI=true requires one): ${String(err)}`);
      return t.skip("no Redis");
    }
    const prefix = `sluice-mw-${process.pid}-${Date.now()}`;
    try {
      const backend = new RedisBackend(client, "two", FixedWindow(2, 3_600_000), { prefix });
      await withServer(rateLimit(backend, "two", { key: "x-api-key" }), async (url) => {
        const statuses: number[] = [];
        for (let i = 0; i < 3; i++) {
          const res = await fetch(url, { headers: { "x-api-key": "k" } });
          await res.arrayBuffer();
          statuses.push(res.status);
        }
        assert.deepEqual(statuses, [200, 200, 429]);
      });
    } finally {
      const keys = await client.keys(`${prefix}:*`);
      if (keys.length > 0) await client.del(...keys);
      client.disconnect();
    }
  });
});
