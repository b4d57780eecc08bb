-- Debit (sluice.Debiter): charge cost units to a key whatever its limit, the settle step of
-- reserve-then-settle when the work cost more than was reserved. {{schema}} is the store's schema,
-- quoted.

-- debit_state returns a limit's state after cost more units at n, preceded by the instant the new
-- state is idle: package algo's Debit in float8, operation for operation, on the state layouts and
-- parameters of the strategy functions of migration 0001.
CREATE FUNCTION {{schema}}.debit_state(kind text, a float8, b float8, c float8, bounds float8[], st float8[], n float8, cost float8)
RETURNS float8[] LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  t float8;
  tat float8;
  per_ms float8;
  tokens float8;
  last_ms float8;
  rest float8;
  start float8;
  reset_at float8;
  cnt float8 := 0;
  w float8;
  slots bigint;
  cb float8;
  here float8 := 0;
  latest float8;
  next_st float8[] := '{}';
  runs float8[];
  len int;
  live_from int := 1;
  placed bool := false;
  j float8;
  v float8;
BEGIN
  CASE kind
  WHEN 'g' THEN -- a limit, b period, c burst; state {tat}
    t := b / a;
    tat := coalesce(st[1], 0);
    IF tat < n THEN
      tat := n;
    END IF;
    tat := tat + t * cost;
    RETURN ARRAY[ceil(tat), tat];
  WHEN 't' THEN -- a capacity, b refill per second; state {tokens, last}
    per_ms := b / 1000;
    tokens := a;
    last_ms := n;
    IF st[1] IS NOT NULL THEN
      rest := n - st[2];
      IF rest < 0 THEN
        rest := 0;
      END IF;
      tokens := st[1] + rest * per_ms;
      IF tokens > a THEN
        tokens := a;
      END IF;
      last_ms := greatest(n, st[2]);
    END IF;
    rest := tokens - cost;
    RETURN ARRAY[last_ms + ceil((a - rest) / per_ms), rest, last_ms];
  WHEN 'f' THEN -- a limit, b window (0: calendar windows in bounds); state {start, count}
    IF b > 0 THEN
      start := floor(n / b) * b;
      reset_at := start + b;
    ELSE
      FOR k IN 1 .. 3 LOOP
        IF n >= bounds[k] AND n < bounds[k + 1] THEN
          start := bounds[k];
          reset_at := bounds[k + 1];
        END IF;
      END LOOP;
      IF start IS NULL THEN
        RAISE EXCEPTION 'sluice: the database clock is a calendar window away from the caller''s';
      END IF;
    END IF;
    IF st[1] = start THEN
      cnt := st[2];
    END IF;
    RETURN ARRAY[ceil(reset_at), start, cnt + cost];
  WHEN 's' THEN -- a limit, b window, c buckets; state {j, count, ...}
    w := b / c;
    slots := c::bigint + 1;
    cb := floor(n / w);
    latest := cb;
    FOR k IN 1 .. cardinality(st) / 2 LOOP
      j := st[2 * k - 1];
      v := st[2 * k];
      IF v > 0 AND j = cb THEN
        here := v;
      END IF;
      IF v > 0 AND (j - cb)::bigint % slots <> 0 THEN
        next_st := next_st || ARRAY[j, v];
        latest := greatest(latest, j);
      END IF;
    END LOOP;
    RETURN ARRAY[ceil((latest + 1) * w + b)] || next_st || ARRAY[cb, here + cost];
  WHEN 'l' THEN -- a limit, b window; state {at, n, ...}, oldest first
    WHILE 2 * live_from <= cardinality(st) AND st[2 * live_from - 1] <= n - b LOOP
      live_from := live_from + 1;
    END LOOP;
    runs := st[2 * live_from - 1 :];
    len := cardinality(runs) / 2;
    FOR k IN 1 .. len LOOP
      IF NOT placed AND runs[2 * k - 1] >= n THEN
        IF runs[2 * k - 1] = n THEN
          runs[2 * k] := runs[2 * k] + cost;
        ELSE
          next_st := next_st || ARRAY[n, cost];
        END IF;
        placed := true;
      END IF;
      next_st := next_st || ARRAY[runs[2 * k - 1], runs[2 * k]];
    END LOOP;
    IF NOT placed THEN
      next_st := next_st || ARRAY[n, cost];
    END IF;
    RETURN ARRAY[ceil(next_st[cardinality(next_st) - 1] + b)] || next_st;
  END CASE;
