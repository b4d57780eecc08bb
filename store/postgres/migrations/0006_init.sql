-- The store's tables, index and types: the squash of migrations 1 to 6 of the builds before
-- functions.sql, applied only to a new schema and recorded as versions 1 to 6 (package
-- internal/pgmigrate), so a schema those migrations made is up to date without it. The functions
-- are functions.sql's. {{schema}} is the store's schema, quoted.

-- One row per limit of a policy and key. Columns are ordered for packing (8-byte and 2-byte
-- fixed-width first, then the short varlenas, which need no alignment): a GCRA row is the 24-byte
-- tuple header, 39 bytes, and its policy and key with a byte of length each (83 bytes for a
-- 2-byte policy and a 16-byte key); a two-number state adds 8.
-- fillfactor leaves room on each page for the next version of a row: an update that changes no
-- indexed column (see idle_at) is then HOT, writing no index entry.
CREATE TABLE {{schema}}.limits (
  idle_at bigint NOT NULL,  -- epoch ms after which the row decides like a fresh key (rounded up)
  i smallint NOT NULL,      -- the limit's index in its policy
  policy text NOT NULL,
  key text NOT NULL,
  state float8[] NOT NULL,  -- '{}' is a fresh key; see each strategy's function (functions.sql)
  PRIMARY KEY (policy, key, i)
) WITH (fillfactor = 80);

-- The sweep finds idle rows through this index. idle_at is stored rounded up (decide's round_ms)
-- and kept while it is still late enough, so a busy row changes it once per rounding step and
-- every other update stays HOT.
CREATE INDEX limits_idle_at ON {{schema}}.limits (idle_at);

-- A row's state while decide works on it: PL/pgSQL has no arrays of arrays.
CREATE TYPE {{schema}}.state AS (v float8[]);

-- Concurrency limits (sluice.Concurrency): a row per lease, a holder's slot of a name and key until
-- expires_at. slot identifies the name and key: sha256 of the name's length (8 bytes, big-endian),
-- the name and the key, computed by the store. A name, a key and a holder can each be 1024 bytes,
-- more than one btree entry holds together (2704 bytes); the digest keeps the primary key small,
-- and its first 8 bytes are the key's advisory lock. name and key are kept for people reading the
-- table. expires_at is indexed for the sweep, which deletes expired leases as it deletes idle
-- limits.
CREATE TABLE {{schema}}.leases (
  expires_at bigint NOT NULL, -- epoch ms; the lease holds while the clock is before it
  slot bytea NOT NULL,
  holder text NOT NULL,
  name text NOT NULL,
  key text NOT NULL,
  PRIMARY KEY (slot, holder)
);

CREATE INDEX leases_expires_at ON {{schema}}.leases (expires_at);

