-- jobq with jobq.async_claim off: a claim's commit waits for the WAL flush,
-- as bare's claim transaction does
DO $$BEGIN EXECUTE format('ALTER DATABASE %I SET jobq.async_claim = off', current_database()); END$$;
