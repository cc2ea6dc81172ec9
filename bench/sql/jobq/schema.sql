-- jobq: the extension, one queue 'q'.
DROP EXTENSION IF EXISTS jobq CASCADE;
CREATE EXTENSION jobq;
SELECT jobq.configure('q');
SELECT jobq.configure('keys');
