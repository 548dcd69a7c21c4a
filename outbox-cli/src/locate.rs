//! Which listed databases a command naming an event, a job or a gap concerns: each database asked
//! whether it holds it, a few at a time, each within a deadline. A command naming quarantined
//! events goes to each database with the ids it holds; one naming a single thing goes to the one
//! database that holds it. Nothing is changed unless everything named was found.

use std::time::Duration;

use outbox_relayer::fleet::FleetDatabase;
use sqlx::{Connection, PgConnection};
use uuid::Uuid;

use crate::args::{Command, EventsCommand, InboxCommand, QuarantineCommand, ReplayCommand};
use crate::error::CliError;
use crate::many::{Outcome, each, reading_deadline};

/// What a command names, to be found among the databases.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Named {
    /// An event of the outbox.
    Event(Uuid),
    /// Quarantined events of the outbox (each may be in another database).
    Quarantined(Vec<Uuid>),
    /// A consumer's failed event in an inbox.
    FailedInbox(String, Uuid),
    /// A consumer's gap before an entity's parked events.
    Gap(String, String),
    /// A replay job.
    Job(Uuid),
}

impl Named {
    /// What `command` names, if it names something a database holds.
    pub(crate) fn of(command: &Command) -> Option<Self> {
        use {InboxCommand as I, QuarantineCommand as Q, ReplayCommand as R};
        Some(match command {
            Command::Events { command: EventsCommand::Show { id, .. } } => Self::Event(*id),
            Command::Quarantine { command: Q::Show { id, .. } } => Self::Quarantined(vec![*id]),
            Command::Quarantine { command: Q::Retry { ids, all: false, .. } | Q::Skip { ids, .. } } => {
                Self::Quarantined(ids.clone())
            }
            Command::Inbox { command: I::Retry { consumer, id } | I::Skip { consumer, id, .. } } => {
                Self::FailedInbox(consumer.clone(), *id)
            }
            Command::Inbox { command: I::SkipGap { consumer, entity, .. } } => {
                Self::Gap(consumer.clone(), entity.clone())
            }
            Command::Replay { command: R::Show { id, .. } | R::Pause { id } | R::Cancel { id } } => Self::Job(*id),
            Command::Replay { command: R::Resume(args) } => Self::Job(args.id),
            _ => return None,
        })
    }

    /// The ids to be found: the events' or the job's (a gap: the nil id, standing for it).
    fn wanted(&self) -> Vec<Uuid> {
        match self {
            Self::Event(id) | Self::FailedInbox(_, id) | Self::Job(id) => vec![*id],
            Self::Quarantined(ids) => ids.clone(),
            Self::Gap(..) => vec![Uuid::nil()],
        }
    }

    /// The ids among [`Named::wanted`] that `conn`'s database holds.
    async fn held(&self, conn: &mut PgConnection) -> Result<Vec<Uuid>, sqlx::Error> {
        let (sql, key): (&str, Option<&str>) = match self {
            Self::Event(_) => ("SELECT id FROM outbox_events WHERE id = ANY($1)", None),
            Self::Quarantined(_) => {
                ("SELECT id FROM outbox_events WHERE id = ANY($1) AND status = 'quarantined'", None)
            }
            Self::Job(_) => ("SELECT id FROM outbox_replay_jobs WHERE id = ANY($1)", None),
            Self::FailedInbox(consumer, _) => (
                "SELECT event_id FROM inbox_events WHERE event_id = ANY($1) AND consumer = $2 AND status = 'failed'",
                Some(consumer),
            ),
            Self::Gap(consumer, entity) => {
                let sql = "SELECT EXISTS (SELECT 1 FROM inbox_events \
                           WHERE consumer = $1 AND entity_key = $2 AND status = 'parked')";
                let parked: bool = sqlx::query_scalar(sql).bind(consumer).bind(entity).fetch_one(conn).await?;
                return Ok(if parked { self.wanted() } else { Vec::new() });
            }
        };
        let query = sqlx::query_scalar(sql).bind(self.wanted());
        match key {
            Some(consumer) => query.bind(consumer).fetch_all(conn).await,
            None => query.fetch_all(conn).await,
        }
    }

    /// How the named thing is called in a message (of the quarantined events, those `missing`).
    fn describe(&self, missing: &[Uuid]) -> String {
        match self {
            Self::Event(id) => format!("event {id}"),
            Self::Quarantined(_) => {
                format!("quarantined event(s) {}", missing.iter().map(Uuid::to_string).collect::<Vec<_>>().join(", "))
            }
            Self::FailedInbox(consumer, id) => format!("{consumer}'s failed event {id}"),
            Self::Gap(consumer, entity) => format!("{consumer}'s gap for entity {entity:?}"),
            Self::Job(id) => format!("replay job {id}"),
        }
    }

