//! Rebuilds the crate when a migration is added or changed: `sqlx::migrate!` embeds the
//! migrations at compile time and cannot tell cargo which files it read.

fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
