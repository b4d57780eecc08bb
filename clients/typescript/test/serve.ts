// A `sluice serve` of this repository for the tests: built from the Go code (go build), started on
// free loopback ports with --allow-client-time, and stopped after. The Redis door's tests import
// it as well.

import { spawn, execFileSync, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

/** repoRoot is the sluice module's root: the first directory up from here whose go.mod is sluice's. */
export function repoRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const mod = join(dir, "go.mod");
    if (existsSync(mod) && readFileSync(mod, "utf8").startsWith("module github.com/sluicehq/sluice\n")) return dir;
    const up = dirname(dir);
    if (up === dir) throw new Error("serve: the sluice repository is not above this package");
    dir = up;
  }
}

let built: string | undefined;

/** buildSluice builds cmd/sluice into a temporary directory, once per process, and returns its path. */
export function buildSluice(): string {
  if (built === undefined) {
    const out = join(mkdtempSync(join(tmpdir(), "sluice-ts-bin-")), "sluice");
    execFileSync("go", ["build", "-o", out, "./cmd/sluice"], { cwd: repoRoot(), stdio: "inherit" });
    built = out;
  }
  return built;
}

/** freePort is a loopback TCP port nothing listens on now. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const addr = srv.address();
      const port = typeof addr === "object" && addr !== null ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

export interface ServeOptions {
  /** The config, written as JSON (a YAML document); policies at least. */
  readonly config: Record<string, unknown>;
  /** Lines of a bearer token file (--auth-token-file); none by default. */
  readonly tokens?: readonly string[];
  /** Wait for /healthz rather than /readyz: for a store that is meant not to answer. */
  readonly healthOnly?: boolean;
  /** More arguments for sluice serve. */
  readonly args?: readonly string[];
}

/** A running sluice serve. */
export interface Serve {
  /** The HTTP JSON API's base URL, such as http://127.0.0.1:41234. */
  readonly httpUrl: string;
  /** The gRPC address, such as 127.0.0.1:41235. */
  readonly grpcTarget: string;
  /** What the process wrote to stderr so far. */
  readonly log: () => string;
  /** Stops the process (SIGTERM, then SIGKILL) and removes its directory. */
  readonly stop: () => Promise<void>;
}

/** startServe starts sluice serve with opts' config on free ports and waits until it is ready. */
export async function startServe(opts: ServeOptions): Promise<Serve> {
  const bin = buildSluice();
  const dir = mkdtempSync(join(tmpdir(), "sluice-ts-serve-"));
  const cfg = join(dir, "sluice.yaml");
  writeFileSync(cfg, JSON.stringify(opts.config, null, 1));
  const [httpPort, grpcPort] = [await freePort(), await freePort()];
  const args = ["serve", "--config", cfg, "--allow-client-time", "--http", `127.0.0.1:${httpPort}`, "--grpc", `127.0.0.1:${grpcPort}`];
  if (opts.tokens !== undefined) {
    const file = join(dir, "tokens");
    writeFileSync(file, opts.tokens.join("\n") + "\n");
    args.push("--auth-token-file", file);
  }
  args.push(...(opts.args ?? []));
  const proc = spawn(bin, args, { stdio: ["ignore", "ignore", "pipe"] });
  let log = "";
  proc.stderr?.on("data", (b: Buffer) => (log += b.toString()));
  const httpUrl = `http://127.0.0.1:${httpPort}`;
  const stop = () => stopProc(proc).finally(() => rmSync(dir, { recursive: true, force: true }));
  try {
    await waitReady(proc, `${httpUrl}${opts.healthOnly ? "/healthz" : "/readyz"}`, () => log);
  } catch (err) {
    await stop();
    throw err;
  }
  return { httpUrl, grpcTarget: `127.0.0.1:${grpcPort}`, log: () => log, stop };
}

