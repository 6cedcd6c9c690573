//! [`Secret`]: a shared secret or token that never shows in logs or `Debug` output and is
//! compared in constant time.

use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// A secret string (the cluster secret, the legacy admin token).
#[derive(Clone, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret.
    pub fn new(secret: impl Into<String>) -> Secret {
        Secret(secret.into())
    }

    /// The secret itself, to send it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether `presented` is this secret. Both are hashed first, so the comparison takes
    /// the same time whatever their lengths and contents.
    pub fn matches(&self, presented: &[u8]) -> bool {
        let expected = Sha256::digest(self.0.as_bytes());
        let presented = Sha256::digest(presented);
        expected.ct_eq(&presented).into()
    }
}

impl From<&str> for Secret {
    fn from(secret: &str) -> Secret {
        Secret::new(secret)
    }
}

impl From<String> for Secret {
    fn from(secret: String) -> Secret {
        Secret(secret)
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// `N` bytes from the system's random source (`None` if it cannot give any).
pub(crate) fn random_bytes<const N: usize>() -> Option<[u8; N]> {
    use ring::rand::SecureRandom;
    let mut bytes = [0; N];
    ring::rand::SystemRandom::new().fill(&mut bytes).ok()?;
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_matches_itself_only_and_never_prints() {
        let s = Secret::new("hunter2");
        assert!(s.matches(b"hunter2"));
        assert!(!s.matches(b"hunter3"));
        assert!(!s.matches(b""));
        assert_eq!(format!("{s:?}"), "<redacted>");
        assert!(!format!("{:?}", Some(s)).contains("hunter"));
    }
}