    /// The error for what no database holds, when every database answered.
    fn missing(&self, missing: &[Uuid]) -> CliError {
        match self {
            Self::Event(id) => CliError::NoSuchEvent(outbox_types::EventId::from_uuid(*id)),
            Self::Quarantined(_) => {
                CliError::NotQuarantined(missing.iter().map(Uuid::to_string).collect::<Vec<_>>().join(", "))
            }
            Self::FailedInbox(consumer, id) => {
                CliError::NoSuchInboxEvent(outbox_types::EventId::from_uuid(*id), consumer.clone())
            }
            Self::Gap(consumer, entity) => CliError::NoGap(entity.clone(), consumer.clone()),
            Self::Job(id) => CliError::NoSuchJob(*id),
        }
    }
}

/// The databases holding what `command` names, each with the command for its part (a command
/// naming quarantined events gets the ids its database holds).
///
/// # Errors
/// Something named is in no database ([`CliError::NotFoundAmong`] when some could not be read,
/// else the command's own "no such" error); something in several ([`CliError::FoundInSeveral`]).
pub(crate) async fn locate(
    databases: Vec<FleetDatabase>,
    timeout: Duration,
    command: &Command,
    named: &Named,
) -> Result<Vec<(FleetDatabase, Command)>, CliError> {
    let outcomes = each(databases.clone(), reading_deadline(timeout), |database| async move {
        let mut conn = crate::connect::within(database.connect_options(), timeout).await?;
        let held = named.held(&mut conn).await;
        let _ = conn.close().await;
        // In the order the operator gave them.
        let held = held?;
        Ok(named.wanted().into_iter().filter(|id| held.contains(id)).collect::<Vec<Uuid>>())
    })
    .await;
    check(named, &outcomes)?;
    let holding = databases.into_iter().zip(outcomes).filter_map(|(database, o)| match o.result {
        Ok(ids) if !ids.is_empty() => Some((database, part(command, ids))),
        _ => None,
    });
    Ok(holding.collect())
}

/// Fails unless everything named was found, each in exactly one database.
fn check(named: &Named, outcomes: &[Outcome<Vec<Uuid>>]) -> Result<(), CliError> {
    let holders = |id: &Uuid| -> Vec<&str> {
        let holds = |o: &&Outcome<Vec<Uuid>>| o.result.as_ref().is_ok_and(|ids| ids.contains(id));
        outcomes.iter().filter(holds).map(|o| o.name.as_str()).collect()
    };
    let wanted = named.wanted();
    let missing: Vec<Uuid> = wanted.iter().filter(|id| holders(id).is_empty()).copied().collect();
    let unread: Vec<&Outcome<Vec<Uuid>>> = outcomes.iter().filter(|o| o.result.is_err()).collect();
    match (missing.is_empty(), unread.first()) {
        (true, _) => {}
        (false, None) => return Err(named.missing(&missing)),
        (false, Some(first)) => {
            let names = unread.iter().map(|o| o.name.as_str()).collect::<Vec<_>>().join(", ");
            let why = first.result.as_ref().err().map(String::as_str).unwrap_or_default();
            return Err(CliError::NotFoundAmong(named.describe(&missing), unread.len(), format!("{names} ({why})")));
        }
    }
    // A copied database: which copy is meant is for --only to say.
    match wanted.iter().map(|id| (*id, holders(id))).find(|(_, holders)| holders.len() > 1) {
        None => Ok(()),
        Some((id, several)) => Err(CliError::FoundInSeveral(named.describe(&[id]), several.join(", "))),
    }
}

/// `command` narrowed to the quarantined `ids` one database holds (other commands unchanged).
fn part(command: &Command, ids: Vec<Uuid>) -> Command {
    match command {
        Command::Quarantine { command: QuarantineCommand::Retry { all: false, kind, .. } } => {
            Command::Quarantine { command: QuarantineCommand::Retry { ids, all: false, kind: *kind } }
        }
        Command::Quarantine { command: QuarantineCommand::Skip { yes, reason, .. } } => {
            Command::Quarantine { command: QuarantineCommand::Skip { ids, yes: *yes, reason: reason.clone() } }
        }
        other => other.clone(),
    }
}
