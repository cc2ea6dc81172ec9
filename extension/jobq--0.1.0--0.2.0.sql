/*
 * extension/jobq--0.1.0--0.2.0.sql -- upgrade from release 0.1.0 to 0.2.0
 *
 * Every schema change of 0.2.0 goes here, appended in the order it is made.
 * A fresh CREATE EXTENSION jobq runs jobq--0.1.0.sql and then this script,
 * so what is written here is what every 0.2.0 database has.
 */

\echo Use "ALTER EXTENSION jobq UPDATE TO '0.2.0'" to load this file. \quit
