-- A policy may change strategy under its name (a reload), and its rows then hold states of the
-- old strategy. A strategy function given a state of another shape read elements that are not
-- there (a token bucket reading GCRA's one-element state got NULLs), and every check of such a
-- key failed until its row was swept. Each strategy function is now a wrapper that passes on a
-- state of its own shape and gives any other as '{}', a fresh key: GCRA's state is one number,
-- a token bucket's and a fixed window's two, the sliding windows' a list of pairs. The wrappers
-- are single SQL expressions, which the planner inlines into decide's and debit's statements, so
-- they cost no call of their own. {{schema}} is the store's schema, quoted.

ALTER FUNCTION {{schema}}.gcra(text, float8, float8, float8, float8[], float8, float8) RENAME TO gcra_0001;
ALTER FUNCTION {{schema}}.token_bucket(text, float8, float8, float8, float8[], float8, float8) RENAME TO token_bucket_0001;
ALTER FUNCTION {{schema}}.fixed_window(text, float8, float8, float8[], float8[], float8, float8) RENAME TO fixed_window_0001;
ALTER FUNCTION {{schema}}.sliding_window(text, float8, float8, float8, float8[], float8, float8) RENAME TO sliding_window_0001;
ALTER FUNCTION {{schema}}.sliding_log(text, float8, float8, float8, float8[], float8, float8) RENAME TO sliding_log_0001;
ALTER FUNCTION {{schema}}.debit_state(text, float8, float8, float8, float8[], float8[], float8, float8) RENAME TO debit_state_0003;

CREATE FUNCTION {{schema}}.gcra(op text, lim float8, period float8, burst float8, st float8[], n float8, cost float8)
RETURNS float8[] LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT {{schema}}.gcra_0001(op, lim, period, burst,
    CASE WHEN cardinality(st) = 1 THEN st ELSE '{}' END, n, cost)
$$;

CREATE FUNCTION {{schema}}.token_bucket(op text, capacity float8, refill float8, unused float8, st float8[], n float8, cost float8)
RETURNS float8[] LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT {{schema}}.token_bucket_0001(op, capacity, refill, unused,
    CASE WHEN cardinality(st) = 2 THEN st ELSE '{}' END, n, cost)
$$;

CREATE FUNCTION {{schema}}.fixed_window(op text, lim float8, win float8, b float8[], st float8[], n float8, cost float8)
RETURNS float8[] LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT {{schema}}.fixed_window_0001(op, lim, win, b,
    CASE WHEN cardinality(st) = 2 THEN st ELSE '{}' END, n, cost)
$$;

CREATE FUNCTION {{schema}}.sliding_window(op text, lim float8, win float8, buckets float8, st float8[], n float8, cost float8)
RETURNS float8[] LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT {{schema}}.sliding_window_0001(op, lim, win, buckets,
    CASE WHEN cardinality(st) % 2 = 0 THEN st ELSE '{}' END, n, cost)
$$;

CREATE FUNCTION {{schema}}.sliding_log(op text, lim float8, win float8, unused float8, st float8[], n float8, cost float8)
RETURNS float8[] LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT {{schema}}.sliding_log_0001(op, lim, win, unused,
    CASE WHEN cardinality(st) % 2 = 0 THEN st ELSE '{}' END, n, cost)
$$;

CREATE FUNCTION {{schema}}.debit_state(kind text, a float8, b float8, c float8, bounds float8[], st float8[], n float8, cost float8)
RETURNS float8[] LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT {{schema}}.debit_state_0003(kind, a, b, c, bounds,
    CASE WHEN CASE kind WHEN 'g' THEN cardinality(st) = 1 WHEN 't' THEN cardinality(st) = 2
      WHEN 'f' THEN cardinality(st) = 2 ELSE cardinality(st) % 2 = 0 END THEN st ELSE '{}' END, n, cost)
$$;