/** waitReady polls url until it answers 200, for 30 s at most, failing early if proc exits. */
async function waitReady(proc: ChildProcess, url: string, log: () => string): Promise<void> {
  const until = Date.now() + 30_000;
  while (Date.now() < until) {
    if (proc.exitCode !== null) throw new Error(`sluice serve exited ${proc.exitCode}:\n${log()}`);
    try {
      const r = await fetch(url, { signal: AbortSignal.timeout(1000) });
      if (r.status === 200) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`sluice serve not ready at ${url} after 30 s:\n${log()}`);
}

/** stopProc ends proc with SIGTERM, or SIGKILL after 5 s, and resolves when it has exited. */
function stopProc(proc: ChildProcess): Promise<void> {
  if (proc.exitCode !== null || proc.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const kill = setTimeout(() => proc.kill("SIGKILL"), 5000);
    proc.once("exit", () => {
      clearTimeout(kill);
      resolve();
    });
    proc.kill("SIGTERM");
  });
}

// ---------------------------------------------------------------------------------------------
// The doors' shared suite: service.test.ts runs it over gRPC and http.test.ts over HTTP, so that
// both doors are held to one table.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import {
  InvalidArgumentError,
  OperationNotSupportedError,
  PolicyNotFoundError,
  ServiceUnavailableError,
  UnauthenticatedError,
  type Backend,
  type Decision,
  type DoorOptions,
} from "../src/index.js";

/** A door under test: how to make its backend for a serve, or for a bare address. */
export interface Door {
  readonly name: string;
  /** make is the backend of the serve's address for this door. */
  readonly make: (serve: Serve, opts?: DoorOptions) => Backend;
  /** at is the backend of a bare port on 127.0.0.1. */
  readonly at: (port: number, opts?: DoorOptions) => Backend;
  /** unimplemented starts a server on this door's protocol that answers every call as not implemented. */
  readonly unimplemented: () => Promise<{ port: number; stop: () => Promise<void> }>;
}

/** T is the instant the round trips are pinned to. */
const T = 1_700_000_000_000;

/** The policies of the shared suite. */
const suitePolicies = {
  tb: { strategy: "tokenBucket", capacity: 3, refillPerSec: 1 },
  duo: {
    limits: [
      { name: "requests", unit: "request", strategy: "fixedWindow", limit: 5, windowMs: 60000 },
      { name: "tokens", strategy: "tokenBucket", capacity: 10, refillPerSec: 1 },
    ],
  },
};

/** plain drops the freezing of a decision, for deepEqual. */
function plain(d: Decision): unknown {
  return { ...d, parts: d.parts.map(plain) };
}

/** rejects asserts that p fails with an error of type, and, for InvalidArgumentError, naming field. */
async function rejects(p: Promise<unknown>, type: new (...a: never[]) => Error, field?: string): Promise<void> {
  await assert.rejects(p, (err: unknown) => {
    assert.ok(err instanceof type, `want ${type.name}, got ${String(err)}`);
    if (field !== undefined) assert.equal((err as InvalidArgumentError).field, field, String(err));
    return true;
  });
}

