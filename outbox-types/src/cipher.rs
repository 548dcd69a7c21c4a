//! Payload encryption at rest: XChaCha20-Poly1305 (RustCrypto's `chacha20poly1305`), a random
//! 192-bit nonce per payload, the event id as associated data (a payload copied onto another row
//! does not decrypt there), and a key id stored beside each sealed payload so that keys can
//! rotate: the newest key encrypts, every key still configured decrypts.
//!
//! Keys come from a [`KeyProvider`]: a [`Keyring`] (built in code, or read from the environment
//! with [`Keyring::from_env`]) or the application's own (a secrets manager). Keys are never
//! printed: `Debug` shows key ids only, and errors name a key by its id or its place in a list.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use base64::Engine;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};

use crate::EventId;

/// Bytes of a key.
pub const KEY_BYTES: usize = 32;
/// Bytes of the nonce in front of each sealed payload.
const NONCE_BYTES: usize = 24;
/// Bytes of the authentication tag at the end of each sealed payload.
const TAG_BYTES: usize = 16;
/// Bytes a sealed payload has beyond its plain one (nonce and tag).
pub const SEAL_OVERHEAD: usize = NONCE_BYTES + TAG_BYTES;
/// The longest key id (it is stored with each row and sent as a header).
const MAX_KEY_ID: usize = 64;

/// Why a payload could not be sealed or opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CipherError {
    /// No configured key has this id (a key removed too early, or a row from elsewhere).
    #[error("no key with id {0:?} is configured")]
    UnknownKey(String),
    /// The sealed payload, its key id or its event id was changed, or the key is not the one it
    /// was sealed with.
    #[error("the payload failed authentication")]
    Authentication,
    /// The sealed payload is shorter than a nonce and a tag.
    #[error("the sealed payload is too short")]
    Malformed,
    /// A key list does not read (the message names the place, never the key).
    #[error("invalid payload keys: {0}")]
    InvalidKeys(String),
}

/// Where the keys come from.
pub trait KeyProvider: Send + Sync + 'static {
    /// The id of the key new payloads are sealed with.
    fn current_key_id(&self) -> &str;
    /// The key with this id, if there is one.
    fn key(&self, id: &str) -> Option<[u8; KEY_BYTES]>;
}

/// A set of keys held in memory: the first added is the current one.
#[derive(Clone, Default)]
pub struct Keyring {
    current: String,
    keys: HashMap<String, [u8; KEY_BYTES]>,
}

impl Keyring {
    /// A keyring whose current key is `key`, with id `id` (1 to 64 visible ASCII characters).
    ///
    /// # Errors
    /// [`CipherError::InvalidKeys`] for an invalid id.
    pub fn new(id: impl Into<String>, key: [u8; KEY_BYTES]) -> Result<Self, CipherError> {
        let id = check_id(id.into())?;
        Ok(Self { current: id.clone(), keys: HashMap::from([(id, key)]) })
    }

    /// Adds an older key, which decrypts but no longer encrypts.
    ///
    /// # Errors
    /// [`CipherError::InvalidKeys`] for an invalid or repeated id.
    pub fn with_key(mut self, id: impl Into<String>, key: [u8; KEY_BYTES]) -> Result<Self, CipherError> {
        let id = check_id(id.into())?;
        if self.keys.insert(id.clone(), key).is_some() {
            return Err(CipherError::InvalidKeys(format!("key id {id:?} given twice")));
        }
        Ok(self)
    }

    /// Reads `id:base64key,id:base64key,...` (the newest first: it encrypts) from the
    /// environment variable `var`; `None` if it is not set or empty. Each key is 32 bytes in
    /// standard base64 (`openssl rand -base64 32`).
    ///
    /// # Errors
    /// [`CipherError::InvalidKeys`] naming the place of the entry that does not read.
    pub fn from_env(var: &str) -> Result<Option<Self>, CipherError> {
        match std::env::var(var) {
            Ok(list) if !list.trim().is_empty() => Self::parse(&list).map(Some),
            _ => Ok(None),
        }
    }

