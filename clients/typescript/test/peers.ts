// The Redis the Redis door's tests share (SLUICE_REDIS_URL, or 127.0.0.1:6379) and the peers they
// check RedisBackend beside: the Go store (clients/gointerop/peer, go run) and the Python client's
// RedisBackend (clients/python/tests/peer.py, run by /usr/bin/python3 or SLUICE_PYTHON), each a
// process of its own reading one JSON request a line and answering one JSON line each, in the
// protocol the Go peer's package doc states.

import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { createInterface } from "node:readline";

import { Redis } from "ioredis";

import type { Strategy } from "../src/strategies.js";
import type { Decision } from "../src/types.js";
import { repoRoot } from "./serve.js";

export const redisURL = process.env.SLUICE_REDIS_URL || "redis://127.0.0.1:6379";
export const ci = process.env.CI === "true";

/** connect returns a client of the test Redis, or undefined (a skip) when none answers outside CI. */
export async function connect(): Promise<Redis | undefined> {
  const client = new Redis(redisURL, { lazyConnect: true, maxRetriesPerRequest: 1, enableOfflineQueue: false, retryStrategy: () => null });
  client.on("error", () => {}); // connect() rejects with it
  try {
    await client.connect();
    await client.ping();
    return client;
  } catch (err) {
    client.disconnect();
    if (ci) throw new Error(`no Redis at ${redisURL} (CI=true requires one): ${String(err)}`);
    return undefined;
  }
}

/** dropPrefix deletes every key under prefix. */
export async function dropPrefix(client: Redis, prefix: string): Promise<void> {
  let cursor = "0";
  do {
    const [next, keys] = await client.scan(cursor, "MATCH", `${prefix}:*`, "COUNT", 1000);
    if (keys.length > 0) await client.del(...keys);
    cursor = next;
  } while (cursor !== "0");
}

/** freshPrefix is a key prefix no other test uses. */
export function freshPrefix(): string {
  return `sluicetest-${randomBytes(6).toString("hex")}`;
}

/** spec is a strategy in the vectors' form, as the peers read it. */
export function spec(s: Strategy): Record<string, unknown> {
  const { ceiling: _c, windowMs, ...rest } = s as Strategy & Record<string, unknown>;
  return s.kind === "gcra" || s.kind === "tokenBucket" ? rest : { ...rest, windowMs };
}

/** PeerReply is one line a peer answers. */
export interface PeerReply {
  decision?: Decision;
  decisions?: Decision[];
  forecast?: { spendableNow: number; nextReplenishAt: number; fullAt: number };
  error?: string;
}

/** Peer is a peer process, asked one request at a time; once it is gone every request answers an error. */
export class Peer {
  readonly name: string;
  readonly #proc: ChildProcessWithoutNullStreams;
  readonly #waiting: ((r: PeerReply) => void)[] = [];
  #gone: string | undefined;

  constructor(name: string, command: string, args: string[], env: NodeJS.ProcessEnv = process.env) {
    this.name = name;
    this.#proc = spawn(command, args, { cwd: repoRoot(), env });
    this.#proc.stderr.on("data", (b: Buffer) => process.stderr.write(b));
    this.#proc.stdin.on("error", () => {}); // a peer that is gone: #end answers for it
    this.#proc.once("error", (err) => this.#end(`${name} did not start: ${err.message}`));
    this.#proc.once("exit", (code, signal) => this.#end(`${name} exited (${signal ?? code})`));
    createInterface({ input: this.#proc.stdout }).on("line", (line) => this.#waiting.shift()?.(JSON.parse(line) as PeerReply));
  }

  #end(why: string): void {
    this.#gone ??= why;
    for (const w of this.#waiting.splice(0)) w({ error: this.#gone });
  }

  /** ready resolves once the peer answers, or rejects when it cannot start (no toolchain, no Redis client). */
  async ready(): Promise<void> {
    const probe = { prefix: "sluicetest-probe", policy: "probe", strategy: { kind: "fixedWindow", limit: 1, windowMs: 1000 }, op: "peek", key: "k" };
    const r = await this.request(probe);
    if (r.error !== undefined) throw new Error(r.error);
  }

  request(req: Record<string, unknown>): Promise<PeerReply> {
    if (this.#gone !== undefined) return Promise.resolve({ error: this.#gone });
    return new Promise((resolve) => {
      this.#waiting.push(resolve);
      this.#proc.stdin.write(JSON.stringify(req) + "\n");
    });
  }

  close(): void {
    this.#proc.stdin.end();
  }
}

/** goPeer starts the Go store's peer, clients/gointerop/peer, with go run. */
export function goPeer(): Peer {
  return new Peer("the Go peer", "go", ["run", "./clients/gointerop/peer", "-url", redisURL]);
}

/** pythonPeer starts the Python client's peer, clients/python/tests/peer.py. */
export function pythonPeer(): Peer {
  const python = process.env.SLUICE_PYTHON || "/usr/bin/python3";
  const env = { ...process.env, PYTHONPATH: join(repoRoot(), "clients", "python") };
  return new Peer("the Python peer", python, ["clients/python/tests/peer.py", "--url", redisURL], env);
}

/** full is a peer's decision JSON as this client's Decision (omitted fields are their zero values). */
export function full(d: Decision): Decision {
  return { ...d, parts: d.parts ?? [], failOpen: d.failOpen ?? false, override: d.override ?? false, plan: d.plan ?? "" };
}
