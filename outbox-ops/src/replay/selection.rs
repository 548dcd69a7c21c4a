//! Which events a replay sends: entities, event types (exact, or with `*` as a wildcard), a time
//! range and ids, all of them together (an event must match every part given). Written into SQL
//! as bound parameters, only the parts given, so that each statement plans for what it filters.

use chrono::{DateTime, Utc};
use outbox_types::EventId;
use serde::{Deserialize, Serialize};
use sqlx::{Postgres, QueryBuilder};
use uuid::Uuid;

/// The events a replay job selects. An empty selection selects every event.
///
/// ```
/// use outbox_ops::replay::ReplaySelection;
///
/// let selection = ReplaySelection::all().entity("order-7").event_type("order.*");
/// assert!(selection.matches_type("order.placed"));
/// assert!(!selection.matches_type("invoice.sent"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ReplaySelection {
    /// Only these entity keys (none given: every entity, and events of no entity).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub entities: Vec<String>,
    /// Only these event types; `*` matches any run of characters (`order.*`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub types: Vec<String>,
    /// Only events created at or after this time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<DateTime<Utc>>,
    /// Only events created before this time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<DateTime<Utc>>,
    /// Only these events.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ids: Vec<EventId>,
}

impl ReplaySelection {
    /// Every published event.
    pub fn all() -> Self {
        Self::default()
    }

    /// Adds an entity key.
    #[must_use]
    pub fn entity(mut self, key: impl Into<String>) -> Self {
        self.entities.push(key.into());
        self
    }

    /// Adds an event type, exact or with `*` wildcards.
    #[must_use]
    pub fn event_type(mut self, pattern: impl Into<String>) -> Self {
        self.types.push(pattern.into());
        self
    }

    /// Only events created at or after `time`.
    #[must_use]
    pub fn since(mut self, time: DateTime<Utc>) -> Self {
        self.since = Some(time);
        self
    }

    /// Only events created before `time`.
    #[must_use]
    pub fn until(mut self, time: DateTime<Utc>) -> Self {
        self.until = Some(time);
        self
    }

    /// Adds an event id.
    #[must_use]
    pub fn id(mut self, id: EventId) -> Self {
        self.ids.push(id);
        self
    }

    /// Whether an event of `event_type` passes the type filter.
    pub fn matches_type(&self, event_type: &str) -> bool {
        self.types.is_empty() || self.types.iter().any(|p| glob_matches(p, event_type))
    }

    /// Appends ` AND <condition>` for each part given, the values bound; `e` is `outbox_events`.
    pub(crate) fn push_conditions(&self, query: &mut QueryBuilder<Postgres>) {
        if !self.entities.is_empty() {
            query.push(" AND e.entity_key = ANY(").push_bind(self.entities.clone()).push(")");
        }
        if !self.types.is_empty() {
            let patterns: Vec<String> = self.types.iter().map(|t| like_pattern(t)).collect();
            query.push(" AND e.event_type LIKE ANY(").push_bind(patterns).push(")");
        }
        if let Some(since) = self.since {
            query.push(" AND e.created_at >= ").push_bind(since);
        }
        if let Some(until) = self.until {
            query.push(" AND e.created_at < ").push_bind(until);
        }
        if !self.ids.is_empty() {
            let ids: Vec<Uuid> = self.ids.iter().map(|id| *id.as_uuid()).collect();
            query.push(" AND e.id = ANY(").push_bind(ids).push(")");
        }
    }
}

/// `pattern` as a `LIKE` pattern: `%`, `_` and `\` taken literally, `*` any run of characters.
fn like_pattern(pattern: &str) -> String {
    let mut like = String::with_capacity(pattern.len());
    for c in pattern.chars() {
        match c {
            '%' | '_' | '\\' => {
                like.push('\\');
                like.push(c);
            }
            '*' => like.push('%'),
            c => like.push(c),
        }
    }
    like
}

/// Whether `text` matches `pattern`, where `*` matches any run of characters (as `LIKE` will).
fn glob_matches(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let (first, rest) = (parts[0], &parts[1..]);
    let Some(mut remaining) = text.strip_prefix(first) else { return false };
    let Some((last, middle)) = rest.split_last() else { return remaining.is_empty() };
    for part in middle {
        match remaining.find(part) {
            Some(at) => remaining = &remaining[at + part.len()..],
            None => return false,
        }
    }
    remaining.len() >= last.len() && remaining.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_match_as_like_does() {
        assert_eq!(like_pattern("order.*"), "order.%");
        assert_eq!(like_pattern("a_b%c\\d"), "a\\_b\\%c\\\\d");
        for (pattern, text, expected) in [
            ("order.placed", "order.placed", true),
            ("order.placed", "order.placed2", false),
            ("order.*", "order.placed", true),
            ("order.*", "order.", true),
            ("order.*", "orders.placed", false),
            ("*.placed", "order.placed", true),
            ("*", "anything", true),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "axxcyyb", false),
            ("a*a", "a", false),
            ("o_der", "order", false),
        ] {
            assert_eq!(glob_matches(pattern, text), expected, "{pattern} ~ {text}");
        }
    }

    #[test]
    fn a_selection_reads_back_as_written() {
        let selection = ReplaySelection::all().entity("order-1").event_type("order.*");
        let json = serde_json::to_value(&selection).expect("json");
        assert_eq!(json, serde_json::json!({"entities": ["order-1"], "types": ["order.*"]}));
        assert_eq!(serde_json::from_value::<ReplaySelection>(json).expect("back"), selection);
        assert_eq!(serde_json::to_value(ReplaySelection::all()).expect("json"), serde_json::json!({}));
    }
}
