//! State the client carries, sealed: the Responses front's encrypted
//! reasoning (`include: ["reasoning.encrypted_content"]`) and compaction
//! summaries. The vendor's reasoning goes into the reasoning item's
//! `encrypted_content`, so a client that keeps the conversation itself
//! (`store: false`, Codex) brings it back and any replica restores it, with
//! no server state.
//!
//! XChaCha20-Poly1305 with a random 24-byte nonce per item (from the OS
//! CSPRNG), bound by the AAD to the proxy key that asked for it: another
//! key's client cannot replay it, and no client can forge one. The keys come
//! from an environment variable (`[responses] reasoning_keys_env`): the
//! first seals, every listed key opens, so replicas share a list and a key
//! is rotated by putting the new one first and dropping the old one later.
//! Without keys the process makes a random one (items do not survive a
//! restart and other replicas cannot open them).

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use sha2::{Digest, Sha256};

/// What a sealed item starts with (and the version in its AAD).
const PREFIX: &str = "msr1.";
const NONCE: usize = 24;

/// Why a sealed item could not be opened.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum OpenError {
    #[error("not an item this proxy sealed")]
    Foreign,
    #[error("no key opens it (tampered, another owner's, or a key rotated out)")]
    Rejected,
}

/// The keys: the first seals, all open.
pub struct Keyring {
    keys: Vec<XChaCha20Poly1305>,
    /// Whether the keys came from the environment (shared by replicas).
    pub shared: bool,
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keyring").field("keys", &self.keys.len()).field("shared", &self.shared).finish()
    }
}

impl Keyring {
    /// Keys from a comma-separated list of secrets (each at least 32
    /// characters; a key is the SHA-256 of its secret). `None` for an empty
    /// list; an error names a bad entry by position only.
    pub fn from_list(list: &str) -> Result<Option<Keyring>, String> {
        let mut keys = Vec::new();
        for (i, secret) in list.split(',').map(str::trim).filter(|s| !s.is_empty()).enumerate() {
            if secret.len() < 32 {
                return Err(format!("reasoning key {} is shorter than 32 characters", i + 1));
            }
            let mut h = Sha256::new();
            h.update(b"modelshim reasoning key\0");
            h.update(secret.as_bytes());
            keys.push(XChaCha20Poly1305::new(&h.finalize()));
        }
        Ok((!keys.is_empty()).then_some(Keyring { keys, shared: true }))
    }

    /// A fresh random key.
    pub fn random() -> Keyring {
        Keyring { keys: vec![XChaCha20Poly1305::new(&XChaCha20Poly1305::generate_key(&mut OsRng))], shared: false }
    }

    /// The random key of this process (made once: a config reload keeps it).
    pub fn process() -> Keyring {
        static KEY: std::sync::OnceLock<chacha20poly1305::Key> = std::sync::OnceLock::new();
        let key = KEY.get_or_init(|| XChaCha20Poly1305::generate_key(&mut OsRng));
        Keyring { keys: vec![XChaCha20Poly1305::new(key)], shared: false }
    }

    /// The keys named by the environment variable `var`, else the process's.
    pub fn from_env(var: &str) -> Result<Keyring, String> {
        match std::env::var(var) {
            Ok(list) => {
                Ok(Keyring::from_list(&list).map_err(|e| format!("{var}: {e}"))?.unwrap_or_else(Keyring::process))
            }
            Err(_) => Ok(Keyring::process()),
        }
    }

    /// The secrets listed in the environment variable `var` (for the
    /// redactor: they are keys like any other).
    pub fn secrets_in_env(var: &str) -> Vec<String> {
        std::env::var(var)
            .map(|l| l.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect())
            .unwrap_or_default()
    }

    /// `text` sealed for `owner` (the proxy key's name; `None` with auth off).
    pub fn seal(&self, text: &str, owner: Option<&str>) -> Option<String> {
        let key = self.keys.first()?;
        let nonce = XChaCha20Poly1305::generate_nonce(&mut OsRng);
        let aad = aad(owner);
        let ct = key.encrypt(&nonce, Payload { msg: text.as_bytes(), aad: &aad }).ok()?;
        let mut raw = nonce.to_vec();
        raw.extend_from_slice(&ct);
        Some(format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(raw)))
    }

    /// The text of an item sealed for `owner` by any of the keys.
    pub fn open(&self, sealed: &str, owner: Option<&str>) -> Result<String, OpenError> {
        let raw = sealed.strip_prefix(PREFIX).ok_or(OpenError::Foreign)?;
        let raw = URL_SAFE_NO_PAD.decode(raw).map_err(|_| OpenError::Rejected)?;
        if raw.len() <= NONCE {
            return Err(OpenError::Rejected);
        }
        let (nonce, ct) = raw.split_at(NONCE);
        let nonce = XNonce::from_slice(nonce);
        let aad = aad(owner);
        let plain = self
            .keys
            .iter()
            .find_map(|k| k.decrypt(nonce, Payload { msg: ct, aad: &aad }).ok())
            .ok_or(OpenError::Rejected)?;
        String::from_utf8(plain).map_err(|_| OpenError::Rejected)
    }
}

