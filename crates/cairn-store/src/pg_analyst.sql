-- The functions analyst SQL calls (crates/cairn-store/src/analyst/),
-- created or replaced by every migration of the schema owner (so that a
-- change reaches databases created earlier).

-- Analyst SQL calls this before each call of a scalar function (see
-- analyst/time_checks.rs): PostgreSQL acts on statement_timeout only where
-- it checks for interrupts, which running a PL/pgSQL statement does and a
-- built-in such as upper() does not, so one row of many calls on large
-- values would otherwise run far past the limit. STABLE, not IMMUTABLE:
-- never folded into a constant, so called each time; not VOLATILE, which
-- would keep the planner from hash joins, parallel scans and inlining
-- CTEs around it; COST 1 as the cheap call it is.
CREATE OR REPLACE FUNCTION cairn_time_check() RETURNS boolean LANGUAGE plpgsql STABLE PARALLEL SAFE COST 1 AS $$
BEGIN
  RETURN true;
END $$;

-- Analyst SQL's searches whose one call costs the product of its two
-- lengths (see analyst/pg_bounds.rs): PostgreSQL's LIKE, ILIKE,
-- position, replace and trim with a set never check for interrupts, so
-- one call on megabytes ran for minutes past statement_timeout. Analyst
-- SQL calls these instead: the built-in while the product of the two
-- lengths in bytes is at most 64 Mi, an error past it. SQL functions
-- without a SET clause, so that the planner inlines them (no per-row
-- call when the arguments are columns). cairn_too_much_work is called
-- with its exact argument types, so that no function of another schema
-- on the search path matches better.
CREATE OR REPLACE FUNCTION cairn_too_much_work(what text, n bigint, m bigint) RETURNS boolean
  LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$
BEGIN
  RAISE EXCEPTION '% on a value of % bytes with a pattern of % bytes is more work than one call may take in analyst SQL (the product of the two lengths is at most 67108864)', what, n, m
    USING ERRCODE = 'program_limit_exceeded';