END $$;

-- debit takes decide's arguments (op and per_group are ignored) and charges each step's cost to its
-- row, making the rows it lacks and locking every row in the order given before it reads the clock,
-- as decide does for a check. It returns an empty reply.
CREATE FUNCTION {{schema}}.debit(op text, now_ms bigint, per_group int, round_ms bigint, wait_ms bigint,
  policies text[], keys text[], idx smallint[],
  step_row int[], kinds text[], params float8[], costs bigint[], bounds float8[])
RETURNS float8[] LANGUAGE plpgsql AS $$
DECLARE
  nrows int := cardinality(keys);
  cur {{schema}}.state[] := array_fill(ROW('{}')::{{schema}}.state, ARRAY[nrows]);
  had bool[] := array_fill(false, ARRAY[nrows]);
  idle float8[] := array_fill(NULL::float8, ARRAY[nrows]);
  rec record;
  n float8;
  o float8[];
  row_no int;
BEGIN
  IF wait_ms > 0 THEN
    PERFORM set_config('lock_timeout', wait_ms || 'ms', true);
  END IF;
  -- Make the missing rows and lock every row, in lock order, until none is missing (the sweep may
  -- delete an idle row between the insert and the lock).
  LOOP
    INSERT INTO {{schema}}.limits (policy, key, i, state, idle_at)
    SELECT u.pol, u.ky, u.li, '{}', 0
    FROM unnest(policies, keys, idx, had) WITH ORDINALITY AS u(pol, ky, li, h, ord)
    WHERE NOT u.h ORDER BY u.ord
    ON CONFLICT DO NOTHING;
    FOR rec IN
      SELECT u.ord::int AS ord, l.state FROM unnest(policies, keys, idx, had) WITH ORDINALITY AS u(pol, ky, li, h, ord)
      JOIN {{schema}}.limits l ON l.policy = u.pol AND l.key = u.ky AND l.i = u.li
      WHERE NOT u.h ORDER BY u.ord FOR UPDATE OF l
    LOOP
      cur[rec.ord] := ROW(rec.state)::{{schema}}.state;
      had[rec.ord] := true;
    END LOOP;
    EXIT WHEN NOT (false = ANY (had));
  END LOOP;
  IF now_ms = 0 THEN
    n := floor(extract(epoch FROM clock_timestamp()) * 1000);
  ELSE
    n := now_ms;
  END IF;
  FOR s IN 1 .. cardinality(step_row) LOOP
    row_no := step_row[s];
    o := {{schema}}.debit_state(kinds[s], params[3 * s - 2], params[3 * s - 1], params[3 * s],
      bounds[4 * s - 3 : 4 * s], (cur[row_no]).v, n, costs[s]);
    cur[row_no] := ROW(o[2:])::{{schema}}.state;
    idle[row_no] := o[1];
  END LOOP;
  UPDATE {{schema}}.limits l SET state = u.v,
    idle_at = CASE WHEN l.idle_at >= u.idle THEN l.idle_at
      WHEN round_ms > 0 THEN ceil(u.idle / round_ms) * round_ms ELSE ceil(u.idle) END
  FROM unnest(policies, keys, idx, cur, idle) AS u(pol, ky, li, v, idle)
  WHERE u.idle IS NOT NULL AND l.policy = u.pol AND l.key = u.ky AND l.i = u.li;
  RETURN '{}';
END $$;
