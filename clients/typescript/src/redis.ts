// RedisBackend decides one policy's checks in Redis by running the Go store's own Lua scripts
// (store/redis/lua/*.lua) on the Go store's own keys, so that Node and Go processes sharing one
// Redis share one limit, decision for decision.
//
// The model (docs/redis.md): a key's state is one Redis string at <prefix>:{<policy>:<key>}
// (plus :n<length of the name> when the policy's name holds ':'), and every operation is one
// atomic script assembled from the fragment files: clock, header, strategy, the state helpers the
// strategy needs, the operation's helpers, the strategy's file and its operation's fragment, then
// mget, steps and the operation. Each script is loaded once with SCRIPT LOAD and run with EVALSHA,
// and with EVAL when Redis answers NOSCRIPT (a restart, a SCRIPT FLUSH).

import { createHash } from "node:crypto";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { InvalidArgumentError, ServiceUnavailableError } from "./errors.js";
import type { CallOptions, Decision, FailMode, Forecast } from "./types.js";
import {
  calendarBounds,
  FixedWindow,
  Gcra,
  goFloat,
  maxCost,
  SlidingWindow,
  SlidingWindowLog,
  TokenBucket,
  type Strategy,
} from "./strategies.js";
import { checkCost, checkKey, checkNow, FailPolicy } from "./util.js";

/** The Go store's default key prefix (redisstore.Config.Prefix). */
export const DefaultPrefix = "sluice";

/** The TTL slack the Go store adds to every key's expiry by default, ms (Config.TTLSlack). */
const ttlSlackMs = "1000";

/**
 * RedisClient is the one method RedisBackend uses: ioredis's Redis (and Cluster) call, which sends
 * any command and resolves to its reply.
 */
export interface RedisClient {
  call(command: string, args: (string | number)[]): Promise<unknown>;
}

export interface RedisBackendOptions {
  /** Starts every key; the Go store's default, "sluice", unless configured there too. */
  readonly prefix?: string;
  /**
   * What a check answers when Redis fails: "closed" (the default) throws ServiceUnavailableError,
   * "open" allows it, with failOpen true and every number 0. Other operations always throw.
   */
  readonly failMode?: FailMode;
  /**
   * Bounds each call, ms; none by default, as the Go store without a context deadline. A call
   * not answered in time throws ServiceUnavailableError (a check answers by the fail mode), and a
   * check carries an instant to give up, the deadline less an eighth of timeoutMs (at most 50 ms),
   * as the Go store does: a script that reaches Redis at or past it on Redis's clock answers LATE
   * and counts nothing, so a check its caller was told failed is not counted later.
   */
  readonly timeoutMs?: number;
  /** The directory holding the Lua files; found next to the package or in the repository otherwise. */
  readonly luaDir?: string;
}

// ---- The Lua files and their assembly (docs/redis.md, "The Lua scripts") ----

/** An operation of the general scripts, named as its file is. */
type Op = "check" | "peek" | "forecast" | "refund";

/** Each strategy's letter in the scripts' arguments and its file. */
const letters: Readonly<Record<Strategy["kind"], { letter: string; file: string }>> = {
  gcra: { letter: "g", file: "gcra" },
  tokenBucket: { letter: "t", file: "tokenbucket" },
  fixedWindow: { letter: "f", file: "fixedwindow" },
  slidingWindow: { letter: "s", file: "slidingwindow" },
  slidingWindowLog: { letter: "l", file: "slidinglog" },
};

/**
 * findLuaDir returns the directory of the Lua files: the package's lua/ (a copy made when it is
 * packed), or the repository's store/redis/lua, whichever is met first walking up from this module.
 */
function findLuaDir(): string {
  const env = process.env.SLUICE_LUA_DIR;
  if (env) return env;
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let up = 0; up < 8; up++) {
    for (const candidate of [join(dir, "lua"), join(dir, "store", "redis", "lua")]) {
      if (existsSync(join(candidate, "check.lua")) && existsSync(join(candidate, "steps.lua"))) return candidate;
    }
    const parent = dirname(dir);
    if (parent === dir) break;
    dir = parent;
  }
  throw new Error("sluice: cannot find the Lua scripts (store/redis/lua); set SLUICE_LUA_DIR");
}