END $$;
CREATE OR REPLACE FUNCTION cairn_like(v text, p text) RETURNS boolean LANGUAGE sql STABLE PARALLEL SAFE AS
$$ SELECT CASE WHEN octet_length(v)::bigint * octet_length(p) > 67108864 THEN cairn_too_much_work('LIKE'::text, octet_length(v)::bigint, octet_length(p)::bigint) ELSE v LIKE p END $$;
CREATE OR REPLACE FUNCTION cairn_like(v text, p text, e text) RETURNS boolean LANGUAGE sql STABLE PARALLEL SAFE AS
$$ SELECT CASE WHEN octet_length(v)::bigint * octet_length(p) > 67108864 THEN cairn_too_much_work('LIKE'::text, octet_length(v)::bigint, octet_length(p)::bigint) ELSE v LIKE p ESCAPE e END $$;
CREATE OR REPLACE FUNCTION cairn_ilike(v text, p text) RETURNS boolean LANGUAGE sql STABLE PARALLEL SAFE AS
$$ SELECT CASE WHEN octet_length(v)::bigint * octet_length(p) > 67108864 THEN cairn_too_much_work('ILIKE'::text, octet_length(v)::bigint, octet_length(p)::bigint) ELSE v ILIKE p END $$;
CREATE OR REPLACE FUNCTION cairn_ilike(v text, p text, e text) RETURNS boolean LANGUAGE sql STABLE PARALLEL SAFE AS
$$ SELECT CASE WHEN octet_length(v)::bigint * octet_length(p) > 67108864 THEN cairn_too_much_work('ILIKE'::text, octet_length(v)::bigint, octet_length(p)::bigint) ELSE v ILIKE p ESCAPE e END $$;
CREATE OR REPLACE FUNCTION cairn_position(p text, v text) RETURNS integer LANGUAGE sql STABLE PARALLEL SAFE AS
$$ SELECT CASE WHEN octet_length(v)::bigint * octet_length(p) > 67108864 THEN cairn_too_much_work('position'::text, octet_length(v)::bigint, octet_length(p)::bigint)::int ELSE position(p IN v) END $$;
-- replace's answer is bounded too: a longer replacement can build far
-- more than its arguments (a 16 MiB value of 'a' with 'a' replaced by
-- itself: 256 TiB, built up to PostgreSQL's 1 GB limit before any check).
-- When the worst case passes 64 MiB, the occurrences are counted (one
-- more pass, a value no longer than v) and the exact length decides.
CREATE OR REPLACE FUNCTION cairn_too_long(what text, n bigint) RETURNS boolean
  LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$
BEGIN
  RAISE EXCEPTION '% would build a value of % bytes, more than one call may build in analyst SQL (67108864)', what, n
    USING ERRCODE = 'program_limit_exceeded';
END $$;
CREATE OR REPLACE FUNCTION cairn_replace(v text, p text, r text) RETURNS text LANGUAGE sql STABLE PARALLEL SAFE AS
$$ SELECT CASE WHEN octet_length(v)::bigint * octet_length(p) > 67108864 THEN cairn_too_much_work('replace'::text, octet_length(v)::bigint, octet_length(p)::bigint)::text
  WHEN octet_length(r) > octet_length(p)
    AND octet_length(v)::bigint / greatest(octet_length(p), 1) * octet_length(r) > 67108864
    AND octet_length(v)::bigint + (octet_length(v)::bigint - octet_length(replace(v, p, ''))) / greatest(octet_length(p), 1) * (octet_length(r) - octet_length(p)) > 67108864
    THEN cairn_too_long('replace'::text, octet_length(v)::bigint + (octet_length(v)::bigint - octet_length(replace(v, p, ''))) / greatest(octet_length(p), 1) * (octet_length(r) - octet_length(p)))::text
  ELSE replace(v, p, r) END $$;
CREATE OR REPLACE FUNCTION cairn_btrim(v text, s text) RETURNS text LANGUAGE sql STABLE PARALLEL SAFE AS
$$ SELECT CASE WHEN octet_length(v)::bigint * octet_length(s) > 67108864 THEN cairn_too_much_work('trim'::text, octet_length(v)::bigint, octet_length(s)::bigint)::text ELSE btrim(v, s) END $$;
CREATE OR REPLACE FUNCTION cairn_ltrim(v text, s text) RETURNS text LANGUAGE sql STABLE PARALLEL SAFE AS
$$ SELECT CASE WHEN octet_length(v)::bigint * octet_length(s) > 67108864 THEN cairn_too_much_work('ltrim'::text, octet_length(v)::bigint, octet_length(s)::bigint)::text ELSE ltrim(v, s) END $$;
CREATE OR REPLACE FUNCTION cairn_rtrim(v text, s text) RETURNS text LANGUAGE sql STABLE PARALLEL SAFE AS
$$ SELECT CASE WHEN octet_length(v)::bigint * octet_length(s) > 67108864 THEN cairn_too_much_work('rtrim'::text, octet_length(v)::bigint, octet_length(s)::bigint)::text ELSE rtrim(v, s) END $$;

-- The same searches on char(n) (LIKE keeps its trailing spaces, as
-- PostgreSQL's own LIKE on char(n) does) and on bytea (LIKE, position
-- and trim; PostgreSQL has no ILIKE or replace on bytea).
CREATE OR REPLACE FUNCTION cairn_like(v bpchar, p text) RETURNS boolean LANGUAGE sql STABLE PARALLEL SAFE AS
$$ SELECT CASE WHEN octet_length(v)::bigint * octet_length(p) > 67108864 THEN cairn_too_much_work('LIKE'::text, octet_length(v)::bigint, octet_length(p)::bigint) ELSE v LIKE p END $$;
CREATE OR REPLACE FUNCTION cairn_like(v bpchar, p text, e text) RETURNS boolean LANGUAGE sql STABLE PARALLEL SAFE AS
$$ SELECT CASE WHEN octet_length(v)::bigint * octet_length(p) > 67108864 THEN cairn_too_much_work('LIKE'::text, octet_length(v)::bigint, octet_length(p)::bigint) ELSE v LIKE p ESCAPE e END $$;
CREATE OR REPLACE FUNCTION cairn_ilike(v bpchar, p text) RETURNS boolean LANGUAGE sql STABLE PARALLEL SAFE AS
$$ SELECT CASE WHEN octet_length(v)::bigint * octet_length(p) > 67108864 THEN cairn_too_much_work('ILIKE'::text, octet_length(v)::bigint, octet_length(p)::bigint) ELSE v ILIKE p END $$;
CREATE OR REPLACE FUNCTION cairn_ilike(v bpchar, p text, e text) RETURNS boolean LANGUAGE sql STABLE PARALLEL SAFE AS
$$ SELECT CASE WHEN octet_length(v)::bigint * octet_length(p) > 67108864 THEN cairn_too_much_work('ILIKE'::text, octet_length(v)::bigint, octet_length(p)::bigint) ELSE v ILIKE p ESCAPE e END $$;
CREATE OR REPLACE FUNCTION cairn_like(v bytea, p bytea) RETURNS boolean LANGUAGE sql STABLE PARALLEL SAFE AS
$$ SELECT CASE WHEN octet_length(v)::bigint * octet_length(p) > 67108864 THEN cairn_too_much_work('LIKE'::text, octet_length(v)::bigint, octet_length(p)::bigint) ELSE v LIKE p END $$;
CREATE OR REPLACE FUNCTION cairn_like(v bytea, p bytea, e bytea) RETURNS boolean LANGUAGE sql STABLE PARALLEL SAFE AS
$$ SELECT CASE WHEN octet_length(v)::bigint * octet_length(p) > 67108864 THEN cairn_too_much_work('LIKE'::text, octet_length(v)::bigint, octet_length(p)::bigint) ELSE v LIKE p ESCAPE e END $$;
CREATE OR REPLACE FUNCTION cairn_position(p bytea, v bytea) RETURNS integer LANGUAGE sql STABLE PARALLEL SAFE AS
$$ SELECT CASE WHEN octet_length(v)::bigint * octet_length(p) > 67108864 THEN cairn_too_much_work('position'::text, octet_length(v)::bigint, octet_length(p)::bigint)::int ELSE position(p IN v) END $$;
CREATE OR REPLACE FUNCTION cairn_btrim(v bytea, s bytea) RETURNS bytea LANGUAGE sql STABLE PARALLEL SAFE AS
$$ SELECT CASE WHEN octet_length(v)::bigint * octet_length(s) > 67108864 THEN cairn_too_much_work('trim'::text, octet_length(v)::bigint, octet_length(s)::bigint)::text::bytea ELSE btrim(v, s) END $$;
CREATE OR REPLACE FUNCTION cairn_ltrim(v bytea, s bytea) RETURNS bytea LANGUAGE sql STABLE PARALLEL SAFE AS
$$ SELECT CASE WHEN octet_length(v)::bigint * octet_length(s) > 67108864 THEN cairn_too_much_work('ltrim'::text, octet_length(v)::bigint, octet_length(s)::bigint)::text::bytea ELSE ltrim(v, s) END $$;
CREATE OR REPLACE FUNCTION cairn_rtrim(v bytea, s bytea) RETURNS bytea LANGUAGE sql STABLE PARALLEL SAFE AS
$$ SELECT CASE WHEN octet_length(v)::bigint * octet_length(s) > 67108864 THEN cairn_too_much_work('rtrim'::text, octet_length(v)::bigint, octet_length(s)::bigint)::text::bytea ELSE rtrim(v, s) END $$;

-- Analyst SQL passes every value a call or operator builds that can be
-- longer than its arguments (||, concat, format, replace, upper, lower,
-- to_char, overlay, string_agg: analyst/time_checks.rs, BUILDERS) through
-- this check against the limit of one value (cairn.max_value_bytes, set
-- for the query's transaction; 16 MiB if unset), as SQLite's
-- SQLITE_LIMIT_LENGTH refuses to build one: without it a value doubled
-- in a recursive CTE or through a chain of CTEs reached PostgreSQL's
-- 1 GB limit (a backend of several GB) within the time limit. A value
-- can still be built up to one call's growth past the limit (eight
-- concat arguments) before the check refuses it. PL/pgSQL, so that
-- running it also checks for interrupts.
CREATE OR REPLACE FUNCTION cairn_bounded(v anyelement) RETURNS anyelement
  LANGUAGE plpgsql STABLE PARALLEL SAFE COST 1 AS $$
DECLARE
  limit_bytes bigint := coalesce(nullif(current_setting('cairn.max_value_bytes', true), '')::bigint, 16777216);
BEGIN
  -- pg_column_size counts a value's 4-byte header.
  IF pg_column_size(v) - 4 > limit_bytes THEN
    RAISE EXCEPTION 'a value of % bytes was built, more than the limit of one value in analyst SQL (% bytes)', pg_column_size(v) - 4, limit_bytes
      USING ERRCODE = 'program_limit_exceeded';
  END IF;
  RETURN v;
END $$;
