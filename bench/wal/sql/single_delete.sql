-- variant: removal by DELETE instead of rotation
CREATE OR REPLACE FUNCTION bench_remove() RETURNS void LANGUAGE sql AS $$DELETE FROM sjob WHERE status = 'c'$$;
