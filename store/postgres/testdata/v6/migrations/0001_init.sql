-- The limits table and the decision functions: package algo's float64 arithmetic in float8,
-- operation for operation, as store/redis/scripts.go does it in Lua. {{schema}} is the store's
-- schema, quoted. Decisions are returned as float8 and truncated by the caller, as Redis truncates
-- a Lua number (a float8 -> bigint cast would round).

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
  state float8[] NOT NULL,  -- '{}' is a fresh key; see each strategy's function for the layout
  PRIMARY KEY (policy, key, i)
) WITH (fillfactor = 80);

-- The sweep finds idle rows through this index. idle_at is stored rounded up (decide's round_ms)
-- and kept while it is still late enough, so a busy row changes it once per rounding step and
-- every other update stays HOT.
CREATE INDEX limits_idle_at ON {{schema}}.limits (idle_at);

-- A row's state while decide works on it: PL/pgSQL has no arrays of arrays.
CREATE TYPE {{schema}}.state AS (v float8[]);

-- Every strategy function takes (op, three parameters, state, now, cost) and returns:
--   op 'c' check:    allowed, limit, remaining, reset_at, retry_after, then if allowed the new
--                    state's idle instant and the new state
--   op 'p' peek:     allowed, limit, remaining, reset_at, retry_after (for a cost of 1)
--   op 'f' forecast: spendable_now, next_replenish_at, full_at
--   op 'r' refund:   NULL when nothing changes, else the idle instant and the new state
-- Remaining is returned before clamping at 0 (the caller clamps after truncating, as algo does).

-- gcra: state {tat}.
CREATE FUNCTION {{schema}}.gcra(op text, lim float8, period float8, burst float8, st float8[], n float8, cost float8)
RETURNS float8[] LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  t float8 := period / lim;
  tau float8 := t * burst;
  tat float8 := coalesce(st[1], 0);
  new_tat float8;
  allow_at float8;
  avail float8;
  next_at float8;
BEGIN
  IF op = 'r' AND st[1] IS NULL THEN
    RETURN NULL;
  END IF;
  IF tat < n THEN
    tat := n;
  END IF;
  CASE op
  WHEN 'c' THEN
    new_tat := tat + t * cost;
    allow_at := new_tat - tau;
    IF n < allow_at THEN
      RETURN ARRAY[0, burst, floor((tau - (tat - n)) / t), ceil(tat), ceil(allow_at - n)];
    END IF;
    RETURN ARRAY[1, burst, floor((tau - (new_tat - n)) / t), ceil(new_tat), 0, ceil(new_tat), new_tat];
  WHEN 'p' THEN
    allow_at := tat + t - tau;
    RETURN ARRAY[(n >= allow_at)::int, burst, floor((tau - (tat - n)) / t), ceil(tat),
      CASE WHEN n >= allow_at THEN 0 ELSE ceil(allow_at - n) END];
  WHEN 'f' THEN
    avail := (tau - (tat - n)) / t;
    next_at := n;
    IF tat > n THEN
      next_at := least(ceil(n + (floor(avail) + 1 - avail) * t), ceil(tat));
    END IF;
    RETURN ARRAY[greatest(floor(avail / cost), 0), next_at, ceil(tat)];
  WHEN 'r' THEN
    tat := tat - t * cost;
    IF tat < n THEN
      tat := n;
    END IF;
    RETURN ARRAY[ceil(tat), tat];
  END CASE;
END $$;

-- tokenBucket: state {tokens, last}.
CREATE FUNCTION {{schema}}.token_bucket(op text, capacity float8, refill float8, unused float8, st float8[], n float8, cost float8)
RETURNS float8[] LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  per_ms float8 := refill / 1000;
  tokens float8 := capacity;
  elapsed float8;
  rest float8;
  at_ms float8;
BEGIN
  IF st[1] IS NOT NULL THEN
    elapsed := n - st[2];
    IF elapsed < 0 THEN
      elapsed := 0;
    END IF;
    tokens := st[1] + elapsed * per_ms;
    IF tokens > capacity THEN
      tokens := capacity;
    END IF;
  ELSIF op = 'r' THEN
    RETURN NULL;
  END IF;
  CASE op
  WHEN 'c' THEN
    IF tokens >= cost THEN
      rest := tokens - cost;
      at_ms := n + ceil((capacity - rest) / per_ms);
      RETURN ARRAY[1, capacity, floor(rest), at_ms, 0, at_ms, rest, n];
    END IF;
    RETURN ARRAY[0, capacity, floor(tokens), n + ceil((capacity - tokens) / per_ms), ceil((cost - tokens) / per_ms)];
  WHEN 'p' THEN
    RETURN ARRAY[(tokens >= 1)::int, capacity, floor(tokens), n + ceil((capacity - tokens) / per_ms),
      CASE WHEN tokens >= 1 THEN 0 ELSE ceil((1 - tokens) / per_ms) END];
  WHEN 'f' THEN
    at_ms := n;
    IF tokens < capacity THEN
      at_ms := n + ceil((least(floor(tokens) + 1, capacity) - tokens) / per_ms);
    END IF;
    RETURN ARRAY[greatest(floor(tokens / cost), 0), at_ms, n + ceil((capacity - tokens) / per_ms)];
  WHEN 'r' THEN
    rest := tokens + cost;
    IF rest > capacity THEN
      rest := capacity;
    END IF;
    at_ms := greatest(n, st[2]);
    RETURN ARRAY[at_ms + ceil((capacity - rest) / per_ms), rest, at_ms];
  END CASE;
END $$;

-- fixedWindow: state {start, count}.
-- Windows are win ms long, or with win 0 calendar windows: b holds the bounds of three in a row
-- around the caller's clock, computed by the caller, one of which holds n.
CREATE FUNCTION {{schema}}.fixed_window(op text, lim float8, win float8, b float8[], st float8[], n float8, cost float8)
RETURNS float8[] LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  start float8;
  reset_at float8;
  cnt float8 := 0;
  c float8;
  full_at float8 := n;
BEGIN
  IF win > 0 THEN
    start := floor(n / win) * win;
    reset_at := start + win;
  ELSE
    FOR k IN 1 .. 3 LOOP
      IF n >= b[k] AND n < b[k + 1] THEN
        start := b[k];
        reset_at := b[k + 1];
      END IF;
    END LOOP;
    IF start IS NULL THEN
      RAISE EXCEPTION 'sluice: the database clock is a calendar window away from the caller''s';
    END IF;
  END IF;
  IF st[1] = start THEN
    cnt := st[2];
  END IF;
  CASE op
  WHEN 'c' THEN
    c := cnt + cost;
    IF c <= lim THEN
      RETURN ARRAY[1, lim, lim - c, reset_at, 0, ceil(reset_at), start, c];
    END IF;
    RETURN ARRAY[0, lim, lim - cnt, reset_at, ceil(reset_at - n)];
  WHEN 'p' THEN
    IF cnt > 0 THEN
      full_at := reset_at;
    END IF;
    RETURN ARRAY[(cnt + 1 <= lim)::int, lim, lim - cnt, full_at,
      CASE WHEN cnt + 1 <= lim THEN 0 ELSE ceil(reset_at - n) END];
  WHEN 'f' THEN
    IF cnt > 0 THEN
      full_at := ceil(reset_at);
    END IF;
    RETURN ARRAY[greatest(floor((lim - cnt) / cost), 0), full_at, full_at];
  WHEN 'r' THEN
    IF cnt <= 0 THEN
      RETURN NULL;
    END IF;
    c := cnt - cost;
    IF c < 0 THEN
      c := 0;
    END IF;
    RETURN ARRAY[CASE WHEN c > 0 THEN ceil(reset_at) ELSE n END, start, c];
  END CASE;
END $$;

-- slidingWindow: state {j, count, ...}, one pair per bucket j with a count, at most one per slot
-- j mod (buckets+1) as in algo. Counts are whole numbers, so summing them in any order is exact.
CREATE FUNCTION {{schema}}.sliding_window(op text, lim float8, win float8, buckets float8, st float8[], n float8, cost float8)
RETURNS float8[] LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  s float8 := buckets;
  w float8 := win / buckets;
  slots bigint := buckets::bigint + 1;
  c float8 := floor(n / w);
  elapsed float8;
  weight float8;
  sum_full float8 := 0; -- buckets c-s+1 .. c
  oldest float8 := 0;   -- bucket c-s
  here float8 := 0;     -- bucket c
  newest float8;        -- the newest bucket with a count that still counts
  latest float8;        -- the newest bucket with a count
  estimate float8;
  want float8 := cost;
  d float8;
  retry float8 := 0;
  full_at float8;
  next_st float8[] := '{}';
  ix float8[];          -- by slot: the bucket held and its count
  cnt float8[];
  j float8;
  v float8;
  m int;
  k int;
  target float8;
  rest float8;
  stop float8;
  take float8;
BEGIN
  IF op = 'r' AND cardinality(st) = 0 THEN
    RETURN NULL;
  END IF;
  FOR k IN 1 .. cardinality(st) / 2 LOOP
    j := st[2 * k - 1];
    v := st[2 * k];
    IF v > 0 THEN
      IF j > c - s AND j <= c THEN
        sum_full := sum_full + v;
      ELSIF j = c - s THEN
        oldest := v;
      END IF;
      IF j = c THEN
        here := v;
      END IF;
      IF j >= c - s AND (newest IS NULL OR j > newest) THEN
        newest := j;
      END IF;
    END IF;
  END LOOP;
  elapsed := n - c * w;
  IF elapsed < 0 THEN
    elapsed := 0;
  END IF;
  weight := (w - elapsed) / w;
  IF weight < 0 THEN
    weight := 0;
  END IF;
  IF weight > 1 THEN
    weight := 1;
  END IF;
  estimate := sum_full + oldest * weight;
  full_at := CASE WHEN newest IS NULL THEN n ELSE ceil((newest + 1) * w + win) END;
  IF op IN ('c', 'p') THEN
    IF op = 'p' THEN
      want := 1;
    END IF;
    d := estimate + want - lim;
    IF oldest > 0 AND d <= oldest * weight THEN
      retry := ceil(d * w / oldest);
    ELSE
      retry := ceil((c + 1) * w - n);
    END IF;
    IF retry < 1 THEN
      retry := 1;
    END IF;
  END IF;
  CASE op
  WHEN 'c' THEN
    IF estimate + cost > lim THEN
      RETURN ARRAY[0, lim, floor(lim - estimate), ceil((c + 1) * w + win), retry];
    END IF;
    latest := c;
    FOR k IN 1 .. cardinality(st) / 2 LOOP
      j := st[2 * k - 1];
      v := st[2 * k];
      IF v > 0 AND (j - c)::bigint % slots <> 0 THEN
        next_st := next_st || ARRAY[j, v];
        latest := greatest(latest, j);
      END IF;
    END LOOP;
    next_st := next_st || ARRAY[c, here + cost];
    RETURN ARRAY[1, lim, floor(lim - (estimate + cost)), ceil((c + 1) * w + win), 0, ceil((latest + 1) * w + win)] || next_st;
  WHEN 'p' THEN
    RETURN ARRAY[(estimate + 1 <= lim)::int, lim, floor(lim - estimate), full_at,
      CASE WHEN estimate + 1 <= lim THEN 0 ELSE retry END];
  ELSE
    -- Forecast and refund look buckets up by index: index the pairs by slot.
    FOR k IN 1 .. cardinality(st) / 2 LOOP
      m := ((st[2 * k - 1]::bigint % slots + slots) % slots)::int + 1;
      ix[m] := st[2 * k - 1];
      cnt[m] := st[2 * k];
    END LOOP;
  END CASE;
  IF op = 'f' THEN
    IF full_at = n THEN
      RETURN ARRAY[greatest(floor((lim - estimate) / cost), 0), n, n];
    END IF;
    -- Follow the estimate bucket by bucket as the oldest counts slide out, until one more whole
    -- unit is available.
    target := lim - (floor(lim - estimate) + 1);
    rest := estimate - oldest * weight;
    v := oldest;
    stop := (c + 1) * w;
    j := c;
    WHILE j <= c + s LOOP
      IF rest <= target THEN
        IF v <= 0 THEN
          stop := n;
        ELSE
          stop := greatest(ceil(stop - (target - rest) * w / v), n);
        END IF;
        RETURN ARRAY[greatest(floor((lim - estimate) / cost), 0), stop, full_at];
      END IF;
      m := (((j - s + 1)::bigint % slots + slots) % slots)::int + 1;
      v := CASE WHEN ix[m] = j - s + 1 THEN cnt[m] ELSE 0 END;
      rest := rest - v;
      stop := stop + w;
      j := j + 1;
    END LOOP;
    RETURN ARRAY[greatest(floor((lim - estimate) / cost), 0), full_at, full_at];
  END IF;
  -- Refund: take cost back from the newest buckets still inside the window.
  rest := cost;
  j := c;
  WHILE j >= c - s AND rest > 0 LOOP
    m := ((j::bigint % slots + slots) % slots)::int + 1;
    IF ix[m] = j AND cnt[m] > 0 THEN
      take := least(cnt[m], rest);
      cnt[m] := cnt[m] - take;
      rest := rest - take;
    END IF;
    j := j - 1;
  END LOOP;
  FOR k IN 1 .. cardinality(st) / 2 LOOP
    m := ((st[2 * k - 1]::bigint % slots + slots) % slots)::int + 1;
    IF cnt[m] > 0 AND ix[m] = st[2 * k - 1] THEN
      next_st := next_st || ARRAY[ix[m], cnt[m]];
      latest := greatest(latest, ix[m]);
    END IF;
  END LOOP;
  RETURN ARRAY[CASE WHEN latest IS NULL THEN n ELSE ceil((latest + 1) * w + win) END] || next_st;
END $$;

-- slidingWindowLog: state {at, n, ...}, one run of n units per instant at, oldest first.
CREATE FUNCTION {{schema}}.sliding_log(op text, lim float8, win float8, unused float8, st float8[], n float8, cost float8)
RETURNS float8[] LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  runs float8[];      -- the runs still inside the window
  len int;            -- runs in runs
  cnt float8 := 0;
  live_from int := 1; -- the first run still inside the window
  want float8 := cost;
  k int;
  unit float8;
  at_ms float8;
  retry float8;
  full_at float8 := n;
  next_st float8[] := '{}';
  placed bool := false;
  rest float8;
  take float8;
BEGIN
  IF op = 'r' AND cardinality(st) = 0 THEN
    RETURN NULL;
  END IF;
  -- Runs are in order: the expired ones are a prefix.
  WHILE 2 * live_from <= cardinality(st) AND st[2 * live_from - 1] <= n - win LOOP
    live_from := live_from + 1;
  END LOOP;
  runs := st[2 * live_from - 1 :];
  len := cardinality(runs) / 2;
  FOR k IN 1 .. len LOOP
    cnt := cnt + runs[2 * k];
  END LOOP;
  IF len > 0 THEN
    full_at := ceil(runs[2 * len - 1] + win);
  END IF;
  IF op IN ('c', 'p') THEN
    IF op = 'p' THEN
      want := 1;
    END IF;
    IF cnt = 0 THEN
      retry := win;
    ELSE
      -- When the unit that must leave for want to fit leaves the window.
      unit := cnt + want - lim;
      IF unit < 1 THEN
        unit := 1;
      END IF;
      IF unit > cnt THEN
        unit := cnt;
      END IF;
      at_ms := runs[2 * len - 1];
      FOR k IN 1 .. len LOOP
        IF unit <= runs[2 * k] THEN
          at_ms := runs[2 * k - 1];
          EXIT;
        END IF;
        unit := unit - runs[2 * k];
      END LOOP;
      retry := ceil(at_ms + win - n);
      IF retry < 1 THEN
        retry := 1;
      END IF;
    END IF;
  END IF;
  CASE op
  WHEN 'c' THEN
    IF cnt + cost > lim THEN
      RETURN ARRAY[0, lim, lim - cnt, ceil(coalesce(runs[1], n) + win), retry];
    END IF;
    IF len = 0 OR runs[2 * len - 1] < n THEN
      next_st := runs || ARRAY[n, cost];
    ELSIF runs[2 * len - 1] = n THEN
      next_st := runs;
      next_st[2 * len] := next_st[2 * len] + cost;
    ELSE
      -- An instant before the newest run (a replay going back in time): insert in order.
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
    END IF;
    RETURN ARRAY[1, lim, lim - (cnt + cost), ceil(next_st[1] + win), 0,
      ceil(next_st[cardinality(next_st) - 1] + win)] || next_st;
  WHEN 'p' THEN
    RETURN ARRAY[(cnt + 1 <= lim)::int, lim, lim - cnt, full_at, CASE WHEN cnt + 1 <= lim THEN 0 ELSE retry END];
  WHEN 'f' THEN
    RETURN ARRAY[greatest(floor((lim - cnt) / cost), 0), CASE WHEN len = 0 THEN n ELSE ceil(runs[1] + win) END, full_at];
  WHEN 'r' THEN
    -- Remove the cost newest units.
    rest := cost;
    WHILE rest > 0 AND len > 0 LOOP
      take := least(runs[2 * len], rest);
      runs[2 * len] := runs[2 * len] - take;
      rest := rest - take;
      IF runs[2 * len] = 0 THEN
        len := len - 1;
      END IF;
    END LOOP;
    runs := runs[1 : 2 * len];
    RETURN ARRAY[CASE WHEN len = 0 THEN n ELSE ceil(runs[2 * len - 1] + win) END] || runs;
  END CASE;
END $$;

-- decide runs one operation over a list of steps, each one limit of one key, in one statement.
--
--   op          'c' check, 'p' peek, 'f' forecast, 'r' refund
--   now_ms      epoch ms; 0 reads the database clock once, after every row is locked
--   per_group   steps per group (check): a group is all or nothing, groups are independent
--   round_ms    idle_at is rounded up to a multiple of this (0: not rounded)
--   wait_ms     the caller's time left (0: no deadline): the longest this transaction waits for a
--               lock, so that a statement its caller gave up on never decides after the deadline
--   policies, keys, idx
--               the distinct rows the steps use, in the order they are locked (every caller
--               sorts them the same way, so multi-row calls never deadlock each other)
--   step_row    each step's row (1-based)
--   kinds       each step's strategy: g t f s l
--   params      three parameters per step
--   costs       each step's cost
--
-- A check decides the steps in order, each against the state the earlier steps left (a key
-- checked twice sees its first check), and keeps a group's new states only if every step of the
-- group was allowed. Rows are locked with SELECT ... FOR UPDATE (check, refund) before the clock is
-- read, so the decisions on a row follow each other in time. A check first inserts the rows it
-- lacks, fresh ('{}'), and locks them too, so a concurrent first check of a key waits its turn.
--
-- The reply is five numbers per step for a check or a peek, three for a forecast, none for a refund.
CREATE FUNCTION {{schema}}.decide(op text, now_ms bigint, per_group int, round_ms bigint, wait_ms bigint,
  policies text[], keys text[], idx smallint[],
  step_row int[], kinds text[], params float8[], costs bigint[], bounds float8[])
RETURNS float8[] LANGUAGE plpgsql AS $$
DECLARE
  nrows int := cardinality(keys);
  nsteps int := cardinality(step_row);
  width int := CASE op WHEN 'f' THEN 3 WHEN 'r' THEN 0 ELSE 5 END;
  res float8[] := array_fill(0::float8, ARRAY[width * nsteps]);
  cur {{schema}}.state[] := array_fill(ROW('{}')::{{schema}}.state, ARRAY[nrows]);
  had bool[] := array_fill(false, ARRAY[nrows]);       -- the row is in the table
  dirty bool[] := array_fill(false, ARRAY[nrows]);     -- the row has a new state to write
  idle float8[] := array_fill(NULL::float8, ARRAY[nrows]);
  pend {{schema}}.state[];                               -- a group's new states, until it is allowed
  pend_idle float8[];
  pend_group int[];
  rec record;
  n float8;
  o float8[];
  st float8[];
  row_no int;
  step_no int;
  grp int := 0;
  g_first int := 1;
  g_last int;
  all_ok bool;
BEGIN
  IF wait_ms > 0 THEN
    PERFORM set_config('lock_timeout', wait_ms || 'ms', true);
  END IF;
  IF op IN ('c', 'r') THEN
    -- A check first makes the rows it lacks, fresh ('{}', idle at once), so that it can lock them:
    -- a concurrent first check of the same key then waits for this one and reads what it wrote,
    -- instead of both deciding on a fresh key. Rows are tried in lock order, and an insert that
    -- meets another transaction's uncommitted one waits for it, so the inserts, like the locks
    -- below, are taken in one global order: no deadlock. The sweep may delete an idle row between
    -- the insert and the lock: the rows still missing are made and locked again, so a check holds
    -- the lock of every row it will write.
    LOOP
      IF op = 'c' THEN
        INSERT INTO {{schema}}.limits (policy, key, i, state, idle_at)
        SELECT u.pol, u.ky, u.li, '{}', 0
        FROM unnest(policies, keys, idx, had) WITH ORDINALITY AS u(pol, ky, li, h, ord)
        WHERE NOT u.h ORDER BY u.ord
        ON CONFLICT DO NOTHING;
      END IF;
      FOR rec IN
        SELECT u.ord::int AS ord, l.state FROM unnest(policies, keys, idx, had) WITH ORDINALITY AS u(pol, ky, li, h, ord)
        JOIN {{schema}}.limits l ON l.policy = u.pol AND l.key = u.ky AND l.i = u.li
        WHERE NOT u.h ORDER BY u.ord FOR UPDATE OF l
      LOOP
        cur[rec.ord] := ROW(rec.state)::{{schema}}.state;
        had[rec.ord] := true;
      END LOOP;
      EXIT WHEN op = 'r' OR NOT (false = ANY (had));
    END LOOP;
  ELSE
    FOR rec IN
      SELECT u.ord::int AS ord, l.state FROM unnest(policies, keys, idx) WITH ORDINALITY AS u(pol, ky, li, ord)
      JOIN {{schema}}.limits l ON l.policy = u.pol AND l.key = u.ky AND l.i = u.li
    LOOP
      cur[rec.ord] := ROW(rec.state)::{{schema}}.state;
    END LOOP;
  END IF;
  -- The clock is read once every row is locked: a caller that waited for a row decides after the
  -- one it waited for, never before (now() or statement_timestamp() would be the instant the
  -- statement started, possibly before the state it reads was written).
  IF now_ms = 0 THEN
    n := floor(extract(epoch FROM clock_timestamp()) * 1000);
  ELSE
    n := now_ms;
  END IF;
  IF op IN ('p', 'f') OR per_group < 1 THEN
    per_group := nsteps;
  END IF;
  WHILE g_first <= nsteps LOOP
    grp := grp + 1;
    g_last := least(g_first + per_group - 1, nsteps);
    all_ok := true;
    FOR step_no IN g_first .. g_last LOOP
      row_no := step_row[step_no];
      IF pend_group[row_no] = grp THEN
        st := (pend[row_no]).v;
      ELSE
        st := (cur[row_no]).v;
      END IF;
      o := CASE kinds[step_no]
        WHEN 'g' THEN {{schema}}.gcra(op, params[3 * step_no - 2], params[3 * step_no - 1], params[3 * step_no], st, n, costs[step_no])
        WHEN 't' THEN {{schema}}.token_bucket(op, params[3 * step_no - 2], params[3 * step_no - 1], params[3 * step_no], st, n, costs[step_no])
        WHEN 'f' THEN {{schema}}.fixed_window(op, params[3 * step_no - 2], params[3 * step_no - 1], bounds[4 * step_no - 3 : 4 * step_no], st, n, costs[step_no])
        WHEN 's' THEN {{schema}}.sliding_window(op, params[3 * step_no - 2], params[3 * step_no - 1], params[3 * step_no], st, n, costs[step_no])
        WHEN 'l' THEN {{schema}}.sliding_log(op, params[3 * step_no - 2], params[3 * step_no - 1], params[3 * step_no], st, n, costs[step_no])
      END;
      IF width > 0 THEN
        res[width * step_no - width + 1 : width * step_no] := o[1 : width];
      END IF;
      IF op = 'c' THEN
        IF o[1] = 1 THEN
          pend[row_no] := ROW(o[7:])::{{schema}}.state;
          pend_idle[row_no] := o[6];
          pend_group[row_no] := grp;
        ELSE
          all_ok := false;
        END IF;
      ELSIF op = 'r' AND o IS NOT NULL THEN
        pend[row_no] := ROW(o[2:])::{{schema}}.state;
        pend_idle[row_no] := o[1];
        pend_group[row_no] := grp;
      END IF;
    END LOOP;
    IF all_ok AND op IN ('c', 'r') THEN
      FOR step_no IN g_first .. g_last LOOP
        row_no := step_row[step_no];
        IF pend_group[row_no] = grp THEN
          cur[row_no] := pend[row_no];
          idle[row_no] := pend_idle[row_no];
          dirty[row_no] := true;
        END IF;
      END LOOP;
    END IF;
    g_first := g_last + 1;
  END LOOP;
  IF op NOT IN ('c', 'r') THEN
    RETURN res;
  END IF;
  -- Every row to write exists (a check made the ones it lacked). idle_at only ever moves later, to
  -- the next multiple of round_ms: an update that leaves it alone changes no indexed column and
  -- can be HOT.
  IF true = ANY (dirty) THEN
    UPDATE {{schema}}.limits l SET state = u.v,
      idle_at = CASE WHEN l.idle_at >= u.idle THEN l.idle_at
        WHEN round_ms > 0 THEN ceil(u.idle / round_ms) * round_ms ELSE ceil(u.idle) END
    FROM unnest(policies, keys, idx, cur, idle, dirty, had) AS u(pol, ky, li, v, idle, d, h)
    WHERE u.d AND l.policy = u.pol AND l.key = u.ky AND l.i = u.li;
  END IF;
  RETURN res;
END $$;
