-- decide, cheaper for a check whose groups are one step each, as a CheckMany or a batch of Checks
-- of a policy of one limit is: arguments, reply and guarantees are migration 0001's, and the
-- rest of the body is migration 0004's. {{schema}} is the store's schema, quoted.
--
-- A group of one step has nothing to wait for: its step's new state is the group's outcome. Such a
-- check now writes each allowed step's state straight to the row (a key checked twice in the call
-- still sees its first check), skipping the pending copy and the second pass that commits a group.
-- Measured with pgbench on one client, 100 existing keys per call, synchronous_commit=off: about
-- 1.17 ms -> 1.08 ms a call, the harness's 0.22 ms included.
--
-- decide also plans its statements once per session (plan_cache_mode = force_generic_plan). With
-- the arrays as parameters, a plan for the very arrays of a call (a custom plan) is estimated
-- cheaper than the generic one when they are short, so a call of one key was planned afresh every
-- time: 0.37 -> 0.28 ms for such a call, the harness's 0.15 ms included. The generic plan is the
-- one long calls already used: index probes per key, never a scan of the table. debit (migration
-- 0003) has the same statements and gets the same setting, at the end of this file: 0.36 -> 0.26 ms
-- for a call of one key.

CREATE OR REPLACE FUNCTION {{schema}}.decide(op text, now_ms bigint, per_group int, round_ms bigint, wait_ms bigint,
  policies text[], keys text[], idx smallint[],
  step_row int[], kinds text[], params float8[], costs bigint[], bounds float8[])
RETURNS float8[] LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  nrows int := cardinality(keys);
  nsteps int := cardinality(step_row);
  width int := CASE op WHEN 'f' THEN 3 WHEN 'r' THEN 0 ELSE 5 END;
  res float8[] := array_fill(0::float8, ARRAY[width * nsteps]);
  cur {{schema}}.state[] := array_fill(ROW('{}')::{{schema}}.state, ARRAY[nrows]);
  had bool[] := array_fill(false, ARRAY[nrows]);       -- the row is in the table, locked (check, refund)
  tids tid[] := array_fill(NULL::tid, ARRAY[nrows]);   -- the version locked, which the update rewrites
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
  insert_first bool := false;
