//! [`Tenants`]: a multi-tenant inbox's databases, one per tenant, and how an event names its
//! tenant.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use outbox_types::Event;
use sqlx::PgPool;

use crate::{Error, Result};

/// The longest tenant name an error quotes; a longer one is cut (it comes from a delivery).
const QUOTED_NAME: usize = 64;

/// The application's own rule naming an event's tenant.
type Rule = Arc<dyn Fn(&Event) -> Option<String> + Send + Sync>;

/// How an event names its tenant.
#[derive(Clone)]
enum TenantOf {
    /// A string header the producer sets.
    Header(Arc<str>),
    /// The entity key's part before the first separator (`acme:order-7` is tenant `acme`).
    EntityPrefix(char),
    /// The application's own rule.
    Custom(Rule),
}

impl std::fmt::Debug for TenantOf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Header(name) => f.debug_tuple("Header").field(name).finish(),
            Self::EntityPrefix(sep) => f.debug_tuple("EntityPrefix").field(sep).finish(),
            Self::Custom(_) => f.write_str("Custom"),
        }
    }
}

/// The databases of a multi-tenant inbox: each event is applied in its tenant's database, where
/// the inbox keeps that tenant's dedup and sequence records beside the handler's writes (each
/// tenant's database needs the inbox's tables: [`Tenants::migrate`]).
///
/// An event whose tenant cannot be read, or names a tenant that is not listed, fails with
/// [`Error::UnknownTenant`]: permanent, so the runner dead-letters it with the reason
/// `unknown_tenant` and nothing is written anywhere. Tenants can be added and removed while the
/// inbox runs ([`Tenants::insert`], [`Tenants::remove`]); the list is shared by every clone.
///
/// ```no_run
/// use outbox_inbox::{HandlerError, InboxLayer, InboxRequest, Tenants};
/// use tower::Layer;
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let tenants = Tenants::by_header("tenant")
///     .tenant("acme", sqlx::PgPool::connect_lazy("postgres://postgres@127.0.0.1/acme")?)
///     .tenant("globex", sqlx::PgPool::connect_lazy("postgres://postgres@127.0.0.1/globex")?);
/// tenants.migrate().await?; // the inbox's tables in every tenant's database
/// let handler = tower::service_fn(|req: InboxRequest| async move { Ok::<_, HandlerError>(req) });
/// let service = InboxLayer::for_tenants(tenants, "shipping").layer(handler);
/// # let _ = service;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Tenants {
    of: TenantOf,
    pools: Arc<RwLock<BTreeMap<Arc<str>, PgPool>>>,
}

impl Tenants {
    fn new(of: TenantOf) -> Self {
        Self { of, pools: Arc::default() }
    }

    /// The header naming the tenant, when a header does.
    pub(crate) fn header(&self) -> Option<&str> {
        match &self.of {
            TenantOf::Header(name) => Some(name),
            TenantOf::EntityPrefix(_) | TenantOf::Custom(_) => None,
        }
    }

    /// Tenants named by the string header `name`, which the producer sets on each event
    /// (`NewEvent::header`).
    pub fn by_header(name: impl Into<String>) -> Self {
        Self::new(TenantOf::Header(Arc::from(name.into())))
    }

    /// Tenants named by the entity key's part before the first `separator`: with `':'`, the
    /// events of `acme:order-7` belong to tenant `acme`. An event without an entity, or whose key
    /// holds no separator, names no tenant.
    pub fn by_entity_prefix(separator: char) -> Self {
        Self::new(TenantOf::EntityPrefix(separator))
    }

    /// Tenants named by the application's own rule; `None` names no tenant.
    pub fn by(rule: impl Fn(&Event) -> Option<String> + Send + Sync + 'static) -> Self {
        Self::new(TenantOf::Custom(Arc::new(rule)))
    }

    /// Adds the tenant `name` whose database `pool` reaches (builder style).
    #[must_use]
    pub fn tenant(self, name: impl Into<String>, pool: PgPool) -> Self {
        self.insert(name, pool);
        self
    }

    /// Adds or replaces the tenant `name` while the inbox runs; returns the pool it replaced.
    pub fn insert(&self, name: impl Into<String>, pool: PgPool) -> Option<PgPool> {
        self.write().insert(Arc::from(name.into()), pool)
    }

    /// Removes the tenant `name`: its later events are dead-lettered as of an unknown tenant.
    /// Returns its pool (close it once the events in hand are done).
    pub fn remove(&self, name: &str) -> Option<PgPool> {
        self.write().remove(name)
    }

    /// The tenants' names, in order.
    pub fn names(&self) -> Vec<String> {
        self.read().keys().map(|n| n.to_string()).collect()
    }

    /// The tenant `name`'s pool.
    pub fn pool(&self, name: &str) -> Option<PgPool> {
        self.read().get(name).cloned()
    }

    /// Applies the inbox's migrations to every tenant's database, one after the other.
    ///
    /// # Errors
    /// [`Error::TenantMigration`] for the first database that fails, named by its tenant.
    pub async fn migrate(&self) -> Result<()> {
        for (name, pool) in self.all() {
            crate::migrate(&pool).await.map_err(|e| Error::TenantMigration(name.to_string(), e.to_string()))?;
        }
        Ok(())
    }

