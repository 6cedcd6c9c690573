//! Every bound of the state machine, with units last in the names.
//!
//! Two kinds of bound live here:
//! - [`Limits`]: the spec §3 limits on client input, configurable per deployment and checked
//!   at the edge (by [`Command::validate`](crate::Command::validate)) before a command is
//!   proposed. They are not consulted by `apply`, so nodes with different settings still
//!   apply the log identically.
//! - [`Bounds`]: the sizes of the machine's own tables (event window, idempotency table,
//!   queue length). They shape results, so they are part of the replicated state and travel
//!   in snapshots.

use crate::error::Error;
use serde::{Deserialize, Serialize};

/// Limits on client input (spec §3). Violations are 400 or 413, never a crash. Read from
/// the `[limits]` table of a cluster file (every field optional, defaults below).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Longest key, lock, semaphore, election or prefix name.
    pub name_bytes_max: usize,
    /// Longest owner string of a lock or semaphore holder.
    pub owner_bytes_max: usize,
    /// Largest key value or election value.
    pub value_bytes_max: usize,
    /// Shortest lease TTL; a deployment sets it to at least twice the election timeout.
    pub ttl_ms_min: u64,
    /// Longest lease TTL.
    pub ttl_ms_max: u64,
    /// Longest wait of a blocking acquire in the queue, across the requests that wait on it.
    pub wait_ms_max: u64,
    /// Longest time the edge holds one acquire request open; a longer wait is answered
    /// `202` and keeps its place (not consulted by the state machine).
    pub hold_ms_max: u64,
    /// Longest lock-delay after a holder's lease expires.
    pub lock_delay_ms_max: u64,
    /// Largest semaphore limit.
    pub semaphore_limit_max: u32,
    /// Most compares plus operations in one txn (etcd's default is 128).
    pub txn_ops_max: usize,
    /// Most keys one range may return.
    pub range_limit_max: usize,
    /// Longest `Idempotency-Key`.
    pub idempotency_key_bytes_max: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            name_bytes_max: 512,
            owner_bytes_max: 512,
            value_bytes_max: 1 << 20,
            ttl_ms_min: 1_000,
            ttl_ms_max: 3_600_000,
            wait_ms_max: 86_400_000,
            hold_ms_max: 300_000,
            lock_delay_ms_max: 60_000,
            semaphore_limit_max: 100_000,
            txn_ops_max: 128,
            range_limit_max: 10_000,
            idempotency_key_bytes_max: 256,
        }
    }
}

impl Limits {
    /// A key, lock, semaphore or election name: 1..=max bytes, no control characters.
    pub fn check_name(&self, field: &'static str, name: &str) -> Result<(), Error> {
        if name.is_empty() {
            return Err(Error::invalid(field, "must not be empty"));
        }
        self.check_prefix(field, name)
    }

    /// A prefix: like a name, but may be empty (everything).
    pub fn check_prefix(&self, field: &'static str, prefix: &str) -> Result<(), Error> {
        if prefix.len() > self.name_bytes_max {
            return Err(Error::invalid(
                field,
                format!("is {} bytes, over {}", prefix.len(), self.name_bytes_max),
            ));
        }
        if prefix.chars().any(char::is_control) {
            return Err(Error::invalid(field, "must not contain control characters"));
        }
        check_visible(field, prefix)
    }

    /// An owner string: up to max bytes, no control characters (may be empty).
    pub fn check_owner(&self, owner: &str) -> Result<(), Error> {
        if owner.len() > self.owner_bytes_max {
            return Err(Error::invalid(
                "owner",
                format!("is {} bytes, over {}", owner.len(), self.owner_bytes_max),
            ));
        }
        if owner.chars().any(char::is_control) {
            return Err(Error::invalid(
                "owner",
                "must not contain control characters",
            ));
        }
        check_visible("owner", owner)
    }

