//! `--database NAME=URL`, `--databases-file` and `--only`: the flags of a command over many
//! databases. Global: every command but `grant` without `--apply` takes them.

/// Many databases by name (see docs/many-databases.md).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct DatabaseList {
    /// A database among many: `NAME=URL` (repeat the flag). NAME (letters, digits, `_`, `-`, `.`)
    /// labels its metrics, log lines and report. In place of --database-url; a URL here shows in
    /// the process list, so prefer --databases-file for passwords.
    #[arg(long = "database", value_name = "NAME=URL", global = true)]
    pub(crate) databases: Vec<String>,
    /// The databases listed in this file, one `NAME URL` per line (`#` comments). `relay` reads it
    /// again on SIGHUP and when it changes: databases added are taken, those removed given back.
    #[arg(long, value_name = "PATH", global = true)]
    pub(crate) databases_file: Option<std::path::PathBuf>,
    /// Only these databases of the list (by NAME; repeat the flag or separate with commas).
    #[arg(long, value_name = "NAME", value_delimiter = ',', global = true)]
    pub(crate) only: Vec<String>,
}

impl DatabaseList {
    /// Whether databases are listed (the command then works on many, not on --database-url).
    pub(crate) fn is_given(&self) -> bool {
        !self.databases.is_empty() || self.databases_file.is_some()
    }
}
