// rateLimit: a middleware for Node's http handlers and Express-style (req, res, next) stacks that
// checks every request under one policy, as Go's middleware.Limit does without a policy at hand.

import type { IncomingMessage, ServerResponse } from "node:http";

import { ServiceUnavailableError } from "./errors.js";
import type { Checker, Decision } from "./types.js";
import { MAX_KEY_LEN } from "./util.js";

/** The header that says a request went through (open) or was turned away (closed) unchecked. */
export const FAIL_MODE_HEADER = "Sluice-Fail-Mode";

/** Options of rateLimit. */
export interface RateLimitOptions {
  /**
   * What a request spends from: a function of the request, or the name of a header whose value is
   * the key. By default the client address, req.socket.remoteAddress.
   */
  readonly key?: string | ((req: IncomingMessage) => string);
  /** What a request costs; 1 by default. */
  readonly cost?: (req: IncomingMessage) => number;
  /** The w parameter of RateLimit-Policy, in seconds (rounded to the nearest, at least 1); none by default. */
  readonly window?: number;
  /** Answers a request whose key could not be found or whose check failed; see defaultOnError. */
  readonly onError?: (err: unknown, req: IncomingMessage, res: ServerResponse) => void;
}

/** Continues the stack; Express passes an error to it, Node's http handlers a plain function. */
export type Next = (err?: unknown) => void;

/** The middleware rateLimit returns: it answers a denial itself and calls next otherwise. */
export type RateLimitMiddleware = (req: IncomingMessage, res: ServerResponse, next: Next) => Promise<void>;

/** NoKeyError means a request carries nothing to key it by; defaultOnError answers it 400. */
export class NoKeyError extends Error {
  override name = "NoKeyError";
}

/** OnePolicy is a backend of one policy, its policyName, asked check(key, cost): a RedisBackend. */
export interface OnePolicy {
  readonly policyName: string;
  check(key: string, cost: number): Promise<Decision>;
}

/**
 * rateLimit checks every request under policy before next sees it: through a Checker (the service's
 * doors), or a OnePolicy backend (RedisBackend), which holds its policy. Every answer carries the IETF
 * RateLimit fields of the decision, as one item named after the policy:
 *
 *     RateLimit-Policy: "<policy>";q=<limit>[;w=<window>]
 *     RateLimit: "<policy>";r=<remaining>;t=<seconds until resetAt, rounded up>
 *
 * A denial is answered 429 with Retry-After (its retry in seconds, rounded up, at least 1) and an
 * RFC 9457 problem+json body, and never reaches next. A fail-open decision (no limit consulted)
 * goes through with Sluice-Fail-Mode: open and no RateLimit fields.
 */
export function rateLimit(backend: Checker | OnePolicy, policy: string, opts: RateLimitOptions = {}): RateLimitMiddleware {
  if (!backend || typeof backend.check !== "function" || policy === "") {
    throw new TypeError("rateLimit needs a backend and a policy");
  }
  const check = "policyName" in backend
    ? (_policy: string, key: string, cost: number) => backend.check(key, cost)
    : (backend as Checker).check.bind(backend);
  const keyOf = keyFunc(opts.key);
  const onError = opts.onError ?? defaultOnError;
  return async (req, res, next) => {
    let d: Decision;
    try {
      d = await check(policy, keyOf(req), opts.cost?.(req) ?? 1);
    } catch (err) {
      onError(err, req, res);
      return;
    }
    if (d.failOpen && d.allowed) {
      res.setHeader(FAIL_MODE_HEADER, "open");
      next();
      return;
    }
    setHeaders(res, policy, opts.window ?? 0, d, Date.now());
    if (!d.allowed) {
      writeDenied(res, policy, d);
      return;
    }
    next();
  };
}

/** keyFunc is the key of a request: by function, by header name, or by the client address. */
function keyFunc(key: RateLimitOptions["key"]): (req: IncomingMessage) => string {
  if (typeof key === "function") return key;
  if (typeof key === "string") {
    const name = key.toLowerCase();
    return (req) => {
      const v = req.headers[name];
      const s = Array.isArray(v) ? v[0] : v;
      if (s === undefined || s === "") throw new NoKeyError(`middleware: no ${key} header`);
      if (Buffer.byteLength(s) > MAX_KEY_LEN) throw new NoKeyError(`middleware: the ${key} header is longer than ${MAX_KEY_LEN} bytes`);
      return s;
    };
  }
  return (req) => {
    const addr = req.socket.remoteAddress;
    if (addr === undefined || addr === "") throw new NoKeyError("middleware: no client address");
    return addr;
  };
}

