// Copies what the package shares with the Go code into it before every build, so that a packed
// tarball carries it: the repository's one definition of the gRPC API, proto/sluice/v1/sluice.proto
// (read by src/service.ts), into proto/sluice/v1/, and the Go Redis store's Lua scripts,
// store/redis/lua/*.lua (run by src/redis.ts), into lua/. The copies are not committed
// (.gitignore): the repository's files stay the only source. Outside the repository (an unpacked
// tarball), the copies already there are kept.
import { copyFileSync, existsSync, mkdirSync, readdirSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const pkg = join(dirname(fileURLToPath(import.meta.url)), "..");
const repo = join(pkg, "..", "..");

/** copy replaces dir `to` with the files of `from` that keep(name) accepts. */
function copy(from, to, keep) {
  if (!existsSync(from)) {
    if (existsSync(to)) return;
    console.error(`copy-shared: neither ${from} nor ${to} exists`);
    process.exit(1);
  }
  rmSync(to, { recursive: true, force: true });
  mkdirSync(to, { recursive: true });
  for (const name of readdirSync(from).filter(keep)) copyFileSync(join(from, name), join(to, name));
}

copy(join(repo, "proto", "sluice", "v1"), join(pkg, "proto", "sluice", "v1"), (n) => n === "sluice.proto");
copy(join(repo, "store", "redis", "lua"), join(pkg, "lua"), (n) => n.endsWith(".lua"));
