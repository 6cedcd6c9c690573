//! The downstream stores a lock protects, inside the harness (atomic by construction).
//!
//! The fenced store keeps the highest fence it has seen and refuses any access, reads
//! included, with a lower one (if only writes were fenced, a stale holder's read followed
//! by a newer holder's write would still lose an update). The shadow store beside it
//! takes every access unchecked: under pauses it should lose updates, which shows the
//! test can see what fencing prevents.

use std::collections::HashMap;
use std::sync::Mutex;

#[derive(Default)]
struct Fenced {
    max_fence: u64,
    value: u64,
    seq: u64,
}

#[derive(Default)]
struct Shadow {
    value: u64,
    seq: u64,
}

/// One fenced store and one shadow store per lock name.
#[derive(Default)]
pub struct Stores {
    fenced: Mutex<HashMap<String, Fenced>>,
    shadow: Mutex<HashMap<String, Shadow>>,
}

/// Why the fenced store refused an access.
pub const STALE: &str = "stale";

impl Stores {
    /// Reads with `fence`: `(value, access sequence number)`, or `stale`.
    pub fn fenced_read(&self, name: &str, fence: u64) -> Result<(u64, u64), String> {
        let mut all = self.fenced.lock().unwrap_or_else(|p| p.into_inner());
        let s = all.entry(name.to_owned()).or_default();
        if fence < s.max_fence {
            return Err(STALE.into());
        }
        s.max_fence = fence;
        s.seq += 1;
        Ok((s.value, s.seq))
    }

    /// Writes `value` with `fence`: the access sequence number, or `stale`.
    pub fn fenced_write(&self, name: &str, fence: u64, value: u64) -> Result<u64, String> {
        let mut all = self.fenced.lock().unwrap_or_else(|p| p.into_inner());
        let s = all.entry(name.to_owned()).or_default();
        if fence < s.max_fence {
            return Err(STALE.into());
        }
        s.max_fence = fence;
        s.value = value;
        s.seq += 1;
        Ok(s.seq)
    }

    /// Reads the shadow store: `(value, sequence number)`.
    pub fn shadow_read(&self, name: &str) -> (u64, u64) {
        let mut all = self.shadow.lock().unwrap_or_else(|p| p.into_inner());
        let s = all.entry(name.to_owned()).or_default();
        s.seq += 1;
        (s.value, s.seq)
    }

    /// Writes the shadow store; returns the sequence number.
    pub fn shadow_write(&self, name: &str, value: u64) -> u64 {
        let mut all = self.shadow.lock().unwrap_or_else(|p| p.into_inner());
        let s = all.entry(name.to_owned()).or_default();
        s.value = value;
        s.seq += 1;
        s.seq
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lower_fence_is_refused_on_reads_too() {
        let s = Stores::default();
        assert_eq!(s.fenced_read("l", 5), Ok((0, 1)));
        assert_eq!(s.fenced_read("l", 7), Ok((0, 2)));
        assert_eq!(s.fenced_write("l", 5, 1), Err(STALE.into()));
        assert_eq!(s.fenced_read("l", 5), Err(STALE.into()));
        assert_eq!(s.fenced_write("l", 7, 1), Ok(3));
        assert_eq!(s.fenced_read("other", 1), Ok((0, 1)));
    }
}
