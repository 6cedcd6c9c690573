//! bincode 1.3 in one place: the Raft log, snapshots and peer RPC bodies.

use serde::Serialize;
use serde::de::DeserializeOwned;

/// Encodes a value.
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, bincode::Error> {
    bincode::serialize(value)
}

/// Decodes a value, refusing trailing bytes.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, bincode::Error> {
    use bincode::Options;
    bincode::DefaultOptions::new()
        .with_fixint_encoding()
        .with_limit(bytes.len() as u64)
        .deserialize(bytes)
}
