// ServiceBackend: sluice's limiter over the native gRPC API of `sluice serve`
// (sluice.v1.RateLimiter), loaded at run time from the repository's proto/sluice/v1/sluice.proto.

import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";

import {
  OperationNotSupportedError,
  PolicyNotFoundError,
  ServiceUnavailableError,
  SluiceError,
  UnauthenticatedError,
} from "./errors.js";
import {
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

/** Options of a ServiceBackend: the doors' own, and the channel's credentials (insecure by default). */
export interface ServiceOptions extends DoorOptions {
  readonly credentials?: grpc.ChannelCredentials;
}

const here = dirname(fileURLToPath(import.meta.url));

/**
 * protoPath finds sluice.proto: the copy the build puts in the package (proto/, beside dist/),
 * else the repository's own, when the package is used where it lies in the repository.
 */
export function protoPath(): string {
  const rel = join("proto", "sluice", "v1", "sluice.proto");
  const candidates = [join(here, "..", "..", rel), join(here, "..", "..", "..", "..", rel), join(here, "..", rel)];
  const found = candidates.find((p) => existsSync(p));
  if (found === undefined) {
    throw new SluiceError(`sluice: sluice.proto not found; looked at ${candidates.join(", ")}`);
  }
  return found;
}

type Callback = (err: grpc.ServiceError | null, res: Record<string, unknown>) => void;
type Unary = (req: object, md: grpc.Metadata, opts: grpc.CallOptions, cb: Callback) => grpc.ClientUnaryCall;

let ctor: grpc.ServiceClientConstructor | undefined;

/** rateLimiter is the client constructor of sluice.v1.RateLimiter, loaded once per process. */
function rateLimiter(): grpc.ServiceClientConstructor {
  if (ctor === undefined) {
    const def = protoLoader.loadSync(protoPath(), {
      keepCase: false, // camelCase: resetAt, retryAfterMs, as the JSON API names them
      longs: Number, // epoch ms and costs fit in 2^53
      enums: String,
      defaults: true, // a field left at its zero value reads as that value
      oneofs: true,
    });
    const pkg = grpc.loadPackageDefinition(def) as unknown as { sluice: { v1: { RateLimiter: grpc.ServiceClientConstructor } } };
    ctor = pkg.sluice.v1.RateLimiter;
  }
  return ctor;
}

/**
 * errorFromStatus maps a failed call to the typed errors: INVALID_ARGUMENT to InvalidArgumentError
 * (its field read from the message), NOT_FOUND to PolicyNotFoundError, UNIMPLEMENTED to
 * OperationNotSupportedError, UNAUTHENTICATED and PERMISSION_DENIED to UnauthenticatedError, and
 * what says the service could not answer (UNAVAILABLE, DEADLINE_EXCEEDED, INTERNAL, UNKNOWN) to
 * ServiceUnavailableError, failMode "closed" when the server's metadata (header, given apart, or
 * trailers) says so.
 */
export function errorFromStatus(err: grpc.ServiceError, header?: grpc.Metadata): SluiceError {
  const msg = err.details || err.message;
  switch (err.code) {
    case grpc.status.INVALID_ARGUMENT:
      return invalidFromMessage(msg);
    case grpc.status.NOT_FOUND:
      return new PolicyNotFoundError(`sluice: ${msg}`, { cause: err });
    case grpc.status.UNIMPLEMENTED:
      return new OperationNotSupportedError(`sluice: ${msg}`, { cause: err });
    case grpc.status.UNAUTHENTICATED:
    case grpc.status.PERMISSION_DENIED:
      return new UnauthenticatedError(`sluice: ${msg}`, { cause: err });
    case grpc.status.UNAVAILABLE:
    case grpc.status.DEADLINE_EXCEEDED:
    case grpc.status.INTERNAL:
    case grpc.status.UNKNOWN: {
      // The server sends sluice-fail-mode in the header metadata; a trailers-only answer in the trailers.
      const mode = [header, err.metadata].map((md) => md?.get("sluice-fail-mode")[0]);
      const closed = mode.includes("closed");
      return new ServiceUnavailableError(`sluice: ${msg}`, { cause: err, ...(closed ? { failMode: "closed" } : {}) });
    }
    default:
      return new SluiceError(`sluice: ${grpc.status[err.code] ?? err.code}: ${msg}`, { cause: err });
  }
}

/**
 * ServiceBackend asks a `sluice serve` over gRPC (its --grpc address, such as "127.0.0.1:8081").
 * One channel serves every call and reconnects by itself; close() ends it. Each call is bounded by
 * timeoutMs. Bad input is refused locally, as the Go library refuses it, before anything is sent.
 */
export class ServiceBackend implements Backend {
  private readonly client: grpc.Client;
  private readonly metadata: grpc.Metadata;
  private readonly timeoutMs: number;
  private readonly fail: FailPolicy;

  constructor(target: string, opts: ServiceOptions = {}) {
    const Client = rateLimiter();
    this.client = new Client(target, opts.credentials ?? grpc.credentials.createInsecure());
    this.metadata = new grpc.Metadata();
    if (opts.token !== undefined && opts.token !== "") {
      this.metadata.set("authorization", `Bearer ${opts.token}`);
    }
    this.timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.fail = new FailPolicy(opts.failMode ?? "closed");
  }

  /** check consumes cost (1 by default) for key under policy. */
  async check(policy: string, key: string, cost = 1, opts: CallOptions = {}): Promise<Decision> {
    checkKey("key", key);
    checkCost("cost", cost);
    checkNow(opts.now);
    try {
      return decisionFromJSON(await this.call("Check", { policy, key, cost, now: opts.now ?? 0 }));
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
      const res = await this.call("CheckMany", { policy, keys, cost, now: opts.now ?? 0 });
      return ((res.decisions as Record<string, unknown>[] | undefined) ?? []).map(decisionFromJSON);
    } catch (err) {
      return this.fail.many(err, keys.length);
    }
  }

  /** checkAll checks every item together, all or nothing: parts holds one decision per item. */
  async checkAll(items: readonly Item[], opts: CallOptions = {}): Promise<Decision> {
    checkItems(items);
    checkNow(opts.now);
    const wire = items.map((it) => ({ policy: it.policy, key: it.key, cost: it.cost ?? 1 }));
    try {
      return decisionFromJSON(await this.call("CheckAll", { items: wire, now: opts.now ?? 0 }));
    } catch (err) {
      return this.fail.one(err, items.length);
    }
  }

  /** peek reports key's state without consuming; it has no fail mode. */
  async peek(policy: string, key: string, opts: CallOptions = {}): Promise<Decision> {
    checkKey("key", key);
    checkNow(opts.now);
    return decisionFromJSON(await this.call("Peek", { policy, key, now: opts.now ?? 0 }));
  }

  /** forecast projects key's capacity for checks of cost without consuming. */
  async forecast(policy: string, key: string, cost = 1, opts: CallOptions = {}): Promise<Forecast> {
    checkKey("key", key);
    checkCost("cost", cost);
    checkNow(opts.now);
    return forecastFromJSON(await this.call("Forecast", { policy, key, cost, now: opts.now ?? 0 }));
  }

  /** refund gives cost units back to key, never past a limit's ceiling. */
  async refund(policy: string, key: string, cost = 1, opts: CallOptions = {}): Promise<void> {
    checkKey("key", key);
    checkCost("cost", cost);
    checkNow(opts.now);
    await this.call("Refund", { policy, key, cost, now: opts.now ?? 0 });
  }

  /** reset forgets key under policy. */
  async reset(policy: string, key: string): Promise<void> {
    checkKey("key", key);
    await this.call("Reset", { policy, key });
  }

  /** close ends the channel; calls after it fail. */
  async close(): Promise<void> {
    this.client.close();
  }

  /** call makes one unary call, with the token and a deadline, mapping a failure to the typed errors. */
  private call(method: string, req: object): Promise<Record<string, unknown>> {
    const fn = (this.client as unknown as Record<string, Unary>)[method];
    if (fn === undefined) {
      return Promise.reject(new OperationNotSupportedError(`sluice: the proto has no method ${method}`));
    }
    return new Promise((resolve, reject) => {
      const deadline = Date.now() + this.timeoutMs;
      let header: grpc.Metadata | undefined;
      const call = fn.call(this.client, req, this.metadata, { deadline }, (err, res) => {
        if (err) reject(errorFromStatus(err, header));
        else resolve(res);
      });
      call.on("metadata", (md: grpc.Metadata) => (header = md));
    });
  }
}
