//! Many databases by name, from `--database NAME=URL` flags and a `--databases-file`, narrowed by
//! `--only`: what every command works on in place of `--database-url`.

use outbox_relayer::fleet::FleetDatabase;

use crate::args::DatabaseList;
use crate::error::CliError;

/// The databases of the `--database` flags, then those of the file (only those `--only` names, if
/// given); with the text they were read from, to notice a change.
///
/// # Errors
/// [`CliError::DatabaseList`]: a flag or a line that does not read (named by its number, never
/// by its URL), a file that cannot be read, a name listed twice, an empty list, a name given to
/// `--only` that is not listed.
pub(crate) fn read(list: &DatabaseList) -> Result<(String, Vec<FleetDatabase>), CliError> {
    let mut text = String::new();
    for (i, flag) in list.databases.iter().enumerate() {
        FleetDatabase::parse(flag).map_err(|why| CliError::DatabaseList(format!("--database #{}: {why}", i + 1)))?;
        text.push_str(flag);
        text.push('\n');
    }
    let mut databases = FleetDatabase::parse_list(&text).map_err(|e| CliError::DatabaseList(e.to_string()))?;
    if let Some(path) = &list.databases_file {
        let file = std::fs::read_to_string(path)
            .map_err(|e| CliError::DatabaseList(format!("cannot read {}: {e}", path.display())))?;
        let listed = FleetDatabase::parse_list(&file)
            .map_err(|e| CliError::DatabaseList(format!("{}: {}", path.display(), e)))?;
        for database in listed {
            if databases.iter().any(|d| d.name() == database.name()) {
                let why = format!("the name {} is listed twice (a flag and the file)", database.name());
                return Err(CliError::DatabaseList(why));
            }
            databases.push(database);
        }
        text.push_str(&file);
    }
    if databases.is_empty() {
        return Err(CliError::DatabaseList("no database listed: the list is empty".to_owned()));
    }
    Ok((text, only(databases, &list.only)?))
}

/// The databases named by `--only` (all of them if it is not given), in the order listed.
fn only(databases: Vec<FleetDatabase>, names: &[String]) -> Result<Vec<FleetDatabase>, CliError> {
    if let Some(stranger) = names.iter().find(|n| !databases.iter().any(|d| d.name() == n.as_str())) {
        return Err(CliError::DatabaseList(format!("--only {stranger}: no database of that name is listed")));
    }
    if names.is_empty() {
        return Ok(databases);
    }
    Ok(databases.into_iter().filter(|d| names.iter().any(|n| n == d.name())).collect())
}
