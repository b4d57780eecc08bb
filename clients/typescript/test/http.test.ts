// HttpBackend (HTTP JSON) held to the doors' shared suite (serve.ts), and its reading of answers
// that are not the API's.

import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { test } from "node:test";

import { HttpBackend, ServiceUnavailableError, SluiceError } from "../src/index.js";
import { doorSuite } from "./serve.js";

/** answering starts an HTTP server that answers every request with status and body. */
async function answering(status: number, body: string): Promise<{ port: number; stop: () => Promise<void> }> {
  const srv: Server = createServer((_req, res) => {
    res.writeHead(status, { "content-type": "application/json" });
    res.end(body);
  });
  await new Promise<void>((resolve) => srv.listen(0, "127.0.0.1", resolve));
  return {
    port: (srv.address() as AddressInfo).port,
    stop: () => new Promise((resolve) => srv.close(() => resolve())),
  };
}

doorSuite({
  name: "HttpBackend",
  make: (serve, opts) => new HttpBackend(serve.httpUrl, opts),
  at: (port, opts) => new HttpBackend(`http://127.0.0.1:${port}`, opts),
  unimplemented: () => answering(501, JSON.stringify({ error: "sluice: operation not supported", code: "unimplemented" })),
});

test("a proxy's 502 page is ServiceUnavailableError, and fails open when asked", async () => {
  const srv = await answering(502, "<html>bad gateway</html>");
  try {
    const closed = new HttpBackend(`http://127.0.0.1:${srv.port}`);
    await assert.rejects(closed.check("p", "k"), ServiceUnavailableError);
    const open = new HttpBackend(`http://127.0.0.1:${srv.port}`, { failMode: "open" });
    assert.equal((await open.check("p", "k")).failOpen, true);
  } finally {
    await srv.stop();
  }
});

test("a timeout is ServiceUnavailableError", async () => {
  const srv = createServer(() => {}); // never answers
  await new Promise<void>((resolve) => srv.listen(0, "127.0.0.1", resolve));
  try {
    const b = new HttpBackend(`http://127.0.0.1:${(srv.address() as AddressInfo).port}`, { timeoutMs: 200 });
    await assert.rejects(b.check("p", "k"), ServiceUnavailableError);
  } finally {
    srv.closeAllConnections();
    await new Promise((resolve) => srv.close(resolve));
  }
});

test("a base URL must be http or https", () => {
  assert.throws(() => new HttpBackend("ftp://127.0.0.1"), SluiceError);
});
