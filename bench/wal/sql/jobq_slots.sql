-- what-if (bench/wal/whatif-slot-cache.patch): enqueue keeps its tuple slots across calls
DO $$BEGIN EXECUTE format('ALTER DATABASE %I SET jobq_whatif.slot_cache = on', current_database()); END$$;
