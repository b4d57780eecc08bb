-- Concurrency limits (sluice.Concurrency): a row per lease, a holder's slot of a name and key until
-- expires_at. {{schema}} is the store's schema, quoted.

-- slot identifies the name and key: sha256 of the name's length (8 bytes, big-endian), the name and
-- the key, computed by the store. A name, a key and a holder can each be 1024 bytes, more than one
-- btree entry holds together (2704 bytes); the digest keeps the primary key small, and its first
-- 8 bytes are the key's advisory lock. name and key are kept for people reading the table.
-- expires_at is indexed for the sweep, which deletes expired leases as it deletes idle limits.
CREATE TABLE {{schema}}.leases (
  expires_at bigint NOT NULL, -- epoch ms; the lease holds while the clock is before it
  slot bytea NOT NULL,
  holder text NOT NULL,
  name text NOT NULL,
  key text NOT NULL,
  PRIMARY KEY (slot, holder)
);

CREATE INDEX leases_expires_at ON {{schema}}.leases (expires_at);

-- admit decides an Admit in one statement and returns {allowed, in flight, retry after ms}.
--
-- Admits of one key take turns on a transaction-scoped advisory lock (lock_id, the slot's first 8
-- bytes), so that pruning, counting and inserting are one step: two Admits never both count the
-- same free slot. Heartbeat and Release take only their row's lock. The clock is read once the lock
-- is held, as decide reads it once its rows are locked. Each statement below sees what the Admits
-- before this one committed: the function is volatile, and under READ COMMITTED every statement
-- takes a new snapshot. A Release not yet committed still counts: a race denies, never over-admits.
-- Under REPEATABLE READ or SERIALIZABLE (a default_transaction_isolation set on the database or the
-- role) the count would be as of the statement's start, before the lock: admit refuses to decide.
CREATE FUNCTION {{schema}}.admit(slot_id bytea, lock_id bigint, name_ text, key_ text, holder_ text,
  lim bigint, ttl bigint, now_ms bigint, wait_ms bigint)
RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
  n bigint;
  cnt bigint;
  earliest bigint;
BEGIN
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'sluice: concurrency limits need READ COMMITTED, not %', current_setting('transaction_isolation')
      USING ERRCODE = 'feature_not_supported';
  END IF;
  IF wait_ms > 0 THEN
    PERFORM set_config('lock_timeout', wait_ms || 'ms', true);
  END IF;
  PERFORM pg_advisory_xact_lock(lock_id);
  IF now_ms = 0 THEN
    n := floor(extract(epoch FROM clock_timestamp()) * 1000);
  ELSE
    n := now_ms;
  END IF;
  DELETE FROM {{schema}}.leases WHERE slot = slot_id AND expires_at <= n;
  UPDATE {{schema}}.leases SET expires_at = n + ttl WHERE slot = slot_id AND holder = holder_;
  IF FOUND THEN
    SELECT count(*) INTO cnt FROM {{schema}}.leases WHERE slot = slot_id;
    RETURN ARRAY[1, cnt, 0];
  END IF;
  SELECT count(*), min(expires_at) INTO cnt, earliest FROM {{schema}}.leases WHERE slot = slot_id;
  IF cnt >= lim THEN
    RETURN ARRAY[0, cnt, earliest - n];
  END IF;
  INSERT INTO {{schema}}.leases (slot, holder, name, key, expires_at) VALUES (slot_id, holder_, name_, key_, n + ttl);
  RETURN ARRAY[1, cnt + 1, 0];
END $$;