BEGIN
  IF wait_ms > 0 THEN
    PERFORM set_config('lock_timeout', wait_ms || 'ms', true);
  END IF;
  LOOP
    -- Everything is written inside this block, so that the locks and the update are one
    -- subtransaction's (a row locked by one and updated by another would need a multixact).
    BEGIN
      IF op IN ('c', 'r') THEN
        LOOP
          IF insert_first AND op = 'c' THEN
            INSERT INTO {{schema}}.limits (policy, key, i, state, idle_at)
            SELECT u.pol, u.ky, u.li, '{}', 0
            FROM unnest(policies, keys, idx, had) WITH ORDINALITY AS u(pol, ky, li, h, ord)
            WHERE NOT u.h ORDER BY u.ord
            ON CONFLICT DO NOTHING;
          END IF;
          FOR rec IN
            SELECT u.ord::int AS ord, l.state, l.ctid FROM unnest(policies, keys, idx, had) WITH ORDINALITY AS u(pol, ky, li, h, ord)
            JOIN {{schema}}.limits l ON l.policy = u.pol AND l.key = u.ky AND l.i = u.li
            WHERE NOT u.h ORDER BY u.ord FOR UPDATE OF l
          LOOP
            cur[rec.ord] := ROW(rec.state)::{{schema}}.state;
            had[rec.ord] := true;
            tids[rec.ord] := rec.ctid;
          END LOOP;
          EXIT WHEN op = 'r' OR NOT (false = ANY (had));
          IF NOT insert_first AND true = ANY (had) THEN
            RAISE SQLSTATE 'SL001'; -- holds some rows and lacks others: start over, inserting first
          END IF;
          insert_first := true;
        END LOOP;
      ELSE
        FOR rec IN
          SELECT u.ord::int AS ord, l.state FROM unnest(policies, keys, idx) WITH ORDINALITY AS u(pol, ky, li, ord)
          JOIN {{schema}}.limits l ON l.policy = u.pol AND l.key = u.ky AND l.i = u.li
        LOOP
          cur[rec.ord] := ROW(rec.state)::{{schema}}.state;
        END LOOP;
      END IF;
      -- The clock is read once every row is locked: a caller that waited for a row decides after
      -- the one it waited for, never before (now() or statement_timestamp() would be the instant
      -- the statement started, possibly before the state it reads was written).
      IF now_ms = 0 THEN
        n := floor(extract(epoch FROM clock_timestamp()) * 1000);
      ELSE
        n := now_ms;
      END IF;
      IF op IN ('p', 'f') OR per_group < 1 THEN
        per_group := nsteps;
      END IF;
      IF op = 'c' AND per_group = 1 THEN
        -- Groups of one step (see the top of this file). The dispatch is the loop's below, spelled
        -- out again: a function around it would cost a PL/pgSQL call per step, and a branch for
        -- groups of one inside that loop keeps its per-group bookkeeping, which measured at about
        -- half this loop's gain (1.07-1.14 against 1.00-1.08 ms a call of 100 keys).
        FOR step_no IN 1 .. nsteps LOOP
          row_no := step_row[step_no];
          st := (cur[row_no]).v;
          o := CASE kinds[step_no]
            WHEN 'g' THEN {{schema}}.gcra(op, params[3 * step_no - 2], params[3 * step_no - 1], params[3 * step_no], st, n, costs[step_no])
            WHEN 't' THEN {{schema}}.token_bucket(op, params[3 * step_no - 2], params[3 * step_no - 1], params[3 * step_no], st, n, costs[step_no])
            WHEN 'f' THEN {{schema}}.fixed_window(op, params[3 * step_no - 2], params[3 * step_no - 1], bounds[4 * step_no - 3 : 4 * step_no], st, n, costs[step_no])
            WHEN 's' THEN {{schema}}.sliding_window(op, params[3 * step_no - 2], params[3 * step_no - 1], params[3 * step_no], st, n, costs[step_no])
            WHEN 'l' THEN {{schema}}.sliding_log(op, params[3 * step_no - 2], params[3 * step_no - 1], params[3 * step_no], st, n, costs[step_no])
          END;
          res[5 * step_no - 4 : 5 * step_no] := o[1 : 5];
          IF o[1] = 1 THEN
            cur[row_no] := ROW(o[7:])::{{schema}}.state;
            idle[row_no] := o[6];
            dirty[row_no] := true;
          END IF;
        END LOOP;
        g_first := nsteps + 1; -- every step is decided: the general loop below has nothing to do
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
      -- Every row to write is locked, at the version in tids. idle_at only ever moves later, to
      -- the next multiple of round_ms: an update that leaves it alone changes no indexed column
      -- and can be HOT.
      IF op IN ('c', 'r') AND true = ANY (dirty) THEN
        UPDATE {{schema}}.limits l SET state = u.v,
          idle_at = CASE WHEN l.idle_at >= u.idle THEN l.idle_at
            WHEN round_ms > 0 THEN ceil(u.idle / round_ms) * round_ms ELSE ceil(u.idle) END
        FROM unnest(tids, cur, idle, dirty) AS u(t, v, idle, d)
        WHERE u.d AND l.ctid = u.t;
      END IF;
      RETURN res;
    EXCEPTION WHEN SQLSTATE 'SL001' THEN
      -- Rolling the block back released the rows it had locked.
      insert_first := true;
      had := array_fill(false, ARRAY[nrows]);
    END;
  END LOOP;
END $$;

ALTER FUNCTION {{schema}}.debit(text, bigint, int, bigint, bigint, text[], text[], smallint[], int[], text[],
  float8[], bigint[], float8[]) SET plan_cache_mode = force_generic_plan;