/**
 * setHeaders sets RateLimit-Policy and RateLimit for decision d of policy taken at now (epoch ms),
 * and Retry-After on a denial, as Go's middleware.SetHeaders; a decision that knows no limit
 * (limit 0) sets nothing.
 */
export function setHeaders(res: ServerResponse, policy: string, window: number, d: Decision, now: number): void {
  if (d.limit <= 0) return;
  const name = quote(policy);
  const w = window > 0 ? `;w=${Math.max(Math.round(window), 1)}` : "";
  res.setHeader("RateLimit-Policy", `${name};q=${Math.max(d.limit, 0)}${w}`);
  res.setHeader("RateLimit", `${name};r=${Math.max(d.remaining, 0)};t=${ceilSeconds(d.resetAt - now)}`);
  if (d.allowed) res.removeHeader("Retry-After");
  else res.setHeader("Retry-After", retryAfter(d));
}

/** retryAfter is the Retry-After value of a denial: its retry in seconds, rounded up, at least 1. */
export function retryAfter(d: Decision): string {
  return String(Math.max(ceilSeconds(d.retryAfterMs), 1));
}

/** ceilSeconds is ms in whole seconds, rounded up; 0 when not positive. */
function ceilSeconds(ms: number): number {
  return ms > 0 ? Math.ceil(ms / 1000) : 0;
}

/**
 * quote writes s as a structured-field string (RFC 8941): '"' and '\' escaped, and every byte of
 * its UTF-8 that is not printable ASCII sent as '?'.
 */
export function quote(s: string): string {
  let out = '"';
  for (const c of Buffer.from(s, "utf8")) {
    if (c === 0x22 || c === 0x5c) out += "\\" + String.fromCharCode(c);
    else if (c < 0x20 || c > 0x7e) out += "?";
    else out += String.fromCharCode(c);
  }
  return out + '"';
}

/** The RFC 9457 body of the middleware's answers. */
interface Problem {
  type: string;
  title: string;
  status: number;
  detail: string;
  retryAfterMs?: number;
}

function writeDenied(res: ServerResponse, policy: string, d: Decision): void {
  writeProblem(res, {
    type: "about:blank",
    title: "Too Many Requests",
    status: 429,
    detail: `rate limit ${JSON.stringify(policy)} exceeded; retry in ${retryAfter(d)} s`,
    retryAfterMs: d.retryAfterMs,
  });
}

function writeProblem(res: ServerResponse, p: Problem): void {
  res.setHeader("Content-Type", "application/problem+json");
  res.setHeader("X-Content-Type-Options", "nosniff");
  res.removeHeader("Content-Length");
  res.statusCode = p.status;
  res.end(JSON.stringify(p) + "\n");
}

/**
 * defaultOnError answers a request that could not be checked, as Go's middleware.DefaultOnError:
 * 400 when it carries nothing to key it by, 503 with Retry-After: 1 and Sluice-Fail-Mode: closed
 * when the limiter is unavailable, 500 for anything else (bad input and an unknown policy are the
 * server's configuration at fault). The body never carries the error's text.
 */
export function defaultOnError(err: unknown, _req: IncomingMessage, res: ServerResponse): void {
  if (err instanceof NoKeyError) {
    writeProblem(res, { type: "about:blank", title: "Bad Request", status: 400, detail: "the request carries nothing to rate-limit it by" });
  } else if (err instanceof ServiceUnavailableError) {
    res.setHeader("Retry-After", "1");
    res.setHeader(FAIL_MODE_HEADER, "closed");
    writeProblem(res, { type: "about:blank", title: "Service Unavailable", status: 503, detail: "the rate limiter is unavailable" });
  } else {
    writeProblem(res, { type: "about:blank", title: "Internal Server Error", status: 500, detail: "the rate limit could not be checked" });
  }
}