/** doorSuite holds a door to the round trips, the errors table and the fail modes. */
export function doorSuite(door: Door): void {
  describe(`${door.name}: round trips`, () => {
    let serve: Serve;
    let b: Backend;
    before(async () => {
      serve = await startServe({ config: { failMode: "closed", policies: suitePolicies } });
      b = door.make(serve, { timeoutMs: 5000 });
    });
    after(async () => {
      await b?.close();
      await serve?.stop();
    });

    test("check, peek, forecast, refund, reset", async () => {
      const at = { now: T };
      const d = await b.check("tb", "k", 1, at);
      assert.deepEqual(plain(d), {
        allowed: true, limit: 3, remaining: 2, resetAt: T + 1000, retryAfterMs: 0,
        deniedBy: -1, parts: [], failOpen: false, override: false, plan: "",
      });
      assert.deepEqual(plain(await b.peek("tb", "k", at)), plain(d), "peek consumes nothing");
      assert.deepEqual(plain(await b.peek("tb", "k", at)), plain(d));
      const f = await b.forecast("tb", "k", 1, at);
      assert.equal(f.spendableNow, 2);
      assert.equal(f.fullAt, T + 1000);
      assert.equal(f.nextReplenishAt, T + 1000);
      await b.refund("tb", "k", 1, at);
      assert.equal((await b.peek("tb", "k", at)).remaining, 3);
      assert.equal((await b.check("tb", "k", 3, at)).remaining, 0);
      const denied = await b.check("tb", "k", 1, at);
      assert.deepEqual(plain(denied), {
        allowed: false, limit: 3, remaining: 0, resetAt: T + 3000, retryAfterMs: 1000,
        deniedBy: 0, parts: [], failOpen: false, override: false, plan: "",
      });
      await b.reset("tb", "k");
      assert.equal((await b.peek("tb", "k", at)).remaining, 3);
      assert.equal((await b.check("tb", "k", undefined, at)).remaining, 2, "cost defaults to 1");
    });

    test("checkMany decides each key at one instant", async () => {
      const ds = await b.checkMany("tb", ["m1", "m2"], 2, { now: T });
      assert.deepEqual(ds.map((d) => [d.allowed, d.remaining, d.resetAt]), [[true, 1, T + 2000], [true, 1, T + 2000]]);
      assert.deepEqual(await b.checkMany("tb", [], 1, { now: T }), []);
    });

    test("checkAll is all or nothing, with a part per item", async () => {
      const at = { now: T };
      const ok = await b.checkAll([{ policy: "tb", key: "a1", cost: 2 }, { policy: "duo", key: "a1", cost: 4 }], at);
      assert.equal(ok.allowed, true);
      assert.equal(ok.deniedBy, -1);
      assert.equal(ok.parts.length, 2);
      assert.deepEqual([ok.parts[0]?.remaining, ok.parts[1]?.remaining], [1, 4]);
      // The binding item is the one with the least remaining: tb, 1 left.
      assert.deepEqual([ok.limit, ok.remaining, ok.resetAt], [3, 1, T + 2000]);
      const no = await b.checkAll([{ policy: "duo", key: "a1" }, { policy: "tb", key: "a1", cost: 2 }], at);
      assert.equal(no.allowed, false);
      assert.equal(no.deniedBy, 1);
      assert.deepEqual([no.limit, no.remaining, no.retryAfterMs], [3, 1, 1000]);
      assert.equal((await b.peek("duo", "a1", at)).parts[1]?.remaining, 6, "a denial consumes nothing");
    });

    test("a composite policy answers its parts", async () => {
      const d = await b.check("duo", "c1", 7, { now: T });
      assert.equal(d.allowed, true);
      assert.equal(d.deniedBy, -1);
      assert.deepEqual(d.parts.map((p) => [p.limit, p.remaining]), [[5, 4], [10, 3]]);
      const no = await b.check("duo", "c1", 4, { now: T });
      assert.equal(no.allowed, false);
      assert.equal(no.deniedBy, 1);
      assert.deepEqual(no.parts.map((p) => p.allowed), [true, false]);
    });
  });

  describe(`${door.name}: errors`, () => {
    let serve: Serve;
    let b: Backend;
    before(async () => {
      serve = await startServe({ config: { policies: suitePolicies } });
      b = door.make(serve, { timeoutMs: 5000 });
    });
    after(async () => {
      await b?.close();
      await serve?.stop();
    });

    test("an unknown policy is PolicyNotFoundError", async () => {
      await rejects(b.check("nope", "k"), PolicyNotFoundError);
      await rejects(b.checkMany("nope", ["k"]), PolicyNotFoundError);
      await rejects(b.checkAll([{ policy: "nope", key: "k" }]), PolicyNotFoundError);
      await rejects(b.peek("nope", "k"), PolicyNotFoundError);
      await rejects(b.forecast("nope", "k"), PolicyNotFoundError);
      await rejects(b.refund("nope", "k"), PolicyNotFoundError);
      await rejects(b.reset("nope", "k"), PolicyNotFoundError);
    });

    const local: [string, (b: Backend) => Promise<unknown>, string][] = [
      ["cost 0", (b) => b.check("tb", "k", 0), "cost"],
      ["cost -1", (b) => b.check("tb", "k", -1), "cost"],
      ["cost 1.5", (b) => b.check("tb", "k", 1.5), "cost"],
      ["cost NaN", (b) => b.forecast("tb", "k", Number.NaN), "cost"],
      ["refund cost 0", (b) => b.refund("tb", "k", 0), "cost"],
      ["empty key", (b) => b.check("tb", ""), "key"],
      ["peek empty key", (b) => b.peek("tb", ""), "key"],
      ["reset empty key", (b) => b.reset("tb", ""), "key"],
      ["1025-byte key", (b) => b.check("tb", "x".repeat(1025)), "key"],
      ["513 two-byte characters", (b) => b.check("tb", "é".repeat(513)), "key"],
      ["checkMany's empty key", (b) => b.checkMany("tb", ["a", ""]), "keys[1]"],
      ["checkMany cost 0", (b) => b.checkMany("tb", ["a"], 0), "cost"],
      ["checkAll of nothing", (b) => b.checkAll([]), "items"],
      ["checkAll's empty key", (b) => b.checkAll([{ policy: "tb", key: "" }]), "items[0].key"],
      ["checkAll's cost 0", (b) => b.checkAll([{ policy: "tb", key: "a" }, { policy: "tb", key: "a", cost: 0 }]), "items[1].cost"],
      ["now 1.5", (b) => b.check("tb", "k", 1, { now: 1.5 }), "now"],
    ];
    for (const [name, call, field] of local) {
      test(`${name} is InvalidArgumentError naming ${field}`, () => rejects(call(b), InvalidArgumentError, field));
      test(`${name} is refused before anything is sent`, async () => {
        const dead = door.at(await freePort(), { failMode: "open", timeoutMs: 500 });
        try {
          await rejects(call(dead), InvalidArgumentError, field);
        } finally {
          await dead.close();
        }
      });
    }

    test("a key of 1024 bytes of UTF-8 is a key", async () => {
      assert.equal((await b.check("tb", "é".repeat(512), 1, { now: T })).allowed, true);
    });

    test("the server's invalid argument names its field", async () => {
      await rejects(b.check("tb", "k", 4), InvalidArgumentError, "cost");
      await rejects(b.checkAll([{ policy: "tb", key: "k" }, { policy: "tb", key: "k", cost: 9 }]), InvalidArgumentError, "items[1].cost");
    });

    test("UNIMPLEMENTED and 501 are OperationNotSupportedError", async () => {
      const srv = await door.unimplemented();
      const u = door.at(srv.port, { failMode: "open" });
      try {
        await rejects(u.check("tb", "k"), OperationNotSupportedError);
        await rejects(u.reset("tb", "k"), OperationNotSupportedError);
      } finally {
        await u.close();
        await srv.stop();
      }
    });
  });

  describe(`${door.name}: tokens`, () => {
    let serve: Serve;
    before(async () => {
      serve = await startServe({ config: { policies: suitePolicies }, tokens: ["check:chk-token", "admin:adm-token"] });
    });
    after(() => serve?.stop());

    const withToken = async (token: string | undefined, f: (b: Backend) => Promise<void>): Promise<void> => {
      const b = door.make(serve, token === undefined ? {} : { token });
      try {
        await f(b);
      } finally {
        await b.close();
      }
    };

    test("no token, or a wrong one, is UnauthenticatedError", async () => {
      await withToken(undefined, (b) => rejects(b.check("tb", "k"), UnauthenticatedError));
      await withToken("wrong", (b) => rejects(b.check("tb", "k"), UnauthenticatedError));
      await withToken("wrong", (b) => rejects(b.peek("tb", "k"), UnauthenticatedError));
    });

    test("a check token checks but may not reset (403, PERMISSION_DENIED)", async () => {
      await withToken("chk-token", async (b) => {
        assert.equal((await b.check("tb", "k")).allowed, true);
        await rejects(b.reset("tb", "k"), UnauthenticatedError);
        await rejects(b.refund("tb", "k"), UnauthenticatedError);
      });
    });

    test("an admin token may do everything", async () => {
      await withToken("adm-token", async (b) => {
        assert.equal((await b.check("tb", "k")).allowed, true);
        await b.reset("tb", "k");
        await b.refund("tb", "k");
      });
    });
  });

  describe(`${door.name}: fail modes`, () => {
    test("unreachable, failMode open: checks allow with failOpen, zeros", async () => {
      const b = door.at(await freePort(), { failMode: "open", timeoutMs: 1000 });
      try {
        assert.deepEqual(plain(await b.check("tb", "k")), {
          allowed: true, limit: 0, remaining: 0, resetAt: 0, retryAfterMs: 0,
          deniedBy: -1, parts: [], failOpen: true, override: false, plan: "",
        });
        const many = await b.checkMany("tb", ["a", "b"]);
        assert.deepEqual(many.map((d) => [d.allowed, d.failOpen, d.limit]), [[true, true, 0], [true, true, 0]]);
        const all = await b.checkAll([{ policy: "tb", key: "a" }, { policy: "duo", key: "a" }]);
        assert.deepEqual([all.allowed, all.failOpen, all.deniedBy, all.parts.length], [true, true, -1, 2]);
        assert.ok(all.parts.every((p) => p.failOpen && p.allowed));
        await rejects(b.peek("tb", "k"), ServiceUnavailableError);
        await rejects(b.forecast("tb", "k"), ServiceUnavailableError);
        await rejects(b.refund("tb", "k"), ServiceUnavailableError);
        await rejects(b.reset("tb", "k"), ServiceUnavailableError);
      } finally {
        await b.close();
      }
    });

    for (const opts of [{ failMode: "closed" as const }, {}]) {
      test(`unreachable, ${JSON.stringify(opts)}: checks throw ServiceUnavailableError`, async () => {
        const b = door.at(await freePort(), { ...opts, timeoutMs: 1000 });
        try {
          await rejects(b.check("tb", "k"), ServiceUnavailableError);
          await rejects(b.checkMany("tb", ["k"]), ServiceUnavailableError);
          await rejects(b.checkAll([{ policy: "tb", key: "k" }]), ServiceUnavailableError);
        } finally {
          await b.close();
        }
      });
    }

    describe("a store that cannot answer", () => {
      let serve: Serve;
      before(async () => {
        const port = await freePort();
        serve = await startServe({
          config: {
            store: `redis://127.0.0.1:${port}`,
            storeTimeout: "100ms",
            policies: {
              opens: { failMode: "open", strategy: "gcra", limit: 10, periodMs: 1000, burst: 10 },
              closes: { failMode: "closed", strategy: "gcra", limit: 10, periodMs: 1000, burst: 10 },
            },
          },
          healthOnly: true,
        });
      });
      after(() => serve?.stop());

      test("the server's fail-open decision comes through as such", async () => {
        const b = door.make(serve, { failMode: "closed", timeoutMs: 5000 });
        try {
          const d = await b.check("opens", "k");
          assert.deepEqual([d.allowed, d.failOpen, d.limit, d.remaining], [true, true, 0, 0]);
        } finally {
          await b.close();
        }
      });

      test("a fail-closed policy is ServiceUnavailableError, failMode closed; open lets it through", async () => {
        const closed = door.make(serve, { failMode: "closed", timeoutMs: 5000 });
        const open = door.make(serve, { failMode: "open", timeoutMs: 5000 });
        try {
          await assert.rejects(closed.check("closes", "k"), (err: unknown) => {
            assert.ok(err instanceof ServiceUnavailableError, String(err));
            assert.equal(err.failMode, "closed");
            return true;
          });
          await rejects(closed.peek("opens", "k"), ServiceUnavailableError);
          const d = await open.check("closes", "k");
          assert.deepEqual([d.allowed, d.failOpen], [true, true]);
        } finally {
          await closed.close();
          await open.close();
        }
      });
    });
  });
}
