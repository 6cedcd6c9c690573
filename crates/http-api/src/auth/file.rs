//! The auth file: principals, their token hashes, their rules on name prefixes and their
//! quotas, parsed and checked ([`Rules::parse`]).

use baton_state_machine::{Caller, Quota, ResourceKind};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use subtle::ConstantTimeEq;

/// Live leases a principal may have when its entry sets no `leases` quota.
pub const DEFAULT_LEASES_QUOTA: u64 = 10_000;

/// Why an auth file was refused.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The file could not be read.
    #[error("cannot read the auth file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML of the expected shape.
    #[error("auth file {path}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// The auth file as written (TOML).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthFile {
    /// Every principal.
    #[serde(rename = "principal", default)]
    pub principals: Vec<PrincipalEntry>,
}

/// One `[[principal]]` of the auth file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrincipalEntry {
    /// Its name: 1..=64 of `A-Z a-z 0-9 _ . -`.
    pub name: String,
    /// SHA-256 of its token, 64 hex digits (`baton auth hash` prints it).
    pub token_sha256: String,
    /// May change membership, force-release, use any lease and see everything.
    #[serde(default)]
    pub admin: bool,
    /// May read `/metrics`.
    #[serde(default)]
    pub metrics: bool,
    /// What it may read and write.
    #[serde(default)]
    pub rules: Vec<RuleEntry>,
    /// Its limits.
    #[serde(default)]
    pub quota: QuotaEntry,
}

/// One rule: `access` on names starting with `prefix` in `namespace` (or `*`: all five).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleEntry {
    /// `locks`, `semaphores`, `elections`, `keys`, `watches` or `*`.
    pub namespace: String,
    /// The name prefix ("" for every name).
    #[serde(default)]
    pub prefix: String,
    /// `read` or `write` (write includes read).
    pub access: Access,
}

/// Per-principal limits (absent: none).
#[derive(Clone, Copy, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaEntry {
    /// Live leases (replicated, exact).
    pub leases: Option<u64>,
    /// Keys it wrote that still exist (replicated, exact).
    pub keys: Option<u64>,
    /// Bytes of those keys, key plus value (replicated, exact).
    pub key_bytes: Option<u64>,
    /// Holds and queue places of its leases, 202s included (replicated, exact).
    pub claims: Option<u64>,
    /// Bytes of its claims' owner strings and election values and of the idempotency
    /// outcomes its leases keep (replicated, exact).
    pub state_bytes: Option<u64>,
    /// Held-open acquires at once on one node.
    pub waiters: Option<u64>,
    /// Open watch streams at once on one node.
    pub watches: Option<u64>,
    /// Sustained requests per second on one node (token bucket; may be fractional).
    pub requests_per_second: Option<f64>,
    /// Bucket size: requests allowed in a burst (default: one second's worth).
    pub burst: Option<u32>,
}

/// A namespace of names that rules grant access to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Namespace {
    /// Lock names.
    Locks,
    /// Semaphore names.
    Semaphores,
    /// Election names.
    Elections,
    /// Keys of the key space (and transactions over them).
    Keys,
    /// What a watch may be opened on (its key, prefix or resource name).
    Watches,
}

impl Namespace {
    fn parse(text: &str) -> Option<Vec<Namespace>> {
        use Namespace::*;
        Some(match text {
            "locks" => vec![Locks],
            "semaphores" => vec![Semaphores],
            "elections" => vec![Elections],
            "keys" => vec![Keys],
            "watches" => vec![Watches],
            "*" => vec![Locks, Semaphores, Elections, Keys, Watches],
            _ => return None,
        })
    }

    /// The namespace of a resource kind.
    pub fn of(kind: ResourceKind) -> Namespace {
        match kind {
            ResourceKind::Lock => Namespace::Locks,
            ResourceKind::Semaphore => Namespace::Semaphores,
            ResourceKind::Election => Namespace::Elections,
        }
    }

    /// The field name a bad name is reported under.
    pub(crate) fn field(self) -> &'static str {
        match self {
            Namespace::Keys => "key",
            _ => "name",
        }
    }

    pub(super) fn as_str(self) -> &'static str {
        match self {
            Namespace::Locks => "locks",
            Namespace::Semaphores => "semaphores",
            Namespace::Elections => "elections",
            Namespace::Keys => "keys",
            Namespace::Watches => "watches",
        }
    }
}

/// Read or write; write includes read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Access {
    /// See state and events.
    Read,
    /// Change state (acquire, release, put, delete, campaign, …).
    Write,
}

