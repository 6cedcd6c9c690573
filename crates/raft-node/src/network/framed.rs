//! The leader's answer to a forwarded proposal in frames (decision #146): when the
//! forwarding follower asks for them (`flushed=1`), the answer's body is a sequence of
//! length-prefixed bincode [`ForwardFrame`]s, marked by [`FRAMED_HEADER`]. A
//! [`ForwardFrame::Flushed`] comes as soon as the leader has flushed the entry that
//! carries the proposal; the [`ForwardFrame::Answer`] always ends the body. A leader of
//! an older version ignores the query parameter and answers in one piece, which
//! [`FramedCall`] reads as an `Answer`.

use super::client::{PeerClient, PeerError};
use super::link::PeerLink;
use super::server::PeerFailure;
use super::{PEER_BODY_BYTES_MAX, committed_in};
use crate::codec;
use crate::types::{FlushedAt, LogId};
use baton_state_machine::Applied;
use bytes::{Buf, Bytes, BytesMut};
use hyper::body::Incoming;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The header (`1`) of an answer sent in frames.
pub const FRAMED_HEADER: &str = "x-baton-framed";

/// One frame of the leader's answer to a forwarded proposal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ForwardFrame {
    /// The leader has flushed its log up to the entry that carries the proposal.
    Flushed(FlushedAt),
    /// The proposal's outcome, and the committed entry that carried it (if it was
    /// proposed): the last frame.
    Answer {
        /// The outcome.
        result: Result<Applied, PeerFailure>,
        /// The entry that carried it, committed.
        committed: Option<LogId>,
    },
}

impl ForwardFrame {
    /// The frame as it goes on the wire: its length (4 bytes, little-endian), then its
    /// bincode.
    pub fn encode(&self) -> Result<Bytes, bincode::Error> {
        let body = codec::encode(self)?;
        let mut framed = Vec::with_capacity(4 + body.len());
        framed.extend_from_slice(&(body.len() as u32).to_le_bytes());
        framed.extend_from_slice(&body);
        Ok(framed.into())
    }
}

/// Reassembles frames from the pieces of a body, however they were split.
#[derive(Default)]
pub(crate) struct FrameReader {
    buffer: BytesMut,
}

impl FrameReader {
    /// Adds a piece of the body.
    pub(crate) fn push(&mut self, piece: &[u8]) {
        self.buffer.extend_from_slice(piece);
    }

    /// The next whole frame, if the pieces so far hold one.
    pub(crate) fn next(&mut self) -> Result<Option<ForwardFrame>, PeerError> {
        let Some(head) = self.buffer.get(..4) else {
            return Ok(None);
        };
        let mut len = [0; 4];
        len.copy_from_slice(head);
        let len = u32::from_le_bytes(len) as usize;
        if len > PEER_BODY_BYTES_MAX {
            return Err(PeerError::Network(format!("a frame of {len} bytes")));
        }
        if self.buffer.len() < 4 + len {
            return Ok(None);
        }
        self.buffer.advance(4);
        let body = self.buffer.split_to(len);
        codec::decode(&body)
            .map(Some)
            .map_err(|e| PeerError::Network(format!("decode frame: {e}")))
    }
}

/// A forwarded proposal's call: the leader's frames as they come.
pub(crate) struct FramedCall {
    link: PeerLink,
    body: Incoming,
    /// `None`: the leader answers in one piece (an older version).
    frames: Option<FrameReader>,
    /// The committed entry the header of a one-piece answer names.
    committed: Option<LogId>,
    /// Whether the answer was read to its end.
    done: bool,
}

impl FramedCall {
    /// POSTs the encoded proposal `body` to `path` on `addr` (a path that asks for
    /// frames) and reads the answer's head.
    pub(crate) async fn start(
        client: &PeerClient,
        to: super::Target<'_>,
        path: &str,
        body: Vec<u8>,
    ) -> Result<FramedCall, PeerError> {
        let mut link = PeerLink::new(client.clone(), to);
        let (parts, body) = link.send(path, body).await?;
        let framed = parts
            .headers
            .get(FRAMED_HEADER)
            .is_some_and(|v| v.as_bytes() == b"1");
        let committed = committed_in(&parts.headers);
        Ok(FramedCall {
            link,
            body,
            frames: framed.then(FrameReader::default),
            committed,
            done: false,
        })
    }

    /// The next frame; after an `Answer`, an error.
    pub(crate) async fn next(&mut self) -> Result<ForwardFrame, PeerError> {
        if self.done {
            return Err(PeerError::Network("the answer has ended".to_owned()));
        }
        let Some(frames) = &mut self.frames else {
            let whole = self.link.read_to_end(&mut self.body).await?;
            self.done = true;
            let result = codec::decode(&whole)
                .map_err(|e| PeerError::Network(format!("decode reply: {e}")))?;
            return Ok(ForwardFrame::Answer {
                result,
                committed: self.committed,
            });
        };
        loop {
            if let Some(frame) = frames.next()? {
                if matches!(frame, ForwardFrame::Answer { .. }) {
                    // Read to the body's end, which follows the last frame at once, so
                    // that the connection can carry the next call.
                    while self.link.read(&mut self.body).await?.is_some() {}
                    self.done = true;
                }
                return Ok(frame);
            }
            match self.link.read(&mut self.body).await? {
                Some(piece) => frames.push(&piece),
                None => {
                    return Err(PeerError::Network(
                        "the answer ended before its last frame".to_owned(),
                    ));
                }
            }
        }
    }

    /// Reads the rest of the answer within `timeout`, so that the connection can carry
    /// the next call (what is read is of no use any more).
    pub(crate) async fn finish(mut self, timeout: Duration) {
        let rest = async {
            while !self.done {
                if self.next().await.is_err() {
                    break;
                }
            }
        };
        if tokio::time::timeout(timeout, rest).await.is_err() {
            tracing::debug!("a forwarded proposal's answer did not end in time");
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests: a failure is reported by the panic
mod tests {
    use super::{ForwardFrame, FrameReader};
    use crate::types::{FlushedAt, LogId};
    use baton_state_machine::{Applied, Response, Revision};

    #[test]
    fn frames_read_back_however_the_body_is_split() {
        let log_id = LogId::new(openraft::CommittedLeaderId::new(3, 1), 42);
        let frames = vec![
            ForwardFrame::Flushed(FlushedAt { log_id, slot: 2 }),
            ForwardFrame::Answer {
                result: Ok(Applied {
                    revision: Revision(9),
                    response: Response::Deleted { deleted: 1 },
                    events: Vec::new(),
                    replayed: false,
                }),
                committed: Some(log_id),
            },
        ];
        let wire: Vec<u8> = frames
            .iter()
            .flat_map(|f| f.encode().unwrap().to_vec())
            .collect();
        for step in [1, 3, 7, wire.len()] {
            let mut reader = FrameReader::default();
            let mut read = Vec::new();
            for piece in wire.chunks(step) {
                reader.push(piece);
                while let Some(frame) = reader.next().unwrap() {
                    read.push(frame);
                }
            }
            assert_eq!(read, frames, "pieces of {step} bytes");
        }
    }

    #[test]
    fn a_frame_longer_than_any_body_is_refused_before_it_is_buffered() {
        let mut reader = FrameReader::default();
        reader.push(&u32::MAX.to_le_bytes());
        assert!(reader.next().is_err());
    }
}
