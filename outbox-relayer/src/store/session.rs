//! The planner settings of the relay's own sessions, which its statements rely on.

/// Planner settings of the relay's own sessions. Every statement the relay runs is bound to an
/// index or to tuple ids, and the claim must walk the queue index in position order, stopping as
/// soon as it has a batch, and marking the index entries of published rows dead as it passes
/// them. Without table statistics (a new table, or autovacuum off or behind) the planner prefers a
/// bitmap scan that visits every pending row and every dead entry left since the last vacuum and
/// sorts them, on every claim, and never marks an entry dead: the claim's cost then grows with the
/// table instead of with the batch (figures in BENCHMARKS.md).
///
/// A prepared statement keeps, after five executions, a generic plan made with the table as it was
/// then: a relay started beside an empty table, with producers writing while it drains, keeps the
/// plans of an empty table while 100,000 rows arrive. So the hot statements find their rows in a
/// way no table size changes: the claim through the queue index in position order and through
/// tuple ids, the mark through tuple ids. The statements of failures and releases, found by id,
/// are planned at each execution instead (`persistent(false)`): they are rare, and a generic plan
/// made on an empty table reads the whole queue index for them. Planning the claim at every
/// execution would cost about 0.8 ms per batch (figures in BENCHMARKS.md).
///
/// JIT compilation is off: with sequential scans disabled, a statement that must still scan a
/// small table (the listeners) costs more than `jit_above_cost` and would be compiled at every
/// execution, for milliseconds of work on statements that take microseconds.
pub const SESSION: [(&str, &str); 3] = [("enable_bitmapscan", "off"), ("enable_seqscan", "off"), ("jit", "off")];
