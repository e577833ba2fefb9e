-- Needs a superuser (event triggers do): refuses DROP and ALTER of Cairn's
-- ledger tables, and DROP of its triggers, from any role. Applied by
-- `cairn_store::pg::install_guard` when the migrating role may.
CREATE OR REPLACE FUNCTION cairn_guard_ddl() RETURNS event_trigger LANGUAGE plpgsql AS $$
DECLARE
  obj record;
BEGIN
  FOR obj IN SELECT * FROM pg_event_trigger_dropped_objects() LOOP
    IF obj.object_type IN ('table', 'trigger')
       AND (obj.object_identity ~ '(^|\.)(entries|orgs|sessions|session_heads|nodes|checkpoints|org_origins|cairn_meta)$'
            OR obj.object_identity ~ '^cairn_')
       OR (obj.object_type = 'trigger' AND obj.object_identity ~ '^cairn_') THEN
      RAISE EXCEPTION 'cairn: % of % is refused: the ledger is append-only', TG_TAG, obj.object_identity
        USING ERRCODE = 'insufficient_privilege';
    END IF;
  END LOOP;
END $$;

CREATE OR REPLACE FUNCTION cairn_guard_alter() RETURNS event_trigger LANGUAGE plpgsql AS $$
DECLARE
  obj record;
BEGIN
  FOR obj IN SELECT * FROM pg_event_trigger_ddl_commands() LOOP
    IF obj.object_type IN ('table', 'trigger')
       AND obj.object_identity ~ '(^|\.)(entries|orgs|sessions|session_heads|nodes|checkpoints|org_origins|cairn_meta)($| )' THEN
      RAISE EXCEPTION 'cairn: % of % is refused: the ledger is append-only', TG_TAG, obj.object_identity
        USING ERRCODE = 'insufficient_privilege';
    END IF;
  END LOOP;
END $$;

DROP EVENT TRIGGER IF EXISTS cairn_guard_drop;
CREATE EVENT TRIGGER cairn_guard_drop ON sql_drop EXECUTE FUNCTION cairn_guard_ddl();
DROP EVENT TRIGGER IF EXISTS cairn_guard_alter;
CREATE EVENT TRIGGER cairn_guard_alter ON ddl_command_end WHEN TAG IN ('ALTER TABLE', 'DROP TRIGGER')
  EXECUTE FUNCTION cairn_guard_alter();
