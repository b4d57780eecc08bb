// HttpBackend: sluice's limiter over the HTTP JSON API of `sluice serve` (POST /v1/...), with the
// global fetch.

import {
  OperationNotSupportedError,
  PolicyNotFoundError,
  ServiceUnavailableError,
  SluiceError,
  UnauthenticatedError,
} from "./errors.js";
import {
  combine,
  decisionFromJSON,
  forecastFromJSON,
  type Backend,
  type CallOptions,
  type Decision,
  type Forecast,
  type Item,
} from "./types.js";
import {
  checkCost,
  checkItems,
  checkKey,
  checkNow,
  DEFAULT_TIMEOUT_MS,
  FailPolicy,
  invalidFromMessage,
  type DoorOptions,
} from "./util.js";

type Body = Record<string, unknown>;

/**
 * errorFromResponse maps a non-2xx answer to the typed errors, by its body's code, else its status:
 * 400 InvalidArgumentError (field read from the message), 401 and 403 UnauthenticatedError, 404
 * PolicyNotFoundError, 501 OperationNotSupportedError, 503 and other 5xx ServiceUnavailableError
 * (failMode "closed" when the body says the policy failed closed).
 */
export function errorFromResponse(status: number, body: Body): SluiceError {
  const msg = typeof body.error === "string" && body.error !== "" ? body.error : `HTTP ${status}`;
  const code = typeof body.code === "string" ? body.code : "";
  if (code === "invalid_argument" || code === "too_large" || status === 400) return invalidFromMessage(msg);
  if (code === "unauthorized" || code === "scope_required" || status === 401 || status === 403) {
    return new UnauthenticatedError(`sluice: ${msg}`);
  }
  if (code === "not_found" || status === 404) return new PolicyNotFoundError(`sluice: ${msg}`);
  if (code === "unimplemented" || status === 501) return new OperationNotSupportedError(`sluice: ${msg}`);
  if (code === "unavailable" || status >= 500) {
    return new ServiceUnavailableError(`sluice: ${msg}`, body.failMode === "closed" ? { failMode: "closed" } : {});
  }
  return new SluiceError(`sluice: HTTP ${status} ${code}: ${msg}`);
}

/** withNow adds now to a body when the caller pinned an instant: the API refuses now: 0. */
function withNow(body: Body, opts: CallOptions): Body {
  return opts.now === undefined ? body : { ...body, now: opts.now };
}

/**
 * HttpBackend asks a `sluice serve` over its HTTP JSON API (its --http address, such as
 * "http://127.0.0.1:8080"). Each call is bounded by timeoutMs. Bad input is refused locally, as
 * the Go library refuses it, before anything is sent.
 */
export class HttpBackend implements Backend {
  private readonly base: string;
  private readonly headers: Record<string, string>;
  private readonly timeoutMs: number;
  private readonly fail: FailPolicy;

  constructor(baseUrl: string, opts: DoorOptions = {}) {
    const u = new URL(baseUrl);
    if (u.protocol !== "http:" && u.protocol !== "https:") {
      throw new SluiceError(`sluice: base URL ${baseUrl}: want http:// or https://`);
    }
    this.base = baseUrl.replace(/\/+$/, "");
    this.headers = { "content-type": "application/json", accept: "application/json" };
    if (opts.token !== undefined && opts.token !== "") this.headers.authorization = `Bearer ${opts.token}`;
    this.timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.fail = new FailPolicy(opts.failMode ?? "closed");
  }

  /** check consumes cost (1 by default) for key under policy. */
  async check(policy: string, key: string, cost = 1, opts: CallOptions = {}): Promise<Decision> {
    checkKey("key", key);
    checkCost("cost", cost);
    checkNow(opts.now);
    try {
      return decisionFromJSON(await this.post("/v1/check", withNow({ policy, key, cost }, opts)));
    } catch (err) {
      return this.fail.one(err);
    }
  }