    /// A value: at most `value_bytes_max` bytes (413 beyond).
    pub fn check_value(&self, field: &'static str, value: &str) -> Result<(), Error> {
        if value.len() > self.value_bytes_max {
            return Err(Error::TooLarge {
                field,
                actual: value.len(),
                max: self.value_bytes_max,
            });
        }
        Ok(())
    }

    /// A lease TTL within `ttl_ms_min..=ttl_ms_max`.
    pub fn check_ttl_ms(&self, ttl_ms: u64) -> Result<(), Error> {
        check_range("ttl_ms", ttl_ms, self.ttl_ms_min, self.ttl_ms_max)
    }

    /// A wait within `0..=wait_ms_max` (0 is a try-acquire).
    pub fn check_wait_ms(&self, wait_ms: u64) -> Result<(), Error> {
        check_range("wait_ms", wait_ms, 0, self.wait_ms_max)
    }

    /// A lock-delay within `0..=lock_delay_ms_max`.
    pub fn check_lock_delay_ms(&self, lock_delay_ms: u64) -> Result<(), Error> {
        check_range("lock_delay_ms", lock_delay_ms, 0, self.lock_delay_ms_max)
    }

    /// A semaphore limit in `1..=semaphore_limit_max` and permits in `1..=limit`.
    pub fn check_permits(&self, limit: u32, permits: u32) -> Result<(), Error> {
        check_range(
            "limit",
            u64::from(limit),
            1,
            u64::from(self.semaphore_limit_max),
        )?;
        check_range("permits", u64::from(permits), 1, u64::from(limit))
    }

    /// A range limit in `1..=range_limit_max`.
    pub fn check_range_limit(&self, limit: usize) -> Result<(), Error> {
        check_range("limit", limit as u64, 1, self.range_limit_max as u64)
    }

    /// The number of compares plus operations of a txn.
    pub fn check_txn_ops(&self, ops: usize) -> Result<(), Error> {
        check_range("txn", ops as u64, 0, self.txn_ops_max as u64)
    }

    /// An idempotency key: 1..=max bytes of visible ASCII.
    pub fn check_idempotency_key(&self, key: &str) -> Result<(), Error> {
        let field = "idempotency_key";
        if key.is_empty() || key.len() > self.idempotency_key_bytes_max {
            return Err(Error::invalid(
                field,
                format!("must be 1..={} bytes", self.idempotency_key_bytes_max),
            ));
        }
        if !key.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(Error::invalid(field, "must be visible ASCII"));
        }
        Ok(())
    }
}

/// Whether `c` is a bidirectional control or a zero-width character: text that shows
/// other than it is stored (a name that looks like another one in the console or a log).
/// The same set as `baton_wire::names::HIDDEN` less the controls (a test of the server
/// compares them).
pub fn is_hidden_char(c: char) -> bool {
    matches!(
        c,
        '\u{061C}'
            | '\u{180E}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{2069}'
            | '\u{FEFF}'
    )
}

/// Refuses text with a bidirectional control or a zero-width character, naming it.
fn check_visible(field: &'static str, text: &str) -> Result<(), Error> {
    match text.char_indices().find(|(_, c)| is_hidden_char(*c)) {
        None => Ok(()),
        Some((at, c)) => Err(Error::invalid(
            field,
            format!(
                "must not contain bidirectional controls or zero-width characters (U+{:04X} at byte {at})",
                c as u32
            ),
        )),
    }
}

fn check_range(field: &'static str, value: u64, min: u64, max: u64) -> Result<(), Error> {
    if value < min || value > max {
        return Err(Error::invalid(
            field,
            format!("is {value}, must be in {min}..={max}"),
        ));
    }
    Ok(())
}

