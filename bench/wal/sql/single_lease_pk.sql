-- single_lease_pk: single_lease without the index by queue and expiry: the
-- reaper and the limits would read the whole lease table (the running jobs,
-- and what its churn leaves until vacuumed); complete and fail find a lease
-- by its primary key.  A trigger writes it here, as in single_lease.
CREATE TABLE slease (
    job_id           bigint PRIMARY KEY,
    queue            text COLLATE "C" NOT NULL,
    lease_expires_at timestamptz NOT NULL
) WITH (fillfactor = 100);
CREATE FUNCTION slease_track() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.status = 'p' AND NEW.status = 'r' THEN
        INSERT INTO slease VALUES (NEW.job_id, NEW.queue, NEW.lease_expires_at);
    ELSIF OLD.status = 'r' AND NEW.status <> 'r' THEN
        DELETE FROM slease WHERE job_id = NEW.job_id;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER sjob_lease AFTER UPDATE OF status ON sjob FOR EACH ROW EXECUTE FUNCTION slease_track();
