--
-- jobq's limits are in bytes of the server's encoding, in every encoding
-- PostgreSQL has: a limit is never exceeded, text jobq cuts (an error kept
-- on a job, a value quoted in an error message) is cut on a character
-- boundary of that encoding, and a name within its limit in one encoding
-- may be over it in another.  The rest of the suite runs in UTF8; here are
-- SQL_ASCII (what initdb makes on a machine without a locale), LATIN1 (one
-- byte a character) and EUC_JP (two or three).
--
\set VERBOSITY terse
CREATE DATABASE jobq_enc_sql_ascii TEMPLATE template0 ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C';
CREATE DATABASE jobq_enc_latin1 TEMPLATE template0 ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C';
CREATE DATABASE jobq_enc_euc_jp TEMPLATE template0 ENCODING 'EUC_JP' LC_COLLATE 'C' LC_CTYPE 'C';

-- The same checks in each database, with :ch a character of two bytes in
-- UTF8: one in LATIN1, two in EUC_JP, and in SQL_ASCII (which knows no
-- multibyte characters: bytes are cut where a limit falls, as PostgreSQL
-- cuts names there) two ASCII characters.
\c jobq_enc_latin1
SET client_encoding = 'UTF8';
\set ch 'é'
CREATE EXTENSION jobq;
SELECT pg_catalog.getdatabaseencoding() AS encoding, octet_length(:'ch') AS bytes_a_character;
-- a kind of 100 characters: 100, 200 or 200 bytes against a 128-byte limit
SELECT created FROM jobq.enqueue(repeat(:'ch', 100));
\echo :SQLSTATE
-- a value quoted in an error message: at most 64 bytes, whole characters
SELECT jobq.priority('x' || repeat(:'ch', 100));
-- an error kept on a job: at most jobq.max_error_length bytes, whole characters
SELECT job_id AS j FROM jobq.enqueue('enc', queue => 'enc') \gset
SELECT job_id AS j, lease_token AS t FROM jobq.claim('enc') \gset
SET jobq.max_error_length = 64;
SELECT jobq.fail(:j, :t, 'x' || repeat(:'ch', 100), retryable => false);
RESET jobq.max_error_length;
SELECT octet_length(last_error) AS bytes, char_length(last_error) AS characters,
       strpos('x' || repeat(:'ch', 100), last_error) = 1 AS a_prefix
  FROM jobq.jobs WHERE job_id = :j;
-- a payload's limit is in bytes of this encoding too
SET jobq.max_payload_size = 100;
SELECT created FROM jobq.enqueue('enc', jsonb_build_object('t', repeat(:'ch', 60)));
\echo :SQLSTATE
RESET jobq.max_payload_size;
-- an idempotency key likewise (jobq.max_key_length bytes)
SET jobq.max_key_length = 64;
SELECT created FROM jobq.enqueue('enc', idempotency_key => repeat(:'ch', 40));
\echo :SQLSTATE
RESET jobq.max_key_length;
SELECT status, count(*) FROM jobq.jobs GROUP BY status ORDER BY status;

\c jobq_enc_euc_jp
SET client_encoding = 'UTF8';
\set ch 'あ'
CREATE EXTENSION jobq;
SELECT pg_catalog.getdatabaseencoding() AS encoding, octet_length(:'ch') AS bytes_a_character;
-- a kind of 100 characters: 100, 200 or 200 bytes against a 128-byte limit
SELECT created FROM jobq.enqueue(repeat(:'ch', 100));
\echo :SQLSTATE
-- a value quoted in an error message: at most 64 bytes, whole characters
SELECT jobq.priority('x' || repeat(:'ch', 100));
-- an error kept on a job: at most jobq.max_error_length bytes, whole characters
SELECT job_id AS j FROM jobq.enqueue('enc', queue => 'enc') \gset
SELECT job_id AS j, lease_token AS t FROM jobq.claim('enc') \gset
SET jobq.max_error_length = 64;
SELECT jobq.fail(:j, :t, 'x' || repeat(:'ch', 100), retryable => false);
RESET jobq.max_error_length;
SELECT octet_length(last_error) AS bytes, char_length(last_error) AS characters,
       strpos('x' || repeat(:'ch', 100), last_error) = 1 AS a_prefix
  FROM jobq.jobs WHERE job_id = :j;
