//! The flags of `outbox grant`: the names of the least-privilege roles, and whether to apply the
//! script or print it.

/// Longest role name PostgreSQL keeps whole (`NAMEDATALEN - 1` bytes); a longer one is truncated
/// by the server, so two long names could end up the same role.
const MAX_ROLE_NAME: usize = 63;

#[derive(Debug, Clone, clap::Args)]
pub(crate) struct GrantArgs {
    /// The relay's role: reads and updates the outbox, deletes old rows (retention), LISTENs.
    #[arg(long, default_value = "outbox_relay", value_parser = role_name)]
    pub(crate) relay_role: String,
    /// The consumers' role: the inbox tables (grant it the consumers' business tables yourself).
    #[arg(long, default_value = "outbox_consumer", value_parser = role_name)]
    pub(crate) consumer_role: String,
    /// The producing application's role: inserts events and their entities' sequence numbers.
    #[arg(long, default_value = "outbox_producer", value_parser = role_name)]
    pub(crate) producer_role: String,
    /// Run the script on DATABASE_URL (as the tables' owner) instead of printing it.
    #[arg(long)]
    pub(crate) apply: bool,
}

/// A role name PostgreSQL accepts as a quoted identifier, and not one of its reserved `pg_` names.
fn role_name(text: &str) -> Result<String, String> {
    if text.is_empty() {
        return Err("a role name cannot be empty".to_owned());
    }
    if text.len() > MAX_ROLE_NAME {
        return Err(format!("a role name has at most {MAX_ROLE_NAME} bytes"));
    }
    if text.contains('\0') {
        return Err("a role name cannot hold a NUL character".to_owned());
    }
    if text.to_ascii_lowercase().starts_with("pg_") {
        return Err("names starting with pg_ are reserved by PostgreSQL".to_owned());
    }
    Ok(text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn role_names_are_checked() {
        assert_eq!(role_name("orders_relay"), Ok("orders_relay".to_owned()));
        assert_eq!(role_name("Relay \"EU\""), Ok("Relay \"EU\"".to_owned()));
        assert!(role_name(&"r".repeat(63)).is_ok());
        for bad in ["", "pg_relay", "PG_x", "a\0b", &"r".repeat(64)] {
            assert!(role_name(bad).is_err(), "{bad:?} accepted");
        }
    }
}
