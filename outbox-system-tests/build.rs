//! Pastes the Rust blocks of the README's walk-through ("From a committed change to a consumed
//! event"), one after the other, into `$OUT_DIR/readme.rs`, as a new user pastes them into
//! `src/main.rs`. The `readme` system test includes that file and runs it: the test runs the
//! README's own code, unchanged, never a copy of it.

const README: &str = "../README.md";
const SECTION: &str = "## From a committed change to a consumed event";

fn main() {
    println!("cargo::rerun-if-changed={README}");
    let readme = std::fs::read_to_string(README).expect("README.md beside the workspace's crates");
    let blocks = rust_blocks(&readme);
    assert!(blocks.len() >= 4, "the README's walk-through has {} Rust blocks, not 4", blocks.len());
    let pasted =
        format!("// Pasted by outbox-system-tests/build.rs from README.md: do not edit.\n{}", blocks.join("\n"));
    let path = std::path::Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR")).join("readme.rs");
    std::fs::write(path, pasted).expect("write readme.rs");
}

/// The bodies of the ```rust blocks between [`SECTION`] and the next `## ` heading.
fn rust_blocks(readme: &str) -> Vec<String> {
    let start = readme.find(SECTION).expect("the README's walk-through section");
    let section = &readme[start + SECTION.len()..];
    let section = section.find("\n## ").map_or(section, |end| &section[..end]);
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in section.lines() {
        match (&mut current, line.trim_start()) {
            (None, fence) if fence.starts_with("```rust") => current = Some(String::new()),
            (Some(_), "```") => blocks.extend(current.take()),
            (Some(body), _) => {
                body.push_str(line);
                body.push('\n');
            }
            (None, _) => {}
        }
    }
    blocks
}
