-- The role Cairn runs as in production: owns nothing, may read and append,
-- may update only the columns of the recorded erasure and the embedding
-- flag (the trigger narrows that further), and may change only derived
-- tables (session heads only forward). Replace cairn_app with your role name; run as the schema owner
-- after `cairn` (or `cairn_store::pg::migrate`) created the schema.
GRANT USAGE ON SCHEMA public TO cairn_app;
GRANT SELECT, INSERT ON entries, orgs, sessions, nodes, checkpoints, org_origins TO cairn_app;
GRANT SELECT, INSERT ON cairn_meta TO cairn_app;
GRANT SELECT, INSERT, UPDATE ON cosignatures TO cairn_app;
GRANT SELECT, INSERT, DELETE ON held_spans TO cairn_app;
GRANT UPDATE (content, input_data, output_data, metadata, erased, hidden, has_embedding, view) ON entries TO cairn_app;
GRANT SELECT, INSERT, UPDATE ON session_heads TO cairn_app;
GRANT SELECT, INSERT ON session_kinds TO cairn_app;
GRANT SELECT, INSERT, UPDATE, DELETE ON vectors, embedding_queue, api_keys TO cairn_app;
GRANT SELECT, INSERT, UPDATE ON embedding_settings TO cairn_app;
GRANT SELECT, INSERT, DELETE ON step_search TO cairn_app;
GRANT SELECT, INSERT, UPDATE, DELETE ON search_queue TO cairn_app;
GRANT USAGE ON SEQUENCE orgs_org_seq, sessions_sid_seq, embedding_queue_n_seq TO cairn_app;
-- Analyst SQL calls these (see pg_schema.sql).
GRANT EXECUTE ON FUNCTION cairn_time_check(), cairn_too_much_work(text, bigint, bigint),
  cairn_like(text, text), cairn_like(text, text, text), cairn_ilike(text, text), cairn_ilike(text, text, text),
  cairn_position(text, text), cairn_replace(text, text, text),
  cairn_btrim(text, text), cairn_ltrim(text, text), cairn_rtrim(text, text),
  cairn_like(bpchar, text), cairn_like(bpchar, text, text), cairn_ilike(bpchar, text), cairn_ilike(bpchar, text, text),
  cairn_like(bytea, bytea), cairn_like(bytea, bytea, bytea), cairn_position(bytea, bytea),
  cairn_btrim(bytea, bytea), cairn_ltrim(bytea, bytea), cairn_rtrim(bytea, bytea),
  cairn_too_long(text, bigint), cairn_bounded(anyelement) TO cairn_app;
