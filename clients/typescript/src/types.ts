// The answers of every door: Decision, Forecast, and the Item of checkAll. Instants are epoch
// milliseconds and durations milliseconds, as in Go's sluice.Decision (docs/semantics.md).

export interface Decision {
  readonly allowed: boolean;
  readonly limit: number;
  readonly remaining: number;
  readonly resetAt: number;
  readonly retryAfterMs: number;
  /** The index in parts of the part that denied; -1 when allowed, 0 for a denied single limit. */
  readonly deniedBy: number;
  /** One decision per limit of a composite policy or per item of checkAll; empty otherwise. */
  readonly parts: readonly Decision[];
  /** No limit was consulted: the store could not answer and the fail mode allowed. */
  readonly failOpen: boolean;
  /** The key has an override: its plan or limits applied instead of the policy as configured. */
  readonly override: boolean;
  /** The plan the key was checked under, for a policy with plans; "" otherwise. */
  readonly plan: string;
}

export interface Forecast {
  readonly spendableNow: number;
  readonly nextReplenishAt: number;
  readonly fullAt: number;
}

export interface Item {
  readonly policy: string;
  readonly key: string;
  readonly cost?: number;
}

/**
 * What a check does when the service cannot answer (unreachable, timed out, UNAVAILABLE or 503):
 * "open" answers an allowed decision with failOpen set and every number zero, "closed" throws
 * ServiceUnavailableError. Calls that admit nothing (peek, forecast, refund, reset) always throw.
 */
export type FailMode = "open" | "closed";

/** Options of one call: now pins the instant (epoch ms) to decide at; the service must allow it. */
export interface CallOptions {
  readonly now?: number;
}

/**
 * A Backend is one door to sluice's limiter: every method answers as sluice.Limiter's method of
 * the same name does, whatever the door. Costs default to 1.
 */
export interface Backend {
  check(policy: string, key: string, cost?: number, opts?: CallOptions): Promise<Decision>;
  checkMany(policy: string, keys: readonly string[], cost?: number, opts?: CallOptions): Promise<Decision[]>;
  checkAll(items: readonly Item[], opts?: CallOptions): Promise<Decision>;
  peek(policy: string, key: string, opts?: CallOptions): Promise<Decision>;
  forecast(policy: string, key: string, cost?: number, opts?: CallOptions): Promise<Forecast>;
  refund(policy: string, key: string, cost?: number, opts?: CallOptions): Promise<void>;
  reset(policy: string, key: string): Promise<void>;
  close(): Promise<void>;
}

/** The subset of a Backend the middleware needs. */
export type Checker = Pick<Backend, "check">;

/**
 * decisionFromJSON reads a decision in its JSON wire form (the HTTP API's; the gRPC door's
 * messages, loaded with camel-case names, read alike). An allowed decision has deniedBy -1.
 */
export function decisionFromJSON(d: Record<string, unknown>): Decision {
  const allowed = Boolean(d.allowed);
  return Object.freeze({
    allowed,
    limit: Number(d.limit ?? 0),
    remaining: Number(d.remaining ?? 0),
    resetAt: Number(d.resetAt ?? 0),
    retryAfterMs: Number(d.retryAfterMs ?? 0),
    deniedBy: allowed ? -1 : Number(d.deniedBy ?? 0),
    parts: Object.freeze(((d.parts as Record<string, unknown>[] | undefined) ?? []).map(decisionFromJSON)),
    failOpen: Boolean(d.failOpen),
    override: Boolean(d.override),
    plan: String(d.plan ?? ""),
  });
}

export function forecastFromJSON(d: Record<string, unknown>): Forecast {
  return Object.freeze({
    spendableNow: Number(d.spendableNow ?? 0),
    nextReplenishAt: Number(d.nextReplenishAt ?? 0),
    fullAt: Number(d.fullAt ?? 0),
  });
}

/**
 * failOpenDecision is the answer of a check that no limit decided: allowed, failOpen, every number
 * zero. With parts > 0 it holds that many such parts (one per item of a checkAll).
 */
export function failOpenDecision(parts = 0): Decision {
  const one = (p: readonly Decision[]): Decision =>
    Object.freeze({
      allowed: true,
      limit: 0,
      remaining: 0,
      resetAt: 0,
      retryAfterMs: 0,
      deniedBy: -1,
      parts: Object.freeze(p),
      failOpen: true,
      override: false,
      plan: "",
    });
  return one(Array.from({ length: parts }, () => one([])));
}

/**
 * combine folds the decisions of several parts into one, as Go's sluice.Combine: the first denying
 * part binds (then the one with the longest retry, then the least remaining); when all allow, the
 * one with the least remaining. The result carries the binding part's fields, all the parts, and
 * deniedBy the binding index (or -1 when allowed).
 */
export function combine(parts: readonly Decision[]): Decision {
  let bind = -1;
  let allowed = true;
  parts.forEach((d, i) => {
    const b = bind >= 0 ? parts[bind] : undefined;
    if (!d.allowed) {
      if (allowed || b === undefined) {
        allowed = false;
        bind = i;
      } else if (d.retryAfterMs > b.retryAfterMs || (d.retryAfterMs === b.retryAfterMs && d.remaining < b.remaining)) {
        bind = i;
      }
    } else if (allowed && (b === undefined || d.remaining < b.remaining)) {
      bind = i;
    }
  });
  const frozen = Object.freeze([...parts]);
  const b = bind >= 0 ? parts[bind] : undefined;
  if (b === undefined) {
    return Object.freeze({ ...failOpenDecision(), failOpen: false, parts: frozen });
  }
  return Object.freeze({ ...b, parts: frozen, deniedBy: allowed ? -1 : bind });
}