/**
 * parseFragments reads every fragment of dir/*.lua by name, as scripts.go's parseFragments does:
 * a line starting with "--@" starts fragment file (alone) or file.name, and runs to the next one;
 * the lines before the first document the file and belong to none.
 */
export function parseFragments(dir: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const entry of readdirSync(dir).filter((f) => f.endsWith(".lua")).sort()) {
    const file = entry.slice(0, -".lua".length);
    let name = "";
    for (const line of lines(readFileSync(join(dir, entry), "utf8"))) {
      if (line.startsWith("--@")) {
        const rest = line.slice(3).trim();
        name = rest === "" ? file : `${file}.${rest}`;
        if (out.has(name)) throw new Error(`sluice: lua/${entry}: fragment ${name} twice`);
        out.set(name, "");
      } else if (name !== "") {
        out.set(name, out.get(name) + line);
      }
    }
  }
  return out;
}

/** lines splits text into lines that keep their "\n", as Go's strings.Lines does. */
function lines(text: string): string[] {
  return text.match(/[^\n]*\n|[^\n]+$/g) ?? [];
}

/**
 * assemble returns the fragments named, in order, each line "--> name" replaced by fragment name
 * indented as that line is (scripts.go's assemble and paste; no batch script here, so no "*.").
 */
export function assemble(frags: ReadonlyMap<string, string>, names: readonly string[]): string {
  return names.map((name) => paste(frags, name, "", 0)).join("");
}

function paste(frags: ReadonlyMap<string, string>, name: string, indent: string, depth: number): string {
  const text = frags.get(name);
  if (text === undefined || depth > 8) throw new Error(`sluice: Lua fragment ${name} is missing or nests too deep`);
  let out = "";
  for (const line of lines(text)) {
    const trimmed = line.replace(/^ +/, "");
    const body = trimmed.trim();
    if (body.startsWith("--> ")) {
      out += paste(frags, body.slice(4).trim(), indent + line.slice(0, line.length - trimmed.length), depth + 1);
      continue;
    }
    out += line === "\n" ? line : indent + line;
  }
  return out;
}

/**
 * recipe lists the fragments of the general script of op over one strategy (scripts.go's recipe,
 * shape general): clock, header, strategy, near.functions for a token bucket or fixed window,
 * lists for a sliding window or log, the operation's helpers, the strategy's file and its
 * operation's fragment, then mget, steps and the operation.
 */
export function recipe(frags: ReadonlyMap<string, string>, op: Op, kind: Strategy["kind"]): string[] {
  const names = ["clock", "header", "strategy"];
  if (kind === "tokenBucket" || kind === "fixedWindow") names.push("near.functions");
  if (kind === "slidingWindow" || kind === "slidingWindowLog") names.push("lists");
  if (frags.has(`${op}.helpers`)) names.push(`${op}.helpers`);
  const file = letters[kind].file;
  names.push(file, `${file}.${op}`, "mget", "steps", op);
  return names;
}

/** A script's text and its SHA-1, the name EVALSHA runs it by. */
export interface Script {
  readonly source: string;
  readonly sha: string;
}

const fragmentsByDir = new Map<string, Map<string, string>>();
const scriptCache = new Map<string, Script>();

/** script returns the general script of op for kind, from the Lua files of dir, made once. */
export function script(op: Op, kind: Strategy["kind"], dir: string = findLuaDir()): Script {
  const id = `${dir}\u0000${op}\u0000${kind}`;
  let sc = scriptCache.get(id);
  if (!sc) {
    let frags = fragmentsByDir.get(dir);
    if (!frags) {
      frags = parseFragments(dir);
      fragmentsByDir.set(dir, frags);
    }
    const source = assemble(frags, recipe(frags, op, kind));
    sc = Object.freeze({ source, sha: createHash("sha1").update(source).digest("hex") });
    scriptCache.set(id, sc);
  }
  return sc;
}

// ---- Keys and arguments ----

/** checkPolicyName is Go's validName: 1 to 128 bytes of letters, digits and -_.:/ . */
function checkPolicyName(name: string): void {
  if (typeof name !== "string" || name.length === 0 || name.length > 128) {
    throw new InvalidArgumentError("policy", `name must be 1 to 128 bytes, got ${typeof name === "string" ? name.length : 0}`);
  }
  if (!/^[A-Za-z0-9\-_.:/]+$/.test(name)) {
    throw new InvalidArgumentError("policy", `name ${JSON.stringify(name)} may hold only letters, digits and -_.:/`);
  }
}