    /// Parses a key list as [`Keyring::from_env`] reads it.
    ///
    /// # Errors
    /// [`CipherError::InvalidKeys`] naming the place of the entry that does not read.
    pub fn parse(list: &str) -> Result<Self, CipherError> {
        let mut ring: Option<Self> = None;
        for (n, entry) in list.split(',').enumerate() {
            let bad = |what: &str| CipherError::InvalidKeys(format!("key {}: {what}", n + 1));
            let (id, encoded) = entry.trim().split_once(':').ok_or_else(|| bad("expected id:base64key"))?;
            let bytes =
                base64::engine::general_purpose::STANDARD.decode(encoded.trim()).map_err(|_| bad("not base64"))?;
            let key: [u8; KEY_BYTES] = bytes.try_into().map_err(|_| bad("not 32 bytes"))?;
            ring = Some(match ring {
                None => Self::new(id.trim(), key)?,
                Some(ring) => ring.with_key(id.trim(), key)?,
            });
        }
        ring.ok_or_else(|| CipherError::InvalidKeys("no key".to_owned()))
    }
}

fn check_id(id: String) -> Result<String, CipherError> {
    if id.is_empty() || id.len() > MAX_KEY_ID || !id.bytes().all(|b| b.is_ascii_graphic() && b != b',' && b != b':') {
        return Err(CipherError::InvalidKeys("a key id must be 1 to 64 visible ASCII characters".to_owned()));
    }
    Ok(id)
}

impl KeyProvider for Keyring {
    fn current_key_id(&self) -> &str {
        &self.current
    }

    fn key(&self, id: &str) -> Option<[u8; KEY_BYTES]> {
        self.keys.get(id).copied()
    }
}

impl fmt::Debug for Keyring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut ids: Vec<&String> = self.keys.keys().collect();
        ids.sort();
        f.debug_struct("Keyring").field("current", &self.current).field("key_ids", &ids).finish()
    }
}

/// Seals and opens payloads with the keys of a [`KeyProvider`]. Cheap to clone.
#[derive(Clone)]
pub struct PayloadCipher {
    keys: Arc<dyn KeyProvider>,
}

impl fmt::Debug for PayloadCipher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PayloadCipher").field("current_key_id", &self.keys.current_key_id()).finish_non_exhaustive()
    }
}

impl PayloadCipher {
    /// A cipher over `keys`.
    pub fn new(keys: impl KeyProvider) -> Self {
        Self { keys: Arc::new(keys) }
    }

    /// The id of the key new payloads are sealed with.
    pub fn current_key_id(&self) -> &str {
        self.keys.current_key_id()
    }

