/*
 * jobq base install script, assembled by the Makefile from
 * extension/parts/NN_*.sql in name order (one part per concern).
 */

\echo Use "CREATE EXTENSION jobq" to load this file. \quit
