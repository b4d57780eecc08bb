-- The stream engine's tables. {{schema}} is the engine's schema, quoted.

-- The input log. Offsets are taken under a per-stream advisory lock held until commit (see
-- Append), so within a stream they become visible in increasing order and a reader that has seen
-- offset n will never see a smaller one appear later.
CREATE TABLE {{schema}}.log (
  "offset" bigserial PRIMARY KEY,
  at bigint NOT NULL,      -- event time, epoch ms
  cost bigint NOT NULL,
  stream text NOT NULL,
  key text NOT NULL,
  id text                  -- idempotency key, unique per stream when set
);
CREATE INDEX log_stream_offset ON {{schema}}.log (stream, "offset") INCLUDE (key, cost, at);
CREATE UNIQUE INDEX log_stream_id ON {{schema}}.log (stream, id) WHERE id IS NOT NULL;

-- One row per named query: its definition, the log offset it consumed through, and the scalar
-- part of its aggregator state. run changes when a name is reset, so outputs of an earlier run
-- never collide with the new one's.
CREATE TABLE {{schema}}.queries (
  name text PRIMARY KEY,
  run bigserial NOT NULL,
  stream text NOT NULL,
  window_ms bigint NOT NULL,
  grace_ms bigint NOT NULL,
  idle_flush_ms bigint NOT NULL,
  quota bigint NOT NULL,
  "offset" bigint NOT NULL DEFAULT 0,
  horizon bigint NOT NULL,
  max_at bigint NOT NULL,
  late bigint NOT NULL DEFAULT 0,
  late_sum bigint NOT NULL DEFAULT 0
);

-- Windows still open, one row per query, key and window start.
CREATE TABLE {{schema}}.open_windows (
  query text NOT NULL,
  key text NOT NULL,
  start bigint NOT NULL,
  "end" bigint NOT NULL,
  count bigint NOT NULL,
  sum bigint NOT NULL,
  PRIMARY KEY (query, key, start)
);
CREATE INDEX open_windows_end ON {{schema}}.open_windows (query, "end");

-- Outputs. Offsets are taken under a per-stream advisory lock, as the log's are. The unique
-- constraints make a second emission of a window an error rather than a double count.
CREATE TABLE {{schema}}.windows (
  "offset" bigserial PRIMARY KEY,
  run bigint NOT NULL,
  start bigint NOT NULL,
  "end" bigint NOT NULL,
  count bigint NOT NULL,
  sum bigint NOT NULL,
  stream text NOT NULL,
  query text NOT NULL,
  key text NOT NULL,
  UNIQUE (run, key, start)
);
CREATE INDEX windows_stream_offset ON {{schema}}.windows (stream, "offset");

CREATE TABLE {{schema}}.decisions (
  "offset" bigserial PRIMARY KEY,
  run bigint NOT NULL,
  window_start bigint NOT NULL,
  window_end bigint NOT NULL,
  count bigint NOT NULL,
  quota bigint NOT NULL,
  over_by bigint NOT NULL,
  stream text NOT NULL,
  query text NOT NULL,
  key text NOT NULL,
  UNIQUE (run, key, window_start)
);
CREATE INDEX decisions_stream_offset ON {{schema}}.decisions (stream, "offset");