    /// Seals `plaintext` of event `id` with the current key; returns the key id and the sealed
    /// bytes (nonce, ciphertext, tag).
    ///
    /// # Errors
    /// [`CipherError::UnknownKey`] if the provider has no key for its own current id.
    pub fn seal(&self, id: EventId, plaintext: &[u8]) -> Result<(String, Vec<u8>), CipherError> {
        let key_id = self.keys.current_key_id().to_owned();
        let cipher = self.aead(&key_id)?;
        let nonce: [u8; NONCE_BYTES] = rand::random();
        let sealed = cipher
            .encrypt(&XNonce::from(nonce), Payload { msg: plaintext, aad: id.as_uuid().as_bytes() })
            .map_err(|_| CipherError::Authentication)?;
        let mut out = Vec::with_capacity(NONCE_BYTES + sealed.len());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&sealed);
        Ok((key_id, out))
    }

    /// Opens what [`PayloadCipher::seal`] made for event `id` with key `key_id`.
    ///
    /// # Errors
    /// [`CipherError::UnknownKey`], [`CipherError::Malformed`], [`CipherError::Authentication`].
    pub fn open(&self, id: EventId, key_id: &str, sealed: &[u8]) -> Result<Vec<u8>, CipherError> {
        if sealed.len() < NONCE_BYTES + TAG_BYTES {
            return Err(CipherError::Malformed);
        }
        let cipher = self.aead(key_id)?;
        let (nonce, body) = sealed.split_at(NONCE_BYTES);
        let nonce: [u8; NONCE_BYTES] = nonce.try_into().map_err(|_| CipherError::Malformed)?;
        cipher
            .decrypt(&XNonce::from(nonce), Payload { msg: body, aad: id.as_uuid().as_bytes() })
            .map_err(|_| CipherError::Authentication)
    }

    fn aead(&self, key_id: &str) -> Result<XChaCha20Poly1305, CipherError> {
        let key = self.keys.key(key_id).ok_or_else(|| CipherError::UnknownKey(key_id.to_owned()))?;
        Ok(XChaCha20Poly1305::new(&key.into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAIN: &[u8] = b"{\"card\":\"4111-SECRET\"}";

    fn ring() -> Keyring {
        Keyring::new("k2", [2; KEY_BYTES]).and_then(|r| r.with_key("k1", [1; KEY_BYTES])).expect("keys")
    }

    #[test]
    fn seals_with_the_newest_key_and_opens_with_any() {
        let id = EventId::new();
        let old = PayloadCipher::new(Keyring::new("k1", [1; KEY_BYTES]).expect("key"));
        let (old_id, sealed_old) = old.seal(id, PLAIN).expect("seal");
        let both = PayloadCipher::new(ring());
        let (new_id, sealed_new) = both.seal(id, PLAIN).expect("seal");
        assert_eq!((old_id.as_str(), new_id.as_str()), ("k1", "k2"));
        assert!(!sealed_new.windows(PLAIN.len()).any(|w| w == PLAIN), "no plaintext in the sealed bytes");
        assert_eq!(both.open(id, "k1", &sealed_old).expect("old"), PLAIN);
        assert_eq!(both.open(id, "k2", &sealed_new).expect("new"), PLAIN);
        assert_ne!(both.seal(id, PLAIN).expect("again").1, sealed_new, "a fresh nonce each time");
    }

    #[test]
    fn tampering_and_unknown_keys_are_typed_errors() {
        let id = EventId::new();
        let cipher = PayloadCipher::new(ring());
        let (key_id, mut sealed) = cipher.seal(id, PLAIN).expect("seal");
        assert_eq!(cipher.open(EventId::new(), &key_id, &sealed), Err(CipherError::Authentication), "another row");
        assert_eq!(cipher.open(id, "k1", &sealed), Err(CipherError::Authentication), "another key");
        assert_eq!(cipher.open(id, "k9", &sealed), Err(CipherError::UnknownKey("k9".to_owned())));
        assert_eq!(cipher.open(id, &key_id, &sealed[..10]), Err(CipherError::Malformed));
        let last = sealed.len() - 1;
        sealed[last] ^= 1;
        assert_eq!(cipher.open(id, &key_id, &sealed), Err(CipherError::Authentication), "a flipped bit");
    }

    #[test]
    fn key_lists_read_newest_first_and_errors_never_show_a_key() {
        let b64 = |k: &[u8]| base64::engine::general_purpose::STANDARD.encode(k);
        let ring = Keyring::parse(&format!("new:{}, old:{}", b64(&[7; 32]), b64(&[8; 32]))).expect("list");
        assert_eq!(ring.current_key_id(), "new");
        assert_eq!(ring.key("old"), Some([8; 32]));
        let secret = b64(&[9; 16]);
        for (list, needle) in [
            (format!("a:{secret}"), "key 1: not 32 bytes"),
            (format!("a:{},b", b64(&[1; 32])), "key 2: expected id:base64key"),
            ("a:!!!".to_owned(), "key 1: not base64"),
            (format!("a:{0},a:{0}", b64(&[1; 32])), "given twice"),
        ] {
            let err = Keyring::parse(&list).expect_err("invalid").to_string();
            assert!(err.contains(needle), "{err}");
            assert!(!err.contains(&secret) && !err.contains(&b64(&[1; 32])), "{err}");
        }
        assert!(!format!("{ring:?} {:?}", PayloadCipher::new(ring.clone())).contains(&b64(&[7; 32])));
    }
}
