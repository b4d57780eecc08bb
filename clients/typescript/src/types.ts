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

/** decisionFromJSON reads a decision in its JSON wire form (the HTTP API's). */
export function decisionFromJSON(d: Record<string, unknown>): Decision {
  const allowed = Boolean(d.allowed);
  return Object.freeze({
    allowed,
    limit: Number(d.limit ?? 0),
    remaining: Number(d.remaining ?? 0),
    resetAt: Number(d.resetAt ?? 0),
    retryAfterMs: Number(d.retryAfterMs ?? 0),
    deniedBy: Number(d.deniedBy ?? (allowed ? -1 : 0)),
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