    /// Every tenant with its pool.
    pub(crate) fn all(&self) -> Vec<(Arc<str>, PgPool)> {
        self.read().iter().map(|(n, p)| (n.clone(), p.clone())).collect()
    }

    /// The event's tenant and its pool, or [`Error::UnknownTenant`] saying why there is none.
    pub(crate) fn resolve(&self, event: &Event) -> Result<(Arc<str>, PgPool)> {
        let name = self.name_of(event)?;
        let pools = self.read();
        match pools.get_key_value(name.as_str()) {
            Some((name, pool)) => Ok((name.clone(), pool.clone())),
            None => Err(Error::UnknownTenant(format!("tenant `{}` is not listed", quoted(&name)))),
        }
    }

    fn name_of(&self, event: &Event) -> Result<String> {
        let unknown = |why: String| Error::UnknownTenant(why);
        match &self.of {
            TenantOf::Header(header) => match event.headers.get(&**header).map(|v| v.as_str()) {
                Some(Some(name)) if !name.is_empty() => Ok(name.to_owned()),
                Some(_) => Err(unknown(format!("header `{header}` is not a tenant name"))),
                None => Err(unknown(format!("no header `{header}`"))),
            },
            TenantOf::EntityPrefix(sep) => match &event.entity {
                Some(entity) => match entity.key.split_once(*sep) {
                    Some((name, _)) if !name.is_empty() => Ok(name.to_owned()),
                    _ => Err(unknown(format!("the entity key has no tenant before `{sep}`"))),
                },
                None => Err(unknown("the event has no entity".to_owned())),
            },
            TenantOf::Custom(rule) => rule(event).ok_or_else(|| unknown("the event names no tenant".to_owned())),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<Arc<str>, PgPool>> {
        self.pools.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<Arc<str>, PgPool>> {
        self.pools.write().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A name from a delivery as an error quotes it: at most 64 characters, each a letter, a digit
/// or one of `-_.:@`, any other shown as `?` (no control, bidi or quoting character reaches a log
/// line or a dead letter's detail).
fn quoted(name: &str) -> String {
    let plain = |c: char| c.is_alphanumeric() || "-_.:@".contains(c);
    name.chars().take(QUOTED_NAME).map(|c| if plain(c) { c } else { '?' }).collect()
}

/// Where an inbox keeps its records: one database, or one per tenant.
#[derive(Debug, Clone)]
pub(crate) enum Databases {
    /// One database for every event.
    One(PgPool),
    /// A database per tenant.
    Tenants(Tenants),
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use outbox_types::{HeaderValue, NewEvent};

    use super::*;

    fn pool() -> PgPool {
        PgPool::connect_lazy("postgres://nobody@127.0.0.1:1/none").expect("lazy pool")
    }

    fn event(entity: &str, tenant: Option<HeaderValue>) -> Event {
        let mut event = NewEvent::json("t", &1).expect("json").entity(entity).into_event(Some(1), SystemTime::now());
        if let Some(value) = tenant {
            event.headers.insert("tenant".to_owned(), value);
        }
        event
    }

    fn why(result: Result<(Arc<str>, PgPool)>) -> String {
        match result {
            Err(Error::UnknownTenant(why)) => why,
            other => panic!("expected an unknown tenant, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_header_names_the_tenant_and_an_unlisted_or_missing_one_says_why() {
        let tenants = Tenants::by_header("tenant").tenant("acme", pool());
        let (name, _) = tenants.resolve(&event("o-1", Some(HeaderValue::String("acme".into())))).expect("acme");
        assert_eq!(&*name, "acme");
        let odd = why(tenants.resolve(&event("o-1", Some(HeaderValue::String("a`b\u{202e}c\n".into())))));
        assert_eq!(odd, "tenant `a?b?c?` is not listed");
        let long = "x".repeat(500);
        let unlisted = why(tenants.resolve(&event("o-1", Some(HeaderValue::String(long)))));
        assert_eq!(unlisted, format!("tenant `{}` is not listed", "x".repeat(64)));
        assert_eq!(why(tenants.resolve(&event("o-1", None))), "no header `tenant`");
        assert_eq!(
            why(tenants.resolve(&event("o-1", Some(HeaderValue::Int(7))))),
            "header `tenant` is not a tenant name"
        );
        tenants.remove("acme");
        assert!(tenants.resolve(&event("o-1", Some(HeaderValue::String("acme".into())))).is_err());
    }

    #[tokio::test]
    async fn an_entity_prefix_names_the_tenant() {
        let tenants = Tenants::by_entity_prefix(':').tenant("acme", pool());
        let (name, _) = tenants.resolve(&event("acme:order-7", None)).expect("acme");
        assert_eq!(&*name, "acme");
        assert_eq!(why(tenants.resolve(&event("order-7", None))), "the entity key has no tenant before `:`");
        assert_eq!(why(tenants.resolve(&event(":order-7", None))), "the entity key has no tenant before `:`");
    }

    #[tokio::test]
    async fn a_custom_rule_names_the_tenant() {
        let tenants =
            Tenants::by(|e| e.event_type.strip_prefix("t").map(|_| "globex".to_owned())).tenant("globex", pool());
        assert_eq!(&*tenants.resolve(&event("o", None)).expect("globex").0, "globex");
        assert_eq!(tenants.names(), ["globex"]);
    }
}