/// The AAD: the format version and the owner (a key name cannot hold NUL).
fn aad(owner: Option<&str>) -> Vec<u8> {
    let mut a = PREFIX.as_bytes().to_vec();
    a.push(0);
    match owner {
        Some(o) => {
            a.push(1);
            a.extend_from_slice(o.as_bytes());
        }
        None => a.push(0),
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "first-shared-secret-0123456789abcdef";
    const B: &str = "second-shared-secret-0123456789abcdef";

    fn ring(list: &str) -> Keyring {
        Keyring::from_list(list).unwrap().unwrap()
    }

    #[test]
    fn round_trip_with_a_fresh_nonce_each_time() {
        let k = ring(A);
        let s1 = k.seal("I should create notes.txt.", Some("alice")).unwrap();
        let s2 = k.seal("I should create notes.txt.", Some("alice")).unwrap();
        assert_ne!(s1, s2);
        assert!(!s1.contains("notes"));
        assert_eq!(k.open(&s1, Some("alice")).unwrap(), "I should create notes.txt.");
        assert_eq!(k.open(&s2, Some("alice")).unwrap(), "I should create notes.txt.");
        let r = Keyring::random();
        assert_eq!(r.open(&r.seal("x", None).unwrap(), None).unwrap(), "x");
    }

    #[test]
    fn tampered_or_another_owners_item_is_rejected() {
        let k = ring(A);
        let s = k.seal("secret thoughts", Some("alice")).unwrap();
        assert_eq!(k.open(&s, Some("bob")), Err(OpenError::Rejected));
        assert_eq!(k.open(&s, None), Err(OpenError::Rejected));
        // Flip one character of the ciphertext.
        let mut bytes = s.clone().into_bytes();
        let last = bytes.len() - 3;
        bytes[last] = if bytes[last] == b'A' { b'B' } else { b'A' };
        assert_eq!(k.open(&String::from_utf8(bytes).unwrap(), Some("alice")), Err(OpenError::Rejected));
        assert_eq!(k.open("msr1.AAAA", Some("alice")), Err(OpenError::Rejected));
        assert_eq!(k.open("gAAAAABo-openai-item", Some("alice")), Err(OpenError::Foreign));
        // Another process's random key.
        assert_eq!(Keyring::random().open(&s, Some("alice")), Err(OpenError::Rejected));
    }

    #[test]
    fn another_replica_with_the_shared_keys_opens_it() {
        let s = ring(A).seal("turn one", Some("alice")).unwrap();
        assert_eq!(ring(A).open(&s, Some("alice")).unwrap(), "turn one");
    }

    #[test]
    fn rotation_old_listed_key_opens_a_dropped_one_does_not() {
        let old = ring(A).seal("sealed before the rotation", None).unwrap();
        // B is new and seals; A still listed, so old items open.
        let rotated = ring(&format!("{B}, {A}"));
        assert_eq!(rotated.open(&old, None).unwrap(), "sealed before the rotation");
        let new = rotated.seal("sealed after", None).unwrap();
        assert_eq!(ring(B).open(&new, None).unwrap(), "sealed after");
        // A dropped: its items are rejected.
        assert_eq!(ring(B).open(&old, None), Err(OpenError::Rejected));
    }

    #[test]
    fn the_process_key_is_one_for_the_whole_process() {
        let s = Keyring::process().seal("kept", Some("alice")).unwrap();
        assert_eq!(Keyring::process().open(&s, Some("alice")).unwrap(), "kept");
        assert!(!Keyring::process().shared);
    }

    #[test]
    fn short_or_empty_key_lists() {
        assert!(Keyring::from_list("short").unwrap_err().contains("key 1"));
        assert!(Keyring::from_list(" , ").unwrap().is_none());
    }
}
