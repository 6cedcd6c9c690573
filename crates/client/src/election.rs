//! Elections, as in etcd's election API: campaign (held open while a candidate), proclaim,
//! resign, the current leader, and observe (a stream of leader changes).

use crate::client::{Call, Client, segment};
use crate::error::{Error, Result};
use crate::lease::Lease;
use crate::watch::WatchFilter;
use baton_wire::paths;
use baton_wire::{
    CampaignRequest, ElectionResponse, Event, Leader, ProclaimRequest, ProclaimResponse,
    ReleaseResponse, ResignRequest,
};
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use std::time::Duration;

/// This client's leadership of an election.
pub struct Leadership {
    lease: Lease,
    name: String,
    fence: u64,
}

impl Lease {
    /// Campaigns for `name` with `value`, waiting up to `wait` as a candidate.
    pub async fn campaign(&self, name: &str, value: &str, wait: Duration) -> Result<Leadership> {
        let body = CampaignRequest {
            lease_id: self.id(),
            value: value.to_owned(),
            wait_ms: wait.as_millis() as u64,
            enqueued: None,
        };
        let grant = self
            .client()
            .queue(
                &paths::fill(paths::ELECTION_CAMPAIGN, &segment(name)),
                body,
                wait,
            )
            .await?;
        Ok(Leadership {
            lease: self.clone(),
            name: name.to_owned(),
            fence: grant.holder.fence,
        })
    }
}

impl Leadership {
    /// The leader's fence.
    pub fn fence(&self) -> u64 {
        self.fence
    }

    /// Resolves when the leadership can no longer be counted on (the lease is lost).
    pub async fn lost(&self) {
        self.lease.lost().await
    }

    /// Sets a new value.
    pub async fn proclaim(&self, value: &str) -> Result<()> {
        let body = ProclaimRequest {
            lease_id: self.lease.id(),
            fence: Some(self.fence),
            value: value.to_owned(),
        };
        let path = paths::fill(paths::ELECTION_PROCLAIM, &segment(&self.name));
        self.lease
            .client()
            .post::<_, ProclaimResponse>(&path, &body, Call::WRITE)
            .await
            .map(|_| ())
    }

    /// Steps down; the next candidate leads at once.
    pub async fn resign(self) -> Result<()> {
        let body = ResignRequest {
            lease_id: self.lease.id(),
            fence: Some(self.fence),
        };
        let path = paths::fill(paths::ELECTION_RESIGN, &segment(&self.name));
        match self
            .lease
            .client()
            .post::<_, ReleaseResponse>(&path, &body, Call::WRITE)
            .await
        {
            Ok(_) | Err(Error::NotHolder { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

impl Client {
    /// The current leader of `name`, if any.
    pub async fn leader(&self, name: &str) -> Result<Option<Leader>> {
        Ok(self.election(name).await?.leader)
    }

    /// An election's state: its leader (value and fence) and the revision read.
    pub async fn election(&self, name: &str) -> Result<ElectionResponse> {
        self.get_json(&paths::fill(paths::ELECTION, &segment(name)))
            .await
    }

    /// The leader now, then every change (a new leader, a new value, or none).
    pub async fn observe(&self, name: &str) -> Result<BoxStream<'static, Result<Option<Leader>>>> {
        let state = self.election(name).await?;
        let now = state.leader;
        let from = state.revision + 1;
        let changes = self
            .watch(WatchFilter::Election(name.to_owned()), Some(from))
            .filter_map(|event| async move {
                match event {
                    Ok(e) => match e.event {
                        Event::LeaderChanged(change) => Some(Ok(change.leader)),
                        _ => None,
                    },
                    Err(e) => Some(Err(e)),
                }
            });
        Ok(futures_util::stream::once(async move { Ok(now) })
            .chain(changes)
            .boxed())
    }
}
