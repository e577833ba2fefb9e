-- Created before pg_schema.sql on a new database and replaced by every
-- migration of an existing one (pg/schema.rs), so that a database written
-- by an earlier version gets this version's rule.
-- The only updates of `entries`: the recorded erasure (the four payload
-- columns nulled at once, `erased` set, commitments in `hidden`, the
-- embedding flag may drop, and only once the step's erasure record is in
-- the log), the withheld view of an erased signed trace (only once a
-- trace-erasure record names its seq), and setting the embedding flag.
-- Every other column must stay as it was.
CREATE OR REPLACE FUNCTION cairn_entries_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF (NEW.id, NEW.org, NEW.seq, NEW.type, NEW.logged_at, NEW.record_hash, NEW.leaf_hash, NEW.sid, NEW.step_index,
      NEW.trace_id, NEW.agent_id, NEW.kind, NEW.kind_label, NEW.confidence, NEW.duration_ms, NEW.token_count,
      NEW.model, NEW.created_at, NEW.turn_id, NEW.turn_step, NEW.task_id, NEW.links, NEW.status, NEW.seed,
      NEW.digest, NEW.prev_hash, NEW.sig_key_id, NEW.signature, NEW.salts, NEW.prev_seq)
     IS NOT DISTINCT FROM
     (OLD.id, OLD.org, OLD.seq, OLD.type, OLD.logged_at, OLD.record_hash, OLD.leaf_hash, OLD.sid, OLD.step_index,
      OLD.trace_id, OLD.agent_id, OLD.kind, OLD.kind_label, OLD.confidence, OLD.duration_ms, OLD.token_count,
      OLD.model, OLD.created_at, OLD.turn_id, OLD.turn_step, OLD.task_id, OLD.links, OLD.status, OLD.seed,
      OLD.digest, OLD.prev_hash, OLD.sig_key_id, OLD.signature, OLD.salts, OLD.prev_seq)
     AND (
       (OLD.type = 'step' AND NEW.view IS NOT DISTINCT FROM OLD.view
        AND NOT OLD.erased AND NEW.erased AND NEW.hidden IS NOT NULL
        AND NEW.content IS NULL AND NEW.input_data IS NULL AND NEW.output_data IS NULL AND NEW.metadata IS NULL
        AND (NEW.has_embedding = OLD.has_embedding OR NOT NEW.has_embedding)
        AND EXISTS (SELECT 1 FROM entries x WHERE x.type = 'erasure' AND x.sid = OLD.sid
                    AND x.step_index = OLD.step_index AND x.seq > OLD.seq))
       OR
       (NOT OLD.has_embedding AND NEW.has_embedding AND NEW.erased = OLD.erased
        AND NEW.view IS NOT DISTINCT FROM OLD.view
        AND NEW.hidden IS NOT DISTINCT FROM OLD.hidden
        AND (NEW.content, NEW.input_data, NEW.output_data, NEW.metadata)
            IS NOT DISTINCT FROM (OLD.content, OLD.input_data, OLD.output_data, OLD.metadata))
       OR
       (OLD.type = 'signed-trace' AND OLD.view IS NOT NULL AND NEW.view IS NULL
        AND (NEW.erased, NEW.has_embedding, NEW.hidden)
            IS NOT DISTINCT FROM (OLD.erased, OLD.has_embedding, OLD.hidden)
        AND (NEW.content, NEW.input_data, NEW.output_data, NEW.metadata)
            IS NOT DISTINCT FROM (OLD.content, OLD.input_data, OLD.output_data, OLD.metadata)
        AND EXISTS (SELECT 1 FROM entries x WHERE x.org = OLD.org AND x.type = 'trace-erasure'
                    AND x.step_index = OLD.seq AND x.seq > OLD.seq))
     )
  THEN
    RETURN NEW;
  END IF;
  RAISE EXCEPTION 'cairn: ledger entries cannot be updated (only recorded erasure, a recorded trace erasure and the embedding flag)'
    USING ERRCODE = 'insufficient_privilege';
END $$;