/// Sizes of the machine's own tables. Replicated (they shape results), so every node of a
/// cluster has the same; they travel in snapshots.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bounds {
    /// Revisions of events kept for watches; older ones are compacted.
    pub event_window_revisions: u64,
    /// Approximate bytes of events kept for watches; the oldest revisions go first.
    pub event_window_bytes_max: usize,
    /// Revisions an idempotency outcome not owned by a live lease is remembered.
    pub idempotency_window_revisions: u64,
    /// Most outcomes not owned by a live lease remembered at once.
    pub idempotency_entries_max: usize,
    /// Most outcomes one live lease keeps; its oldest go to the shared window beyond that.
    pub idempotency_per_lease_max: usize,
    /// Approximate bytes of remembered outcomes (large txn results count).
    pub idempotency_bytes_max: usize,
    /// Most waiters in one lock, semaphore or election queue.
    pub queue_len_max: usize,
}

impl Default for Bounds {
    fn default() -> Bounds {
        Bounds {
            event_window_revisions: 100_000,
            event_window_bytes_max: 64 << 20,
            idempotency_window_revisions: 100_000,
            idempotency_entries_max: 100_000,
            idempotency_per_lease_max: 1_000,
            idempotency_bytes_max: 64 << 20,
            queue_len_max: 1_000_000,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_one_to_512_bytes_without_control_characters() {
        let limits = Limits::default();
        assert!(limits.check_name("name", "").is_err());
        assert!(limits.check_name("name", "a").is_ok());
        assert!(limits.check_name("name", &"x".repeat(512)).is_ok());
        assert!(limits.check_name("name", &"x".repeat(513)).is_err());
        assert!(limits.check_name("name", "a\nb").is_err());
        assert!(limits.check_name("name", "a\u{7f}b").is_err());
        assert!(limits.check_name("name", "ünïcödé/ok").is_ok());
        // Text that shows other than it is stored: bidi controls, zero-width characters.
        for hidden in [
            "a\u{202E}b",
            "a\u{200B}b",
            "\u{2066}x\u{2069}",
            "\u{FEFF}x",
            "x\u{200D}",
        ] {
            let e = limits.check_name("name", hidden).unwrap_err().to_string();
            assert!(e.contains("zero-width"), "{hidden:?}: {e}");
            assert!(limits.check_owner(hidden).is_err(), "{hidden:?}");
        }
        assert!(limits.check_name("name", "日本語/ロック").is_ok());
    }

    #[test]
    fn values_over_one_mebibyte_are_too_large() {
        let limits = Limits::default();
        assert!(limits.check_value("value", &"v".repeat(1 << 20)).is_ok());
        let err = limits.check_value("value", &"v".repeat((1 << 20) + 1));
        assert!(matches!(err, Err(Error::TooLarge { .. })));
    }

    #[test]
    fn ttl_and_wait_ranges_are_inclusive() {
        let limits = Limits::default();
        assert!(limits.check_ttl_ms(999).is_err());
        assert!(limits.check_ttl_ms(1_000).is_ok());
        assert!(limits.check_ttl_ms(3_600_000).is_ok());
        assert!(limits.check_ttl_ms(3_600_001).is_err());
        assert!(limits.check_wait_ms(0).is_ok());
        assert!(limits.check_wait_ms(86_400_000).is_ok());
        assert!(limits.check_wait_ms(86_400_001).is_err());
    }

    #[test]
    fn permits_must_fit_the_limit() {
        let limits = Limits::default();
        assert!(limits.check_permits(0, 1).is_err());
        assert!(limits.check_permits(5, 0).is_err());
        assert!(limits.check_permits(5, 6).is_err());
        assert!(limits.check_permits(5, 5).is_ok());
    }

    #[test]
    fn idempotency_keys_are_visible_ascii() {
        let limits = Limits::default();
        assert!(limits.check_idempotency_key("3f2a-01").is_ok());
        assert!(limits.check_idempotency_key("").is_err());
        assert!(limits.check_idempotency_key("a b").is_err());
        assert!(limits.check_idempotency_key(&"k".repeat(257)).is_err());
    }
}
