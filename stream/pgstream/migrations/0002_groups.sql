-- Consumer groups: outputs carry the partition of their key, and groups keep an offset and a
-- lease per partition. {{schema}} is the engine's schema, quoted.

-- The partition of a key, as stream.Partition computes it in Go (FNV-1a 32 of the key's UTF-8
-- bytes, xor-folded to 4 bits), to backfill the outputs emitted before this migration. The
-- engine computes the partition of new outputs in Go; the function is dropped below, so there is
-- one definition in use. h stays under 2^32 before each multiplication, so bigint holds it.
CREATE FUNCTION {{schema}}.key_partition(key text) RETURNS smallint
LANGUAGE plpgsql IMMUTABLE STRICT AS $$
DECLARE
  b bytea := convert_to(key, 'UTF8');
  h bigint := 2166136261;
BEGIN
  FOR i IN 0 .. length(b) - 1 LOOP
    h := ((h # get_byte(b, i)) * 16777619) & 4294967295;
  END LOOP;
  h := h # (h >> 16);
  h := h # (h >> 8);
  h := h # (h >> 4);
  RETURN h & 15;
END
$$;

-- The backfill: adding the column as generated has PostgreSQL compute it while it rewrites each
-- table once, in bulk (several times faster than an UPDATE of every row, which also leaves every
-- old row dead); DROP EXPRESSION (PostgreSQL 13 and later) then makes it a plain column that the
-- engine fills. The rewrite holds the table's lock for the migration's transaction, so readers
-- and processors wait: schedule the upgrade of a large table. NOT NULL makes a processor of an
-- older build still running fail its Process (the transaction rolls back, nothing is lost)
-- instead of emitting outputs no group would ever see.
ALTER TABLE {{schema}}.windows ADD COLUMN part smallint NOT NULL
  GENERATED ALWAYS AS ({{schema}}.key_partition(key)) STORED CHECK (part BETWEEN 0 AND 15);
ALTER TABLE {{schema}}.windows ALTER COLUMN part DROP EXPRESSION;
CREATE INDEX windows_stream_part_offset ON {{schema}}.windows (stream, part, "offset");

ALTER TABLE {{schema}}.decisions ADD COLUMN part smallint NOT NULL
  GENERATED ALWAYS AS ({{schema}}.key_partition(key)) STORED CHECK (part BETWEEN 0 AND 15);
ALTER TABLE {{schema}}.decisions ALTER COLUMN part DROP EXPRESSION;
CREATE INDEX decisions_stream_part_offset ON {{schema}}.decisions (stream, part, "offset");

DROP FUNCTION {{schema}}.key_partition(text);

-- A consumer group's state of one output (kind: the table) of one stream, per partition: the
-- offset it committed through, and at most one lease. expires_at is epoch ms by the database
-- clock; the lease is live while the clock is below it. upto is the offset of the leased batch's
-- last item, the most an Ack may commit. Pull creates a group's rows on first use.
CREATE TABLE {{schema}}.group_parts (
  grp text NOT NULL,
  stream text NOT NULL,
  kind text NOT NULL CHECK (kind IN ('windows', 'decisions')),
  part smallint NOT NULL CHECK (part BETWEEN 0 AND 15),
  committed bigint NOT NULL DEFAULT 0,
  lease text,
  consumer text,
  expires_at bigint,
  upto bigint,
  PRIMARY KEY (grp, stream, kind, part),
  CHECK ((lease IS NULL) = (expires_at IS NULL) AND (lease IS NULL) = (upto IS NULL))
);
