-- A decision is identified by (query, key, window_start) across a query's runs, so that a run
-- started by a reset publishes no second decision for a window already decided (the engine
-- inserts with ON CONFLICT DO NOTHING on this index). Earlier builds did publish one: keep the
-- first of each, the one consumers acted on, and remove the later ones.
DELETE FROM {{schema}}.decisions d USING {{schema}}.decisions f
  WHERE f.query = d.query AND f.key = d.key AND f.window_start = d.window_start AND f."offset" < d."offset";
CREATE UNIQUE INDEX decisions_identity ON {{schema}}.decisions (query, key, window_start);