/** checkCeiling refuses a cost (a whole number of at least 1) above what the policy can ever admit (Go's checkCost). */
function checkCeiling(cost: number, policy: string, ceiling: number): void {
  checkCost("cost", cost);
  if (cost > ceiling) {
    throw new InvalidArgumentError("cost", `${cost} exceeds ${ceiling}, the most policy ${JSON.stringify(policy)} can ever admit`);
  }
}

/** nowArg is ARGV[1]: the instant given, a positive whole epoch ms, or "0" for Redis's clock. */
function nowArg(opts: CallOptions | undefined): string {
  checkNow(opts?.now);
  return opts?.now === undefined ? "0" : String(opts.now);
}

/**
 * limitDefs is a limit's letter and six parameters, unused ones "0" (steps.lua's ARGV), for a call
 * at now (epoch ms; 0: this process's clock), which only a calendar window reads: its windowMs 0
 * and the bounds of three calendar windows in a row around now, so that the script finds the one
 * holding Redis's instant even across a boundary the two clocks disagree on (the Go store's
 * calendarBounds).
 */
function limitDefs(s: Strategy, now: number): string[] {
  const p = (() => {
    switch (s.kind) {
      case "gcra":
        return [goFloat(s.limit), goFloat(s.periodMs), goFloat(s.burst)];
      case "tokenBucket":
        return [goFloat(s.capacity), goFloat(s.refillPerSec)];
      case "fixedWindow":
        if (s.calendar !== "") {
          const at = now === 0 ? Date.now() : now;
          const [start, end] = calendarBounds(s, at);
          const [before] = calendarBounds(s, start - 1);
          const [, after] = calendarBounds(s, end);
          return [goFloat(s.limit), "0", goFloat(before), goFloat(start), goFloat(end), goFloat(after)];
        }
        return [goFloat(s.limit), goFloat(s.windowMs)];
      case "slidingWindow":
        return [goFloat(s.limit), goFloat(s.windowMs), String(s.buckets)];
      case "slidingWindowLog":
        return [goFloat(s.limit), goFloat(s.windowMs)];
    }
  })();
  return [letters[s.kind].letter, ...p, ...Array<string>(6 - p.length).fill("0")];
}

/**
 * revalidate returns s built again by its kind's constructor, so that a strategy object not made
 * by one (a plain object with a kind) is validated as the constructors validate.
 */
function revalidate(s: Strategy): Strategy {
  if (typeof s !== "object" || s === null || !Object.hasOwn(letters, s.kind)) {
    throw new InvalidArgumentError("strategy", "must be one of Gcra, TokenBucket, FixedWindow, SlidingWindow, SlidingWindowLog");
  }
  switch (s.kind) {
    case "gcra":
      return Gcra(s.limit, s.periodMs, s.burst);
    case "tokenBucket":
      return TokenBucket(s.capacity, s.refillPerSec);
    case "fixedWindow":
      return FixedWindow(s.limit, s.windowMs, s.calendar ?? "", s.timezone ?? "");
    case "slidingWindow":
      return SlidingWindow(s.limit, s.windowMs, s.buckets);
    case "slidingWindowLog":
      return SlidingWindowLog(s.limit, s.windowMs);
  }
}

/** decision is a step's decision from the five integers a check or peek replies. */
function decision(n: readonly number[]): Decision {
  const allowed = n[0] === 1;
  return Object.freeze({
    allowed,
    limit: n[1]!,
    remaining: n[2]!,
    resetAt: n[3]!,
    retryAfterMs: n[4]!,
    deniedBy: allowed ? -1 : 0,
    parts: Object.freeze([]) as readonly Decision[],
    failOpen: false,
    override: false,
    plan: "",
  });
}

/** integers reads a script's reply, an array of integers, n of them. */
function integers(reply: unknown, n: number): number[] {
  if (!Array.isArray(reply) || reply.length !== n || !reply.every((v) => Number.isInteger(v))) {
    throw new ServiceUnavailableError(`sluice: redis store: unexpected script reply ${JSON.stringify(reply)}, want ${n} integers`);
  }
  return reply as number[];
}