-- a payload's limit is in bytes of this encoding too
SET jobq.max_payload_size = 100;
SELECT created FROM jobq.enqueue('enc', jsonb_build_object('t', repeat(:'ch', 60)));
\echo :SQLSTATE
RESET jobq.max_payload_size;
-- an idempotency key likewise (jobq.max_key_length bytes)
SET jobq.max_key_length = 64;
SELECT created FROM jobq.enqueue('enc', idempotency_key => repeat(:'ch', 40));
\echo :SQLSTATE
RESET jobq.max_key_length;
SELECT status, count(*) FROM jobq.jobs GROUP BY status ORDER BY status;

\c jobq_enc_sql_ascii
SET client_encoding = 'UTF8';
\set ch 'ab'
CREATE EXTENSION jobq;
SELECT pg_catalog.getdatabaseencoding() AS encoding, octet_length(:'ch') AS bytes_a_character;
-- a kind of 100 characters: 100, 200 or 200 bytes against a 128-byte limit
SELECT created FROM jobq.enqueue(repeat(:'ch', 100));
\echo :SQLSTATE
-- a value quoted in an error message: at most 64 bytes, whole characters
SELECT jobq.priority('x' || repeat(:'ch', 100));
-- an error kept on a job: at most jobq.max_error_length bytes, whole characters
SELECT job_id AS j FROM jobq.enqueue('enc', queue => 'enc') \gset
SELECT job_id AS j, lease_token AS t FROM jobq.claim('enc') \gset
SET jobq.max_error_length = 64;
SELECT jobq.fail(:j, :t, 'x' || repeat(:'ch', 100), retryable => false);
RESET jobq.max_error_length;
SELECT octet_length(last_error) AS bytes, char_length(last_error) AS characters,
       strpos('x' || repeat(:'ch', 100), last_error) = 1 AS a_prefix
  FROM jobq.jobs WHERE job_id = :j;
-- a payload's limit is in bytes of this encoding too
SET jobq.max_payload_size = 100;
SELECT created FROM jobq.enqueue('enc', jsonb_build_object('t', repeat(:'ch', 60)));
\echo :SQLSTATE
RESET jobq.max_payload_size;
-- an idempotency key likewise (jobq.max_key_length bytes)
SET jobq.max_key_length = 64;
SELECT created FROM jobq.enqueue('enc', idempotency_key => repeat(:'ch', 40));
\echo :SQLSTATE
RESET jobq.max_key_length;
SELECT status, count(*) FROM jobq.jobs GROUP BY status ORDER BY status;
-- SQL_ASCII's clients mostly write UTF-8: jobq cuts it on a UTF-8 boundary
-- too (cut inside a character, it was invalid to every UTF-8 client)
SELECT job_id AS j FROM jobq.enqueue('enc8', queue => 'enc8') \gset
SELECT job_id AS j, lease_token AS t FROM jobq.claim('enc8') \gset
SET jobq.max_error_length = 64;
SELECT jobq.fail(:j, :t, 'x' || repeat('é', 100), retryable => false);
RESET jobq.max_error_length;
SELECT octet_length(last_error) AS bytes, last_error = 'x' || repeat('é', 31) AS whole_characters
  FROM jobq.jobs WHERE job_id = :j;
SELECT jobq.priority('x' || repeat('é', 100));

\c postgres
DROP DATABASE jobq_enc_sql_ascii;
DROP DATABASE jobq_enc_latin1;
DROP DATABASE jobq_enc_euc_jp;
