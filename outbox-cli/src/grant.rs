//! `outbox grant`: the least-privilege roles of `migrations/roles.sql` for the relay, the
//! consumers and the producing application, printed with the names filled in (for a DBA, or
//! `psql -f`), or applied on the database.

use std::time::Duration;

use sqlx::postgres::PgConnectOptions;

use crate::args::GrantArgs;
use crate::error::CliError;

/// The script, as psql runs it: psql's `\if` lines set the default names; `:'name'` is a psql
/// variable quoted as a literal.
const SCRIPT: &str = include_str!("../sql/roles.sql");

/// The script for `args`' role names, as plain SQL any client can run: each psql variable
/// replaced by its name as a string literal, the psql meta-commands left out.
pub(crate) fn script(args: &GrantArgs) -> String {
    let names = [
        ("relay_role", &args.relay_role),
        ("consumer_role", &args.consumer_role),
        ("producer_role", &args.producer_role),
    ];
    let mut sql: String = SCRIPT.lines().filter(|line| !line.starts_with('\\')).flat_map(|line| [line, "\n"]).collect();
    for (variable, name) in names {
        sql = sql.replace(&format!(":'{variable}'"), &literal(name));
    }
    sql
}

/// `text` as an SQL string literal (standard conforming strings: only `'` is special).
fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// Prints the script to standard output.
pub(crate) fn print(args: &GrantArgs) {
    print!("{}", script(args));
}

/// Runs the script on the database, in one transaction: the roles exist (created without LOGIN
/// if they did not) and hold exactly the script's privileges on the product's tables.
///
/// # Errors
/// The connection's failure, or the database's refusal (the connected role may not grant on the
/// tables or create roles).
pub(crate) async fn apply(args: &GrantArgs, options: &PgConnectOptions, timeout: Duration) -> Result<(), CliError> {
    let mut conn = crate::connect::within(options, timeout).await?;
    sqlx::raw_sql(sqlx::AssertSqlSafe(script(args))).execute(&mut conn).await?;
    tracing::info!(
        relay = %args.relay_role,
        consumer = %args.consumer_role,
        producer = %args.producer_role,
        "least-privilege roles granted"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(relay: &str) -> GrantArgs {
        GrantArgs {
            relay_role: relay.to_owned(),
            consumer_role: "outbox_consumer".to_owned(),
            producer_role: "outbox_producer".to_owned(),
            apply: false,
        }
    }

    #[test]
    fn every_variable_is_filled_in_and_no_psql_command_is_left() {
        let sql = script(&args("orders_relay"));
        assert!(!sql.contains(":'") && !sql.contains(":\""), "{sql}");
        assert!(!sql.lines().any(|l| l.starts_with('\\')), "{sql}");
        assert!(sql.contains("SET LOCAL outbox.relay_role = 'orders_relay';"), "{sql}");
        assert!(sql.contains("SET LOCAL outbox.consumer_role = 'outbox_consumer';"), "{sql}");
        assert!(sql.trim_start().starts_with("--") && sql.trim_end().ends_with("COMMIT;"), "{sql}");
    }

    #[test]
    fn a_quote_in_a_name_stays_inside_its_literal() {
        let sql = script(&args("it's"));
        assert!(sql.contains("SET LOCAL outbox.relay_role = 'it''s';"), "{sql}");
    }
}
