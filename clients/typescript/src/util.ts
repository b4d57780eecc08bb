// What the gRPC and HTTP doors share: the local checks of input (those the Go library makes before
// touching a store), the reading of a server's invalid-argument message, and the fail mode.

import { InvalidArgumentError, ServiceUnavailableError } from "./errors.js";
import { failOpenDecision, type Decision, type FailMode, type Item } from "./types.js";

/** The longest key, in bytes of UTF-8: sluice.MaxKeyLen (policy.go). */
export const MAX_KEY_LEN = 1024;

/** The bound of a call whose options give none, as Go's client.DefaultTimeout. */
export const DEFAULT_TIMEOUT_MS = 1000;

/** The options both network doors take. */
export interface DoorOptions {
  /** Sent as "Bearer <token>" in the authorization header or metadata. */
  readonly token?: string;
  /** Bounds each call, in ms; 1000 by default. */
  readonly timeoutMs?: number;
  /** What a check answers when the service cannot: "closed" (throw, the default) or "open". */
  readonly failMode?: FailMode;
}

/** checkCost refuses a cost that is not an integer of at least 1 (and at most 2^53 - 1). */
export function checkCost(field: string, cost: number): void {
  if (!Number.isSafeInteger(cost)) {
    throw new InvalidArgumentError(field, `must be an integer, got ${cost}`);
  }
  if (cost < 1) {
    throw new InvalidArgumentError(field, `must be at least 1, got ${cost}`);
  }
}

/** checkKey refuses an empty key and one over MAX_KEY_LEN bytes of UTF-8. */
export function checkKey(field: string, key: string): void {
  if (typeof key !== "string" || key === "") {
    throw new InvalidArgumentError(field, "must not be empty");
  }
  const n = Buffer.byteLength(key, "utf8");
  if (n > MAX_KEY_LEN) {
    throw new InvalidArgumentError(field, `is ${n} bytes, more than ${MAX_KEY_LEN}`);
  }
}

/** checkItems makes checkKey and checkCost of every item, naming items[i].key or items[i].cost. */
export function checkItems(items: readonly Item[]): void {
  if (items.length === 0) {
    throw new InvalidArgumentError("items", "at least one item is needed");
  }
  items.forEach((it, i) => {
    checkKey(`items[${i}].key`, it.key);
    checkCost(`items[${i}].cost`, it.cost ?? 1);
  });
}

/** checkNow refuses an instant that is not a positive integer of epoch ms. */
export function checkNow(now: number | undefined): void {
  if (now !== undefined && (!Number.isSafeInteger(now) || now < 1)) {
    throw new InvalidArgumentError("now", `must be a positive integer of epoch ms, got ${now}`);
  }
}

/**
 * invalidFromMessage rebuilds the InvalidArgumentError a server reported as the limiter's
 * "sluice: invalid FIELD: reason" or the HTTP API's "httpapi: FIELD: reason"; a message of another
 * form names the field "request".
 */
export function invalidFromMessage(msg: string): InvalidArgumentError {
  for (const prefix of ["sluice: invalid ", "httpapi: "]) {
    const at = msg.indexOf(prefix);
    if (at < 0) continue;
    const rest = msg.slice(at + prefix.length);
    const sep = rest.indexOf(": ");
    const field = sep < 0 ? "" : rest.slice(0, sep);
    if (/^[A-Za-z0-9_.[\]]+$/.test(field)) {
      return new InvalidArgumentError(field, rest.slice(sep + 2));
    }
  }
  return new InvalidArgumentError("request", msg);
}

/**
 * FailPolicy applies a door's fail mode to a check: an unavailable service gives failOpen
 * decisions when the mode is open, and the error otherwise. Any other error passes through.
 */
export class FailPolicy {
  constructor(private readonly mode: FailMode) {
    if (mode !== "open" && mode !== "closed") {
      throw new InvalidArgumentError("failMode", `must be "open" or "closed", got ${String(mode)}`);
    }
  }

  /** one is the fail-open answer of a check or checkAll of n items (0 for a plain check). */
  one(err: unknown, items = 0): Decision {
    if (this.opens(err)) return failOpenDecision(items);
    throw err;
  }

  /** many is the fail-open answer of a checkMany of n keys. */
  many(err: unknown, n: number): Decision[] {
    if (this.opens(err)) return Array.from({ length: n }, () => failOpenDecision());
    throw err;
  }

  private opens(err: unknown): boolean {
    return this.mode === "open" && err instanceof ServiceUnavailableError;
  }
}
