// A `sluice serve` of this repository for the tests: built from the Go code (go build), started on
// free loopback ports with --allow-client-time, and stopped after. The Redis door's tests import
// it as well.

import { spawn, execFileSync, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

/** repoRoot is the sluice module's root: the first directory up from here whose go.mod is sluice's. */
export function repoRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const mod = join(dir, "go.mod");
    if (existsSync(mod) && readFileSync(mod, "utf8").startsWith("module github.com/sluicehq/sluice\n")) return dir;
    const up = dirname(dir);
    if (up === dir) throw new Error("serve: the sluice repository is not above this package");
    dir = up;
  }
}

let built: string | undefined;

/** buildSluice builds cmd/sluice into a temporary directory, once per process, and returns its path. */
export function buildSluice(): string {
  if (built === undefined) {
    const out = join(mkdtempSync(join(tmpdir(), "sluice-ts-bin-")), "sluice");
    execFileSync("go", ["build", "-o", out, "./cmd/sluice"], { cwd: repoRoot(), stdio: "inherit" });
    built = out;
  }
  return built;
}

/** freePort is a loopback TCP port nothing listens on now. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const addr = srv.address();
      const port = typeof addr === "object" && addr !== null ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

export interface ServeOptions {
  /** The config, written as JSON (a YAML document); policies at least. */
  readonly config: Record<string, unknown>;
  /** Lines of a bearer token file (--auth-token-file); none by default. */
  readonly tokens?: readonly string[];
  /** Wait for /healthz rather than /readyz: for a store that is meant not to answer. */
  readonly healthOnly?: boolean;
  /** More arguments for sluice serve. */
  readonly args?: readonly string[];
}

/** A running sluice serve. */
export interface Serve {
  /** The HTTP JSON API's base URL, such as http://127.0.0.1:41234. */
  readonly httpUrl: string;
  /** The gRPC address, such as 127.0.0.1:41235. */
  readonly grpcTarget: string;
  /** What the process wrote to stderr so far. */
  readonly log: () => string;
  /** Stops the process (SIGTERM, then SIGKILL) and removes its directory. */
  readonly stop: () => Promise<void>;
}

/** startServe starts sluice serve with opts' config on free ports and waits until it is ready. */
export async function startServe(opts: ServeOptions): Promise<Serve> {
  const bin = buildSluice();
  const dir = mkdtempSync(join(tmpdir(), "sluice-ts-serve-"));
  const cfg = join(dir, "sluice.yaml");
  writeFileSync(cfg, JSON.stringify(opts.config, null, 1));
  const [httpPort, grpcPort] = [await freePort(), await freePort()];
  const args = ["serve", "--config", cfg, "--allow-client-time", "--http", `127.0.0.1:${httpPort}`, "--grpc", `127.0.0.1:${grpcPort}`];
  if (opts.tokens !== undefined) {
    const file = join(dir, "tokens");
    writeFileSync(file, opts.tokens.join("\n") + "\n");
    args.push("--auth-token-file", file);
  }
  args.push(...(opts.args ?? []));
  const proc = spawn(bin, args, { stdio: ["ignore", "ignore", "pipe"] });
  let log = "";
  proc.stderr?.on("data", (b: Buffer) => (log += b.toString()));
  const httpUrl = `http://127.0.0.1:${httpPort}`;
  const stop = () => stopProc(proc).finally(() => rmSync(dir, { recursive: true, force: true }));
  try {
    await waitReady(proc, `${httpUrl}${opts.healthOnly ? "/healthz" : "/readyz"}`, () => log);
  } catch (err) {
    await stop();
    throw err;
  }
  return { httpUrl, grpcTarget: `127.0.0.1:${grpcPort}`, log: () => log, stop };
}

/** waitReady polls url until it answers 200, for 30 s at most, failing early if proc exits. */
async function waitReady(proc: ChildProcess, url: string, log: () => string): Promise<void> {
  const until = Date.now() + 30_000;
  while (Date.now() < until) {
    if (proc.exitCode !== null) throw new Error(`sluice serve exited ${proc.exitCode}:\n${log()}`);
    try {
      const r = await fetch(url, { signal: AbortSignal.timeout(1000) });
      if (r.status === 200) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`sluice serve not ready at ${url} after 30 s:\n${log()}`);
}

/** stopProc ends proc with SIGTERM, or SIGKILL after 5 s, and resolves when it has exited. */
function stopProc(proc: ChildProcess): Promise<void> {
  if (proc.exitCode !== null || proc.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const kill = setTimeout(() => proc.kill("SIGKILL"), 5000);
    proc.once("exit", () => {
      clearTimeout(kill);
      resolve();
    });
    proc.kill("SIGTERM");
  });
}
