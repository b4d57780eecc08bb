-- From here on the store's functions are functions.sql's, applied whole with CREATE OR REPLACE
-- after the migrations, in their transaction. Drop the functions of migrations 1 to 6 it does not
-- define: the strategy functions migration 6 renamed to wrap them (each is now written once, and
-- step gives it a state of its own shape), and debit_state, now each strategy's op 'd'. A new
-- schema has none of them. {{schema}} is the store's schema, quoted.
DROP FUNCTION IF EXISTS {{schema}}.gcra_0001(text, float8, float8, float8, float8[], float8, float8);
DROP FUNCTION IF EXISTS {{schema}}.token_bucket_0001(text, float8, float8, float8, float8[], float8, float8);
DROP FUNCTION IF EXISTS {{schema}}.fixed_window_0001(text, float8, float8, float8[], float8[], float8, float8);
DROP FUNCTION IF EXISTS {{schema}}.sliding_window_0001(text, float8, float8, float8, float8[], float8, float8);
DROP FUNCTION IF EXISTS {{schema}}.sliding_log_0001(text, float8, float8, float8, float8[], float8, float8);
DROP FUNCTION IF EXISTS {{schema}}.debit_state_0003(text, float8, float8, float8, float8[], float8[], float8, float8);
DROP FUNCTION IF EXISTS {{schema}}.debit_state(text, float8, float8, float8, float8[], float8[], float8, float8);
