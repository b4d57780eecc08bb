-- The coordinator's tables. {{schema}} is the coordinator's schema, quoted. Times are epoch ms,
-- as the callers pass them: the database's clock is never read.

-- Each region's latest report of the demand it observed over one interval, per global limit.
-- A report older than the one stored is ignored.
CREATE TABLE {{schema}}.demand (
  name text NOT NULL,       -- the global limit
  region text NOT NULL,
  demand bigint NOT NULL CHECK (demand >= 0),
  at bigint NOT NULL,       -- when the region reported it
  PRIMARY KEY (name, region)
);

-- The shares a rebalance computed, by the interval boundary from which they hold. A region's
-- share at instant t is its row with the latest effective_at <= t; rows older than the one in
-- force are deleted by the next rebalance. demand is the demand the share was computed from.
CREATE TABLE {{schema}}.shares (
  name text NOT NULL,
  region text NOT NULL,
  effective_at bigint NOT NULL,
  share bigint NOT NULL CHECK (share >= 0),
  demand bigint NOT NULL,
  PRIMARY KEY (name, region, effective_at)
);

-- One row per global limit: the boundary the latest rebalance computed shares for. A rebalance
-- holds this row's lock while it computes and writes, so one region rebalances per interval and
-- the others find the work done.
CREATE TABLE {{schema}}.rounds (
  name text PRIMARY KEY,
  effective_at bigint NOT NULL,
  computed_at bigint NOT NULL,
  computed_by text NOT NULL
);
