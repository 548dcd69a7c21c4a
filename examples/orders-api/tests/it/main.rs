//! The orders API as a client meets it: real HTTP requests (curl) against the running binary,
//! the shipping service consuming what it announces, and a SIGTERM that drains and stops it.

mod api;
mod support;