/// A principal as loaded: never printed with its token hash.
pub struct Principal {
    /// Its name.
    pub name: String,
    pub(super) token_sha256: [u8; 32],
    /// Whether it is an admin.
    pub admin: bool,
    pub(super) metrics: bool,
    rules: Vec<(Namespace, String, Access)>,
    /// Its limits.
    pub quota: QuotaEntry,
}

impl std::fmt::Debug for Principal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Principal")
            .field("name", &self.name)
            .field("admin", &self.admin)
            .field("rules", &self.rules.len())
            .finish_non_exhaustive()
    }
}

impl Principal {
    /// Whether it may `access` the name `name` in `ns`.
    pub fn allows(&self, ns: Namespace, name: &str, access: Access) -> bool {
        self.admin
            || self
                .rules
                .iter()
                .any(|(n, prefix, a)| *n == ns && *a >= access && name.starts_with(prefix))
    }

    pub(super) fn caller(&self) -> Caller {
        Caller {
            principal: self.name.clone(),
            admin: self.admin,
            quota: Quota {
                // Leases are never unlimited: everything else a principal holds hangs on
                // them.
                leases: Some(self.quota.leases.unwrap_or(DEFAULT_LEASES_QUOTA)),
                keys: self.quota.keys,
                key_bytes: self.quota.key_bytes,
                claims: self.quota.claims,
                state_bytes: self.quota.state_bytes,
            },
        }
    }
}

/// SHA-256 of a token, as the auth file stores it (64 lowercase hex digits).
pub fn token_hash(token: &str) -> String {
    let digest = Sha256::digest(token.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

fn parse_hex32(text: &str) -> Option<[u8; 32]> {
    let text = text.trim();
    if text.len() != 64 || !text.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// The rules of one version of the auth file.
#[derive(Debug)]
pub struct Rules {
    pub(super) principals: Vec<Arc<Principal>>,
}

impl Rules {
    /// Parses and checks the text of an auth file.
    pub fn parse(text: &str) -> Result<Rules, String> {
        let file: AuthFile = toml::from_str(text).map_err(|e| e.to_string())?;
        let mut principals = Vec::new();
        let mut names = std::collections::BTreeSet::new();
        for entry in file.principals {
            let name = entry.name;
            let valid_name = !name.is_empty()
                && name.len() <= 64
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
            if !valid_name {
                return Err(format!(
                    "principal {name:?}: a name is 1..=64 of A-Z a-z 0-9 _ . -"
                ));
            }
            if !names.insert(name.clone()) {
                return Err(format!("principal {name:?} is named twice"));
            }
            let token_sha256 = parse_hex32(&entry.token_sha256).ok_or_else(|| {
                format!(
                    "principal {name:?}: token_sha256 must be 64 hex digits (`baton auth hash`)"
                )
            })?;
            let mut rules = Vec::new();
            for rule in entry.rules {
                let namespaces = Namespace::parse(&rule.namespace).ok_or_else(|| {
                    format!(
                        "principal {name:?}: namespace {:?} is not one of locks, semaphores, elections, keys, watches, *",
                        rule.namespace
                    )
                })?;
                for ns in namespaces {
                    rules.push((ns, rule.prefix.clone(), rule.access));
                }
            }
            let q = entry.quota;
            if q.requests_per_second
                .is_some_and(|r| !(r.is_finite() && r > 0.0))
                || q.burst == Some(0)
            {
                return Err(format!(
                    "principal {name:?}: requests_per_second and burst must be positive"
                ));
            }
            principals.push(Arc::new(Principal {
                name,
                token_sha256,
                admin: entry.admin,
                metrics: entry.metrics,
                rules,
                quota: q,
            }));
        }
        let mut hashes = std::collections::BTreeSet::new();
        for p in &principals {
            if !hashes.insert(p.token_sha256) {
                return Err(format!(
                    "principal {:?} shares its token with another principal",
                    p.name
                ));
            }
        }
        Ok(Rules { principals })
    }

    /// The principal whose token this is. Every principal's hash is compared, in constant
    /// time, whatever matches.
    pub fn authenticate(&self, token: &str) -> Option<Arc<Principal>> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let mut found = None;
        for p in &self.principals {
            if bool::from(p.token_sha256.ct_eq(&digest)) {
                found = Some(p.clone());
            }
        }
        found
    }

    /// How many principals there are.
    pub fn len(&self) -> usize {
        self.principals.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.principals.is_empty()
    }
}

pub(super) fn read_rules(path: &Path) -> Result<Rules, AuthError> {
    let text = std::fs::read_to_string(path).map_err(|source| AuthError::Read {
        path: path.to_owned(),
        source,
    })?;
    Rules::parse(&text).map_err(|message| AuthError::Invalid {
        path: path.to_owned(),
        message,
    })
}
