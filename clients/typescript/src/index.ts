// @sluicehq/sluice: clients of sluice's limiter. Every door answers the same Decision for the same
// checks and throws the same typed errors: ServiceBackend (gRPC) and HttpBackend (HTTP JSON) are
// Backends of a sluice serve, naming the policy on each call; RedisBackend decides one policy's
// checks in the Go store's Redis itself.

export * from "./errors.js";
export * from "./types.js";
export { MAX_KEY_LEN, DEFAULT_TIMEOUT_MS, type DoorOptions } from "./util.js";
export { ServiceBackend, errorFromStatus, protoPath, type ServiceOptions } from "./service.js";
export { HttpBackend, errorFromResponse } from "./http.js";
export * from "./middleware.js";
// The Redis door: the Go store's own Lua scripts run on its own keys, and the strategies it takes.
export * from "./strategies.js";
export { RedisBackend } from "./redis.js";
