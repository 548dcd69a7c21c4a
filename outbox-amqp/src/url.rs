/// Checks that `url` is an AMQP URL lapin can connect with. The reason never quotes the URL: it
/// may hold a password (lapin's own parse error does quote it).
///
/// # Errors
/// [`Error::InvalidUrl`](crate::Error::InvalidUrl) with the reason.
pub fn check_url(url: &str) -> Result<(), crate::Error> {
    let scheme = url.split_once("://").map(|(scheme, _)| scheme);
    if !matches!(scheme, Some("amqp" | "amqps")) {
        return Err(crate::Error::InvalidUrl("expected amqp://user:password@host:port/vhost (or amqps://)".to_owned()));
    }
    url.parse::<lapin::uri::AMQPUri>().map(drop).map_err(|e| {
        if e.contains(url) || url.split('@').next().is_some_and(|auth| e.contains(auth)) {
            crate::Error::InvalidUrl("not a valid URL".to_owned())
        } else {
            crate::Error::InvalidUrl(e)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_urls_are_refused_without_quoting_them() {
        assert_eq!(check_url("amqp://guest:guest@127.0.0.1:5672/%2f"), Ok(()));
        assert_eq!(check_url("amqps://u:p@broker.example/vhost"), Ok(()));
        for bad in
            ["amqp:guest:s3cret@127.0.0.1", "http://guest:s3cret@127.0.0.1", "amqp://guest:s3cret@127.0.0.1:abc/"]
        {
            let why = check_url(bad).expect_err(bad).to_string();
            assert!(!why.contains("s3cret"), "{why}");
        }
    }
}
