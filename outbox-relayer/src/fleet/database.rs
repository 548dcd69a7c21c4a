//! [`FleetDatabase`]: one database a fleet relays, by name; and the list of them as a file holds it.

use sqlx::postgres::PgConnectOptions;

use crate::{Error, Result};

/// One database a [`Fleet`](super::Fleet) relays: a short name (its metrics' `database` label, the
/// field `database` of its log lines, what the fleet's processes agree on) and where it is.
#[derive(Clone)]
pub struct FleetDatabase {
    pub(super) name: String,
    pub(super) connect: PgConnectOptions,
}

impl std::fmt::Debug for FleetDatabase {
    // Connect options hold a password: only the name is shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetDatabase").field("name", &self.name).finish_non_exhaustive()
    }
}

impl FleetDatabase {
    /// The database `name` at `connect`.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] if the name is not 1 to 63 letters, digits, `_`, `-` or `.`.
    pub fn new(name: impl Into<String>, connect: PgConnectOptions) -> Result<Self> {
        let name = name.into();
        let valid = (1..=63).contains(&name.len())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
        if !valid {
            return Err(Error::InvalidConfig("a database's name is 1 to 63 letters, digits, '_', '-' or '.'"));
        }
        Ok(Self { name, connect })
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Where the database is.
    pub fn connect_options(&self) -> &PgConnectOptions {
        &self.connect
    }

    /// Where the database is, as a hash: a changed URL (a new password) is noticed without a copy
    /// of the password kept.
    pub(super) fn fingerprint(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        format!("{:?}", self.connect).hash(&mut h);
        h.finish()
    }

    /// Reads a list of databases, one per line: `NAME URL` (or `NAME=URL`), blank lines and lines
    /// starting with `#` left out. Names are unique. Errors name the line, never its URL.
    ///
    /// ```
    /// use outbox_relayer::fleet::FleetDatabase;
    ///
    /// let list = FleetDatabase::parse_list(
    ///     "# tenants\ntenant-a postgres://relay@db1/tenant_a\ntenant-b=postgres://relay@db2/tenant_b\n",
    /// )?;
    /// assert_eq!(list.iter().map(FleetDatabase::name).collect::<Vec<_>>(), ["tenant-a", "tenant-b"]);
    /// # Ok::<(), outbox_relayer::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidList`] for a line without a URL, a URL that does not parse, an invalid or a
    /// repeated name.
    pub fn parse_list(text: &str) -> Result<Vec<Self>> {
        let mut list: Vec<Self> = Vec::new();
        for (n, line) in text.lines().enumerate().map(|(i, l)| (i + 1, l.trim())) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let database = Self::parse(line).map_err(|why| Error::InvalidList(format!("line {n}: {why}")))?;
            if list.iter().any(|d| d.name == database.name) {
                return Err(Error::InvalidList(format!("line {n}: the name {} is listed twice", database.name)));
            }
            list.push(database);
        }
        Ok(list)
    }

    /// One `NAME URL` or `NAME=URL`; the reason it is not one, naming neither the URL nor a name
    /// that is not valid (a URL given without its name could be taken for one).
    pub fn parse(line: &str) -> std::result::Result<Self, String> {
        let expected = || "expected NAME URL (or NAME=URL)".to_owned();
        let (name, url) = line.split_once(char::is_whitespace).or_else(|| line.split_once('=')).ok_or_else(expected)?;
        let (name, url) = (name.trim(), url.trim());
        let connect = |url: &str| url.parse::<PgConnectOptions>().ok();
        let postgres = url.starts_with("postgres://") || url.starts_with("postgresql://");
        match Self::new(name, PgConnectOptions::new()) {
            Err(_) => Err(format!("{} (a name is 1 to 63 letters, digits, '_', '-' or '.')", expected())),
            Ok(_) if !postgres => Err(format!("the URL of {name} is not a PostgreSQL URL (postgres://...)")),
            Ok(_) => connect(url)
                .map(|connect| Self { name: name.to_owned(), connect })
                .ok_or_else(|| format!("the URL of {name} is not a PostgreSQL URL")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_line_is_named_by_its_number_and_never_shows_its_url() {
        let secret = "postgres://relay:hunter2@db/x";
        let e = FleetDatabase::parse_list(&format!("a {secret}\nb\n")).expect_err("no URL");
        assert_eq!(e.to_string(), "invalid list of databases: line 2: expected NAME URL (or NAME=URL)");
        let e = FleetDatabase::parse_list(&format!("a {secret}\na {secret}\n")).expect_err("twice");
        assert!(e.to_string().contains("line 2: the name a is listed twice"), "{e}");
        let e = FleetDatabase::parse_list("a mysql://relay:hunter2@db/x\n").expect_err("not PostgreSQL");
        assert!(!e.to_string().contains("hunter2"), "{e}");
        let e = FleetDatabase::parse_list(&format!("tenant/a {secret}\n")).expect_err("bad name");
        assert!(e.to_string().contains("line 1:") && !e.to_string().contains("hunter2"), "{e}");
        // A URL without its name, or before it, is never echoed as a name.
        for line in [format!("{secret}?sslmode=require"), format!("{secret} tenant-a"), format!("{secret}=x")] {
            let e = FleetDatabase::parse_list(&line).expect_err("no name");
            assert!(!e.to_string().contains("hunter2"), "{line}: {e}");
        }
        assert!(!format!("{:?}", FleetDatabase::parse(&format!("a {secret}")).expect("parses")).contains("hunter2"));
    }
}
