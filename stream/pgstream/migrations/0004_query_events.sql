-- How many events of its stream a query has consumed, for a per-stream count: "offset" is a
-- position in the log that all streams share. Backfilled from the log for existing queries.
ALTER TABLE {{schema}}.queries ADD COLUMN events bigint NOT NULL DEFAULT 0;
UPDATE {{schema}}.queries q SET events = (SELECT count(*) FROM {{schema}}.log l WHERE l.stream = q.stream AND l."offset" <= q."offset");
