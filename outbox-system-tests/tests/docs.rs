//! Docs that cannot drift from the code: every public builder setter appears in
//! docs/configuration.md, every grant of `outbox grant` in docs/security.md's privilege table,
//! every source file of a published crate in docs/architecture.md's crate map, and the README's
//! status table carries no figures (BENCHMARKS.md holds them). Every `outbox` flag appearing in
//! docs/configuration.md is checked by `outbox-cli`'s own test (it walks clap's command tree).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The published crates' folders.
const PUBLISHED: [&str; 8] = [
    "outbox-types",
    "outbox-producer",
    "outbox-ops",
    "outbox-amqp",
    "outbox-relayer",
    "outbox-inbox",
    "outbox-testkit",
    "outbox-cli",
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every `.rs` file under `dir`, as paths relative to it.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())).flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|x| x == "rs") {
                found.push(path.strip_prefix(dir).expect("under dir").to_path_buf());
            }
        }
    }
    found.sort();
    found
}

/// The names of `pub fn name(mut self` in `source`: builder setters.
fn setters(source: &str) -> Vec<String> {
    source
        .lines()
        .filter_map(|line| line.trim_start().strip_prefix("pub fn "))
        .filter(|rest| rest.contains("(mut self"))
        .filter_map(|rest| rest.split(['(', '<']).next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_public_builder_setter_is_in_the_configuration_reference() {
    let reference = read("docs/configuration.md");
    let mut missing = BTreeSet::new();
    for folder in PUBLISHED {
        let src = root().join(folder).join("src");
        for file in sources(&src) {
            let text = std::fs::read_to_string(src.join(&file)).expect("source");
            if !text.contains("Builder") {
                continue;
            }
            for name in setters(&text) {
                let named = [
                    format!("`{name}`"),
                    format!("`{name}("),
                    format!("::{name}`"),
                    format!(".{name}("),
                    format!("::{name}("),
                ];
                if !named.iter().any(|form| reference.contains(form.as_str())) {
                    missing.insert(format!("{folder}/src/{}: {name}", file.display()));
                }
            }
        }
    }
    assert!(missing.is_empty(), "setters missing from docs/configuration.md:\n{}", lines(&missing));
}

#[test]
fn every_grant_of_the_roles_is_in_the_security_privilege_table() {
    let roles = read("outbox-cli/sql/roles.sql");
    let security = read("docs/security.md");
    let table = privilege_rows(&security);
    let mut missing = BTreeSet::new();
    for (object, role, privileges) in grants(&roles) {
        let present =
            table.iter().any(|(r, o, p)| *r == role && o.contains(&format!("`{object}`")) && *p == privileges);
        if !present {
            missing.insert(format!("{role}: {object} {privileges}"));
        }
    }
    assert!(missing.is_empty(), "grants missing from docs/security.md's table:\n{}", lines(&missing));
}

/// `('table', roles[n], 'PRIVILEGES')` of roles.sql, with the role by name.
fn grants(roles: &str) -> Vec<(String, &'static str, String)> {
    let names = ["relay", "consumer", "producer"];
    let mut found = Vec::new();
    for line in roles.lines() {
        let Some(tuple) = line.trim().strip_prefix("('") else { continue };
        let parts: Vec<&str> = tuple.split('\'').collect();
        let Some(n) = line.split("roles[").nth(1).and_then(|r| r.split(']').next()) else { continue };
        let (Ok(n), Some(object), Some(privileges)) = (n.parse::<usize>(), parts.first(), parts.get(2)) else {
            continue;
        };
        found.push((object.trim().to_owned(), names[n - 1], privileges.trim().to_owned()));
    }
    assert!(found.len() >= 10, "roles.sql's grants were not found: the parser needs updating");
    found
}

/// The privilege table's rows as (role, object cell, privileges cell); a row with an empty first
/// cell belongs to the role above.
fn privilege_rows(security: &str) -> Vec<(&'static str, String, String)> {
    let mut rows = Vec::new();
    let mut role = "";
    for line in security.lines().skip_while(|l| !l.starts_with("| role")).skip(2) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 5 {
            break;
        }
        for name in ["relay", "consumer", "producer"] {
            if cells[1].starts_with(name) {
                role = name;
            }
        }
        rows.push((role, cells[2].to_owned(), cells[3].to_owned()));
    }
    rows
}

#[test]
fn every_source_file_of_a_published_crate_is_in_the_crate_map() {
    let architecture = read("docs/architecture.md");
    let mut missing = BTreeSet::new();
    for folder in PUBLISHED {
        let bullet = crate_bullet(&architecture, folder);
        for file in sources(&root().join(folder).join("src")) {
            let name = file.file_name().and_then(|n| n.to_str()).expect("file name");
            if matches!(name, "lib.rs" | "main.rs" | "mod.rs") {
                continue;
            }
            if !bullet.contains(&format!("`{name}`")) && !bullet.contains(&format!("/{name}`")) {
                missing.insert(format!("{folder}/src/{}", file.display()));
            }
        }
    }
    assert!(missing.is_empty(), "files missing from docs/architecture.md's crate map:\n{}", lines(&missing));
}

/// The bullet of "Inside the crates" for `folder`: from "- `folder/src/`" to the next bullet.
fn crate_bullet<'a>(architecture: &'a str, folder: &str) -> &'a str {
    let start = architecture
        .find(&format!("- `{folder}/src/`"))
        .unwrap_or_else(|| panic!("docs/architecture.md has no bullet for {folder}/src/"));
    let rest = &architecture[start + 2..];
    rest.find("\n- ").map_or(rest, |end| &rest[..end])
}

#[test]
fn the_readme_status_table_carries_no_figures() {
    let readme = read("README.md");
    let status = readme.split("## Status").nth(1).expect("a status section");
    let table: Vec<&str> =
        status.lines().skip_while(|l| !l.starts_with('|')).take_while(|l| l.starts_with('|')).collect();
    assert!(!table.is_empty(), "the status table");
    for row in table {
        let state = row.trim_end_matches('|').rsplit('|').next().unwrap_or_default();
        assert!(!state.chars().any(|c| c.is_ascii_digit()), "a figure in the README's status table: {row}");
    }
}

fn lines(set: &BTreeSet<String>) -> String {
    set.iter().map(|s| format!("  {s}")).collect::<Vec<_>>().join("\n")
}