/** The SHAs each client has had loaded (SCRIPT LOAD), so each script is loaded once per client. */
const loaded = new WeakMap<RedisClient, Map<string, Promise<void>>>();

/**
 * RedisBackend checks keys under one policy, a name and one strategy, in Redis, exactly as the Go
 * Redis store does for a policy of that name and that single limit: same keys, same scripts, same
 * arguments, so that the two share every key's state.
 */
export class RedisBackend {
  readonly policyName: string;
  readonly strategy: Strategy;
  readonly prefix: string;
  readonly failMode: FailMode;
  readonly #client: RedisClient;
  readonly #fail: FailPolicy;
  readonly #defs: readonly string[] | undefined; // undefined: a calendar window's depend on now
  readonly #ceiling: number;
  readonly #luaDir: string;
  readonly #timeoutMs: number | undefined;

  constructor(client: RedisClient, policyName: string, strategy: Strategy, options: RedisBackendOptions = {}) {
    checkPolicyName(policyName);
    strategy = revalidate(strategy);
    const failMode = options.failMode ?? "closed";
    this.#fail = new FailPolicy(failMode);
    this.#client = client;
    this.policyName = policyName;
    this.strategy = strategy;
    this.prefix = options.prefix || DefaultPrefix;
    this.failMode = failMode;
    this.#defs = strategy.kind === "fixedWindow" && strategy.calendar !== "" ? undefined : limitDefs(strategy, 0);
    this.#ceiling = maxCost(strategy);
    this.#luaDir = options.luaDir ?? findLuaDir();
    const timeoutMs = options.timeoutMs;
    if (timeoutMs !== undefined && !(typeof timeoutMs === "number" && timeoutMs > 0 && Number.isFinite(timeoutMs))) {
      throw new InvalidArgumentError("timeoutMs", `must be above 0, got ${String(timeoutMs)}`);
    }
    this.#timeoutMs = timeoutMs;
  }

  /**
   * redisKey is where key's state lives: <prefix>:{<policy>:<key>}, then :n<length of the name>
   * when the policy's name holds ':' (the Go store's Store.key for a policy of one limit).
   */
  redisKey(key: string): string {
    const base = `${this.prefix}:{${this.policyName}:${key}}`;
    return this.policyName.includes(":") ? `${base}:n${Buffer.byteLength(this.policyName, "utf8")}` : base;
  }

  /** check consumes cost units of key, all or none, and says whether it was allowed. */
  async check(key: string, cost = 1, opts?: CallOptions): Promise<Decision> {
    const [d] = await this.checkMany([key], cost, opts);
    return d!;
  }

