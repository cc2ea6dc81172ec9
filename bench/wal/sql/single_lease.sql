-- single_lease: single, plus what the reaper and exact concurrency limits
-- need once no index of the job row may change: a table of the running
-- jobs' leases (a row inserted by the claim, deleted by the completion),
-- keyed by job id (complete and fail find it), with an index by queue and
-- expiry (the reaper's walk, the running count under a limit).  A trigger
-- writes it here; the WAL is what a claim and a completion writing it
-- themselves would write.
CREATE TABLE slease (
    job_id           bigint PRIMARY KEY,
    queue            text COLLATE "C" NOT NULL,
    lease_expires_at timestamptz NOT NULL
) WITH (fillfactor = 100);
CREATE INDEX slease_expiry_idx ON slease (queue, lease_expires_at);
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
