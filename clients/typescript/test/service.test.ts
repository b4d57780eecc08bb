// ServiceBackend (gRPC) held to the doors' shared suite (serve.ts), and the loading of its proto.

import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { test } from "node:test";

import * as grpc from "@grpc/grpc-js";

import { ServiceBackend, protoPath } from "../src/index.js";
import { doorSuite } from "./serve.js";

/** emptyServer is a gRPC server with no service: every call is UNIMPLEMENTED. */
async function emptyServer(): Promise<{ port: number; stop: () => Promise<void> }> {
  const srv = new grpc.Server();
  const port = await new Promise<number>((resolve, reject) =>
    srv.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
  );
  return { port, stop: () => new Promise((resolve) => srv.tryShutdown(() => resolve())) };
}

doorSuite({
  name: "ServiceBackend",
  make: (serve, opts) => new ServiceBackend(serve.grpcTarget, opts),
  at: (port, opts) => new ServiceBackend(`127.0.0.1:${port}`, opts),
  unimplemented: emptyServer,
});

test("the proto is the package's copy of the repository's", () => {
  const p = protoPath();
  assert.ok(existsSync(p));
  assert.match(p, /proto[/\\]sluice[/\\]v1[/\\]sluice\.proto$/);
});

test("a bad failMode is refused", () => {
  assert.throws(() => new ServiceBackend("127.0.0.1:1", { failMode: "sideways" as "open" }), /failMode/);
});
