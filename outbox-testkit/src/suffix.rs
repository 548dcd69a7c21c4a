//! Random suffixes that keep the names of one test's resources apart from every other test's.

/// A random lowercase suffix for names of test resources.
pub fn unique_suffix() -> String {
    use rand::Rng;
    let n: u64 = rand::rng().random();
    format!("{n:016x}")
}
