-- Overrides (package overrides): what applies to one key of a policy instead of the policy, a row
-- per policy and key. body is the override's JSON, as package overrides writes it (json keeps it
-- verbatim, \u0000 included); key is the key as the limits table stores keys (textOf: hex after
-- the escape byte for a key text cannot hold). expires_at (epoch ms, 0 never) and updated_at
-- repeat body's, for people and queries. Every change is also sent with pg_notify, in its
-- transaction, on the schema's overrides channel. {{schema}} is the store's schema, quoted.
CREATE TABLE {{schema}}.overrides (
  expires_at bigint NOT NULL,
  updated_at bigint NOT NULL,
  policy text NOT NULL,
  key text NOT NULL,
  body json NOT NULL,
  PRIMARY KEY (policy, key)
);
