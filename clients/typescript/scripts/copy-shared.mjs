// Copies the repository's one definition of the API, proto/sluice/v1/sluice.proto, into this
// package (proto/sluice/v1/sluice.proto) before every build, so that a packed tarball carries it.
// The copy is not committed (.gitignore): the repository's file stays the only source.
import { copyFileSync, existsSync, mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const pkg = join(dirname(fileURLToPath(import.meta.url)), "..");
const from = join(pkg, "..", "..", "proto", "sluice", "v1", "sluice.proto");
const to = join(pkg, "proto", "sluice", "v1", "sluice.proto");

if (existsSync(from)) {
  mkdirSync(dirname(to), { recursive: true });
  copyFileSync(from, to);
} else if (!existsSync(to)) {
  console.error(`copy-proto: neither ${from} nor ${to} exists`);
  process.exit(1);
}