  /**
   * checkMany checks each key for cost, in order, at one instant, in one script run (as the Go
   * store's CheckMany): each key is a check of its own, allowed or denied on its own.
   */
  async checkMany(keys: readonly string[], cost = 1, opts?: CallOptions): Promise<Decision[]> {
    if (!Array.isArray(keys)) throw new InvalidArgumentError("keys", "must be an array of keys");
    keys.forEach((k) => checkKey("key", k));
    checkCeiling(cost, this.policyName, this.#ceiling);
    const now = nowArg(opts);
    if (keys.length === 0) return [];
    try {
      const v = await this.#run("check", keys, now, cost);
      const n = integers(v, 5 * keys.length);
      return keys.map((_, i) => decision(n.slice(5 * i, 5 * i + 5)));
    } catch (err) {
      return this.#fail.many(err, keys.length);
    }
  }

  /** peek says what a check of cost 1 would answer now, consuming nothing. */
  async peek(key: string, opts?: CallOptions): Promise<Decision> {
    checkKey("key", key);
    const v = await this.#run("peek", [key], nowArg(opts), 1);
    return decision(integers(v, 5));
  }

  /** forecast projects key's capacity for checks of cost, consuming nothing. */
  async forecast(key: string, cost = 1, opts?: CallOptions): Promise<Forecast> {
    checkKey("key", key);
    checkCeiling(cost, this.policyName, this.#ceiling);
    const [spendableNow, nextReplenishAt, fullAt] = integers(await this.#run("forecast", [key], nowArg(opts), cost), 3);
    return Object.freeze({ spendableNow: spendableNow!, nextReplenishAt: nextReplenishAt!, fullAt: fullAt! });
  }

  /** refund gives cost units back to key, never past the limit's ceiling. */
  async refund(key: string, cost = 1, opts?: CallOptions): Promise<void> {
    checkKey("key", key);
    checkCost("cost", cost);
    integers(await this.#run("refund", [key], nowArg(opts), cost), 0);
  }

  /** reset forgets key: its next check starts from a full budget. */
  async reset(key: string): Promise<void> {
    checkKey("key", key);
    const del = this.#send("DEL", [this.redisKey(key)]);
    await (this.#timeoutMs === undefined ? del : bounded(this.#timeoutMs, del));
  }

  /**
   * #run runs op's general script on keys, one step each of this policy's limit at cost, with
   * the arguments header.lua and steps.lua read: now, the TTL slack, the instant to give up (0 for
   * none), one step per group, one limit and its seven definitions, then one (limit, cost) pair for
   * every step. With timeoutMs, the call is bounded by its deadline and a check gives up before it.
   */
  async #run(op: Op, keys: readonly string[], now: string, cost: number): Promise<unknown> {
    const timeoutMs = this.#timeoutMs;
    if (timeoutMs === undefined) return this.#runNow(op, keys, now, cost, "0");
    const deadline = Date.now() + timeoutMs;
    // A check consumes: it gives up an eighth of the time (at most 50 ms) before the deadline, the
    // margin for its answer's way back (Go's giveUpAt). Other operations carry no instant.
    const giveUp = op === "check" ? String(Math.max(Math.floor(deadline - Math.min(timeoutMs / 8, 50)), 1)) : "0";
    return bounded(timeoutMs, this.#runNow(op, keys, now, cost, giveUp));
  }

  /** #runNow sends op's script, loaded once, by EVALSHA, and by EVAL when Redis does not hold it. */
  async #runNow(op: Op, keys: readonly string[], now: string, cost: number, giveUp: string): Promise<unknown> {
    const sc = script(op, this.strategy.kind, this.#luaDir);
    const defs = this.#defs ?? limitDefs(this.strategy, Number(now));
    const argv = [now, ttlSlackMs, giveUp, "1", "1", ...defs, "1", String(cost)];
    const redisKeys = keys.map((k) => this.redisKey(k));
    await this.#load(sc);
    try {
      return await this.#client.call("EVALSHA", [sc.sha, redisKeys.length, ...redisKeys, ...argv]);
    } catch (err) {
      if (!String((err as Error)?.message).startsWith("NOSCRIPT")) throw unavailable(err);
    }
    return this.#send("EVAL", [sc.source, redisKeys.length, ...redisKeys, ...argv]);
  }

  /** #load has Redis load sc once per client (SCRIPT LOAD); a failed load is tried again next time. */
  async #load(sc: Script): Promise<void> {
    let shas = loaded.get(this.#client);
    if (!shas) loaded.set(this.#client, (shas = new Map()));
    let p = shas.get(sc.sha);
    if (!p) {
      p = this.#send("SCRIPT", ["LOAD", sc.source]).then((sha) => {
        if (sha !== sc.sha) throw new ServiceUnavailableError(`sluice: redis store: SCRIPT LOAD answered ${String(sha)}, want ${sc.sha}`);
      });
      p.catch(() => shas.delete(sc.sha));
      shas.set(sc.sha, p);
    }
    return p;
  }

  /** #send sends one command; any failure is a ServiceUnavailableError. */
  async #send(command: string, args: (string | number)[]): Promise<unknown> {
    try {
      return await this.#client.call(command, args);
    } catch (err) {
      throw unavailable(err);
    }
  }
}

/**
 * bounded is work's result, or a ServiceUnavailableError once ms have passed; work then finishes
 * on its own, its outcome dropped.
 */
async function bounded<T>(ms: number, work: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new ServiceUnavailableError(`sluice: redis store: no answer within ${ms} ms`)), ms);
  });
  work.catch(() => {}); // a late failure is nobody's to hear
  try {
    return await Promise.race([work, expired]);
  } finally {
    clearTimeout(timer);
  }
}

/** unavailable wraps a Redis failure as ServiceUnavailableError (Go: sluice.ErrUnavailable). */
function unavailable(err: unknown): ServiceUnavailableError {
  if (err instanceof ServiceUnavailableError) return err;
  return new ServiceUnavailableError(`sluice: redis store: ${(err as Error)?.message ?? String(err)}`);
}
