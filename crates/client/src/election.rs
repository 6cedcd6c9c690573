//! Elections, as in etcd's election API: campaign (held open while a candidate), proclaim,
//! resign, the current leader, and observe (a stream of leader changes).

use crate::client::{Call, Client, segment};
use crate::error::{Error, Result};
use crate::lease::Lease;
use crate::watch::WatchFilter;
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use serde_json::{Value, json};
use std::time::Duration;

/// An election's leader.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leader {
    /// The leader's lease.
    pub lease_id: u64,
    /// Its proclaimed value.
    pub value: String,
    /// Its fence (the revision it became leader).
    pub fence: u64,
}

fn leader(v: &Value) -> Option<Leader> {
    Some(Leader {
        lease_id: v["lease_id"].as_u64()?,
        value: v["value"].as_str()?.to_owned(),
        fence: v["fence"].as_u64()?,
    })
}

/// This client's leadership of an election.
pub struct Leadership {
    lease: Lease,
    name: String,
    fence: u64,
}

impl Lease {
    /// Campaigns for `name` with `value`, waiting up to `wait` as a candidate.
    pub async fn campaign(&self, name: &str, value: &str, wait: Duration) -> Result<Leadership> {
        let body =
            json!({"lease_id": self.id(), "value": value, "wait_ms": wait.as_millis() as u64});
        let grant = self
            .client()
            .post(
                &format!("/v1/elections/{}/campaign", segment(name)),
                &body,
                Call::waiting(wait),
            )
            .await?;
        Ok(Leadership {
            lease: self.clone(),
            name: name.to_owned(),
            fence: grant["fence"].as_u64().unwrap_or(0),
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
        let body = json!({"lease_id": self.lease.id(), "fence": self.fence, "value": value});
        let path = format!("/v1/elections/{}/proclaim", segment(&self.name));
        self.lease
            .client()
            .post(&path, &body, Call::WRITE)
            .await
            .map(|_| ())
    }

    /// Steps down; the next candidate leads at once.
    pub async fn resign(self) -> Result<()> {
        let body = json!({"lease_id": self.lease.id(), "fence": self.fence});
        let path = format!("/v1/elections/{}/resign", segment(&self.name));
        match self.lease.client().post(&path, &body, Call::WRITE).await {
            Ok(_) | Err(Error::NotHolder { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

impl Client {
    /// The current leader of `name`, if any.
    pub async fn leader(&self, name: &str) -> Result<Option<Leader>> {
        let body = self
            .get_path(&format!("/v1/elections/{}", segment(name)))
            .await?;
        Ok(leader(&body["leader"]))
    }

    /// The leader now, then every change (a new leader, a new value, or none).
    pub async fn observe(&self, name: &str) -> Result<BoxStream<'static, Result<Option<Leader>>>> {
        let body = self
            .get_path(&format!("/v1/elections/{}", segment(name)))
            .await?;
        let now = leader(&body["leader"]);
        let from = body["revision"].as_u64().unwrap_or(0) + 1;
        let changes = self
            .watch(WatchFilter::Election(name.to_owned()), Some(from))
            .filter_map(|event| async move {
                match event {
                    Ok(e) if e.kind == "election_leader" => Some(Ok(leader(&e.data["leader"]))),
                    Ok(_) => None,
                    Err(e) => Some(Err(e)),
                }
            });
        Ok(futures_util::stream::once(async move { Ok(now) })
            .chain(changes)
            .boxed())
    }
}
