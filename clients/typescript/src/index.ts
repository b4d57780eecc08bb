// @sluicehq/sluice: clients of sluice's limiter. Every door (gRPC, HTTP JSON, Redis) is a Backend
// answering the same Decision for the same checks, and throwing the same typed errors.

export * from "./errors.js";
export * from "./types.js";
export { MAX_KEY_LEN, DEFAULT_TIMEOUT_MS, type DoorOptions } from "./util.js";
export { ServiceBackend, errorFromStatus, protoPath, type ServiceOptions } from "./service.js";
export { HttpBackend, errorFromResponse } from "./http.js";
export * from "./middleware.js";
// The Redis door: src/redis.ts and src/strategies.ts (another engineer's, not yet in the tree) will
// be exported here with `export * from "./strategies.js"; export { RedisBackend } from "./redis.js";`.
