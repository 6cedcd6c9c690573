//! Snapshot and restore of the whole state: bincode with a header that carries the format
//! version and the sizes, checked on restore together with every invariant.

use crate::error::Error;
use crate::ids::Revision;
use crate::machine::StateMachine;
use bincode::Options;
use serde::{Deserialize, Serialize};

/// The snapshot format this build writes and reads.
pub const SNAPSHOT_FORMAT_VERSION: u32 = 3;

/// Written before the state; restore refuses a snapshot whose header disagrees with it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Header {
    format_version: u32,
    revision: Revision,
    keys: u64,
    leases: u64,
    resources: u64,
    events: u64,
}

impl Header {
    fn of(sm: &StateMachine) -> Header {
        Header {
            format_version: SNAPSHOT_FORMAT_VERSION,
            revision: sm.revision,
            keys: sm.keys.records.len() as u64,
            leases: sm.leases.len() as u64,
            resources: sm.resources.len() as u64,
            events: sm.events.events.len() as u64,
        }
    }
}

fn codec() -> impl Options {
    bincode::DefaultOptions::new()
}

impl StateMachine {
    /// Serialises the whole state. In debug builds the bytes are restored and compared
    /// before they are returned (the pair assertion on the write side).
    pub fn snapshot(&self) -> Result<Vec<u8>, Error> {
        let mut bytes = Vec::new();
        self.snapshot_into(&mut bytes)?;
        if cfg!(debug_assertions) {
            let back = StateMachine::restore(&bytes)?;
            assert!(back == *self, "snapshot does not restore to the same state");
        }
        Ok(bytes)
    }

    /// Writes the bytes [`snapshot`](Self::snapshot) returns to `out` as it encodes them,
    /// so that no copy of the whole encoding is held in memory (a node streams its
    /// snapshots to a file: decision #122).
    pub fn snapshot_into<W: std::io::Write>(&self, mut out: W) -> Result<(), Error> {
        codec()
            .serialize_into(&mut out, &Header::of(self))
            .map_err(|e| Error::Snapshot(format!("encode header: {e}")))?;
        codec()
            .serialize_into(&mut out, self)
            .map_err(|e| Error::Snapshot(format!("encode state: {e}")))
    }

    /// Rebuilds a state from [`snapshot`](Self::snapshot) bytes. Refuses another format
    /// version, trailing bytes, a header that disagrees with the body, or a state that
    /// breaks an invariant (the pair assertion on the read side).
    pub fn restore(bytes: &[u8]) -> Result<StateMachine, Error> {
        let limit = bytes.len() as u64;
        let mut reader = bytes;
        let header: Header = codec()
            .with_limit(limit)
            .deserialize_from(&mut reader)
            .map_err(|e| Error::Snapshot(format!("decode header: {e}")))?;
        if header.format_version != SNAPSHOT_FORMAT_VERSION {
            return Err(Error::Snapshot(format!(
                "format version {} (this build reads {SNAPSHOT_FORMAT_VERSION})",
                header.format_version
            )));
        }
        let sm: StateMachine = codec()
            .with_limit(limit)
            .deserialize_from(&mut reader)
            .map_err(|e| Error::Snapshot(format!("decode state: {e}")))?;
        if !reader.is_empty() {
            return Err(Error::Snapshot(format!("{} trailing bytes", reader.len())));
        }
        if Header::of(&sm) != header {
            return Err(Error::Snapshot("header disagrees with the state".into()));
        }
        sm.invariant_violations().map_err(Error::Snapshot)?;
        Ok(sm)
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::*;
    use crate::*;

    #[test]
    fn restore_of_snapshot_equals_the_state() {
        let mut sm = StateMachine::default();
        let a = grant(&mut sm, 10_000);
        let b = grant(&mut sm, 10_000);
        put(&mut sm, "k", "v", Some(a));
        acquire(&mut sm, "L", a, "w", 0);
        acquire(&mut sm, "L", b, "w", 5_000);
        let bytes = sm.snapshot().unwrap();
        let back = StateMachine::restore(&bytes).unwrap();
        assert_eq!(back, sm);
        assert_eq!(back.snapshot().unwrap(), bytes);
    }

    #[test]
    fn restore_refuses_truncated_corrupt_or_foreign_snapshots() {
        let mut sm = StateMachine::default();
        put(&mut sm, "k", "v", None);
        let bytes = sm.snapshot().unwrap();
        assert!(StateMachine::restore(&bytes[..bytes.len() - 1]).is_err());
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(StateMachine::restore(&longer).is_err());
        let mut other_version = bytes.clone();
        other_version[0] = SNAPSHOT_FORMAT_VERSION as u8 + 1;
        assert!(StateMachine::restore(&other_version).is_err());
        assert!(StateMachine::restore(&[]).is_err());
    }
}
