//! Where the broker is, and the URLs that reach it through a [`ChaosProxy`](crate::ChaosProxy).

use std::net::SocketAddr;

use crate::Result;

/// The broker's address, for a proxy in front of it.
pub(super) async fn broker_addr() -> Result<SocketAddr> {
    let url = crate::amqp_url();
    let authority = authority(&url);
    let with_port = if authority.contains(':') { authority.to_owned() } else { format!("{authority}:5672") };
    tokio::net::lookup_host(with_port).await?.next().ok_or_else(|| {
        crate::Error::Io(std::io::Error::new(std::io::ErrorKind::NotFound, "the broker's host does not resolve"))
    })
}

/// The `host:port` part of an AMQP URL.
fn authority(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    rest.split('/').next().unwrap_or(rest)
}

/// `url` with its host and port replaced by `addr` (credentials and vhost kept).
pub(super) fn via(url: &str, addr: SocketAddr) -> String {
    url.replacen(authority(url), &addr.to_string(), 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_proxy_url_keeps_credentials_and_vhost() {
        let addr: SocketAddr = "127.0.0.1:40001".parse().expect("addr");
        assert_eq!(via("amqp://guest:guest@127.0.0.1:5672/%2f", addr), "amqp://guest:guest@127.0.0.1:40001/%2f");
        assert_eq!(via("amqp://localhost/%2f", addr), "amqp://127.0.0.1:40001/%2f");
        assert_eq!(authority("amqp://u:p@rabbit:5673"), "rabbit:5673");
    }
}