  /** checkMany checks each key independently under policy, all at one instant. */
  async checkMany(policy: string, keys: readonly string[], cost = 1, opts: CallOptions = {}): Promise<Decision[]> {
    keys.forEach((k, i) => checkKey(`keys[${i}]`, k));
    checkCost("cost", cost);
    checkNow(opts.now);
    try {
      const res = await this.post("/v1/check-many", withNow({ policy, keys, cost }, opts));
      const ds = (res.decisions as Body[] | undefined) ?? [];
      if (ds.length !== keys.length) {
        throw new SluiceError(`sluice: /v1/check-many answered ${ds.length} decisions for ${keys.length} keys`);
      }
      return ds.map(decisionFromJSON);
    } catch (err) {
      return this.fail.many(err, keys.length);
    }
  }

  /**
   * checkAll checks every item together, all or nothing. The route answers the items' decisions;
   * folding them with combine restores the binding item's numbers, as the gRPC door answers them.
   */
  async checkAll(items: readonly Item[], opts: CallOptions = {}): Promise<Decision> {
    checkItems(items);
    checkNow(opts.now);
    const wire = items.map((it) => ({ policy: it.policy, key: it.key, cost: it.cost ?? 1 }));
    let res: Body;
    try {
      res = await this.post("/v1/check-all", withNow({ items: wire }, opts));
    } catch (err) {
      return this.fail.one(err, items.length);
    }
    const parts = ((res.decisions as Body[] | undefined) ?? []).map(decisionFromJSON);
    const d = combine(parts);
    const allowed = Boolean(res.allowed);
    return Object.freeze({
      ...d,
      allowed,
      deniedBy: allowed ? -1 : Number(res.deniedBy ?? d.deniedBy),
      failOpen: d.failOpen || Boolean(res.failOpen),
    });
  }

  /** peek reports key's state without consuming; it has no fail mode. */
  async peek(policy: string, key: string, opts: CallOptions = {}): Promise<Decision> {
    checkKey("key", key);
    checkNow(opts.now);
    return decisionFromJSON(await this.post("/v1/peek", withNow({ policy, key }, opts)));
  }

  /** forecast projects key's capacity for checks of cost without consuming. */
  async forecast(policy: string, key: string, cost = 1, opts: CallOptions = {}): Promise<Forecast> {
    checkKey("key", key);
    checkCost("cost", cost);
    checkNow(opts.now);
    return forecastFromJSON(await this.post("/v1/forecast", withNow({ policy, key, cost }, opts)));
  }

  /** refund gives cost units back to key, never past a limit's ceiling. */
  async refund(policy: string, key: string, cost = 1, opts: CallOptions = {}): Promise<void> {
    checkKey("key", key);
    checkCost("cost", cost);
    checkNow(opts.now);
    await this.post("/v1/refund", withNow({ policy, key, cost }, opts));
  }

  /** reset forgets key under policy. */
  async reset(policy: string, key: string): Promise<void> {
    checkKey("key", key);
    await this.post("/v1/reset", { policy, key });
  }

  /** close does nothing: fetch keeps no connection of this backend's own. */
  async close(): Promise<void> {}

  /**
   * post sends body to path and reads the JSON answer; an answer not 2xx is its typed error, and
   * no answer (refused, reset, timed out) is ServiceUnavailableError.
   */
  private async post(path: string, body: Body): Promise<Body> {
    let resp: Response;
    try {
      resp = await fetch(this.base + path, {
        method: "POST",
        headers: this.headers,
        body: JSON.stringify(body),
        signal: AbortSignal.timeout(this.timeoutMs),
      });
    } catch (err) {
      throw new ServiceUnavailableError(`sluice: ${path}: ${describe(err)}`, { cause: err });
    }
    const text = await resp.text().catch(() => "");
    const parsed = parse(text);
    if (!resp.ok) throw errorFromResponse(resp.status, parsed ?? {});
    if (parsed === undefined) throw new SluiceError(`sluice: ${path}: the answer is not a JSON object`);
    return parsed;
  }
}

/** parse reads a JSON object, or undefined for anything else (a proxy's HTML page, say). */
function parse(text: string): Body | undefined {
  try {
    const v: unknown = JSON.parse(text);
    return typeof v === "object" && v !== null && !Array.isArray(v) ? (v as Body) : undefined;
  } catch {
    return undefined;
  }
}

/** describe is the text of a fetch failure, with its cause (ECONNREFUSED, a timeout). */
function describe(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const cause = err.cause instanceof Error ? `: ${err.cause.message}` : "";
  return `${err.message}${cause}`;
}
