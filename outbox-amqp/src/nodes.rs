//! The nodes of one broker: the URLs of a cluster's nodes (or of one node), tried in turn.
//!
//! A connection goes to the first node that answers, starting with the node after the one last
//! connected to: a connection lost with its node is opened again on another node at once, and a
//! node that is back is used again when its turn comes. Every node gets one attempt per round;
//! the caller's backoff runs between rounds.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lapin::Connection;

use crate::{Error, check_url, connect};

/// The AMQP URLs of one broker's nodes, in the order they are tried first.
///
/// URLs may hold credentials: `Debug` and every log line show a node by its host and port only.
#[derive(Default)]
pub struct Nodes {
    urls: Vec<String>,
    next: AtomicUsize,
}

impl std::fmt::Debug for Nodes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let nodes: Vec<String> = self.urls.iter().map(|u| address(u)).collect();
        f.debug_struct("Nodes").field("nodes", &nodes).finish_non_exhaustive()
    }
}

impl Clone for Nodes {
    fn clone(&self) -> Self {
        Self { urls: self.urls.clone(), next: AtomicUsize::new(self.next.load(Ordering::Relaxed)) }
    }
}

impl<S: Into<String>> FromIterator<S> for Nodes {
    fn from_iter<I: IntoIterator<Item = S>>(urls: I) -> Self {
        Self { urls: urls.into_iter().map(Into::into).collect(), next: AtomicUsize::new(0) }
    }
}

/// A node's host and port, for logs: never its credentials.
fn address(url: &str) -> String {
    url.parse::<lapin::uri::AMQPUri>()
        .map_or_else(|_| "(invalid URL)".to_owned(), |uri| format!("{}:{}", uri.authority.host, uri.authority.port))
}

impl Nodes {
    /// One node.
    pub fn one(url: impl Into<String>) -> Self {
        std::iter::once(url.into()).collect()
    }

    /// Splits a comma-separated list of URLs (as `AMQP_URL` may hold), ignoring blanks. A comma
    /// inside a password must be percent-encoded (`%2C`).
    pub fn parse_list(list: &str) -> Self {
        list.split(',').map(str::trim).filter(|u| !u.is_empty()).map(str::to_owned).collect()
    }

    /// Adds a node, tried after those already given.
    pub fn push(&mut self, url: impl Into<String>) {
        self.urls.push(url.into());
    }

    /// How many nodes there are.
    pub fn len(&self) -> usize {
        self.urls.len()
    }

    /// Whether no node was given.
    pub fn is_empty(&self) -> bool {
        self.urls.is_empty()
    }

    /// Checks every URL (see [`check_url`]).
    ///
    /// # Errors
    /// [`Error::InvalidUrl`] naming the node's place in the list, never the URL; also when the
    /// list is empty.
    pub fn check(&self) -> Result<(), Error> {
        if self.urls.is_empty() {
            return Err(Error::InvalidUrl("no broker URL given".to_owned()));
        }
        for (i, url) in self.urls.iter().enumerate() {
            check_url(url).map_err(|e| match e {
                Error::InvalidUrl(why) if self.urls.len() > 1 => Error::InvalidUrl(format!("node {}: {why}", i + 1)),
                other => other,
            })?;
        }
        Ok(())
    }

    /// Connects to the first node that answers, starting after the node last connected to, each
    /// attempt bounded by `timeout`; the connection is named `name` in the management UI.
    ///
    /// # Errors
    /// The last node's failure when none answers (see [`connect`]).
    pub async fn connect(&self, name: &str, timeout: Duration) -> Result<Connection, Error> {
        let n = self.urls.len();
        let start = self.next.load(Ordering::Relaxed);
        let mut last = Error::InvalidUrl("no broker URL given".to_owned());
        for k in 0..n {
            let i = (start + k) % n;
            match connect(&self.urls[i], name, timeout).await {
                Ok(connection) => {
                    self.next.store((i + 1) % n, Ordering::Relaxed);
                    if n > 1 {
                        tracing::info!(node = %address(&self.urls[i]), "outbox.broker_connected");
                    }
                    return Ok(connection);
                }
                Err(e) => {
                    if n > 1 {
                        tracing::debug!(node = %address(&self.urls[i]), error = %e, "outbox.broker_node_unavailable");
                    }
                    last = e;
                }
            }
        }
        Err(last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_is_split_on_commas_and_shown_without_credentials() {
        let nodes = Nodes::parse_list(" amqp://u:s3cret@a:5672/%2f, ,amqp://u:s3cret@b:5673/%2f,");
        assert_eq!(nodes.len(), 2);
        assert_eq!(nodes.check(), Ok(()));
        let shown = format!("{nodes:?}");
        assert!(shown.contains("a:5672") && shown.contains("b:5673"), "{shown}");
        assert!(!shown.contains("s3cret"), "{shown}");
    }

    #[test]
    fn a_bad_node_is_named_by_its_place_never_by_its_url() {
        let nodes = Nodes::parse_list("amqp://u:p@a:5672/%2f,http://u:s3cret@b");
        let why = nodes.check().expect_err("second node is not AMQP").to_string();
        assert!(why.contains("node 2"), "{why}");
        assert!(!why.contains("s3cret"), "{why}");
        assert!(Nodes::parse_list(" , ").check().is_err());
    }
}
