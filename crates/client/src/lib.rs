//! Async Rust client for baton.
//!
//! A [`Client`] talks to any node (it learns and prefers the leader, and fails over); every
//! mutation carries an idempotency key and is retried safely; an unknown outcome is
//! [`Error::Indeterminate`], never reported as a failure. A [`Lease`] keeps itself alive
//! and knows until when it is safe ([`Lease::safe_until`], [`Lease::lost`]); a
//! [`LockGuard`] carries its fence.
//!
//! Requests, answers, events and error details are the types of the wire contract
//! (`baton-wire`, re-exported as [`wire`]): nothing is read out of untyped JSON, and an
//! answer of an unexpected shape is [`Error::Protocol`], never a silent default.
//!
//! Lock with a fence (compiled, not run: it needs a server):
//!
//! ```no_run
//! # async fn example() -> Result<(), baton_client::Error> {
//! use baton_client::{Client, Lease};
//! use std::time::Duration;
//!
//! let client = Client::new(["127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"])?;
//! let lease = Lease::grant(&client, Duration::from_secs(10)).await?;
//! let guard = lease.lock_timeout("reports", Duration::from_secs(5)).await?;
//! // Give the fence to the storage you write to; it rejects anything older.
//! println!("writing with fence {}", guard.fence());
//! tokio::select! {
//!     () = guard.lost() => eprintln!("lease lost: stop writing"),
//!     () = tokio::time::sleep(Duration::from_secs(1)) => {}
//! }
//! guard.release().await?;
//! lease.close().await?;
//! # Ok(()) }
//! ```
//!
//! Election with observe:
//!
//! ```no_run
//! # async fn example() -> Result<(), baton_client::Error> {
//! use baton_client::{Client, Lease};
//! use futures_util::StreamExt;
//! use std::time::Duration;
//!
//! let client = Client::new(["127.0.0.1:7070"])?;
//! let lease = Lease::grant(&client, Duration::from_secs(10)).await?;
//! let leadership = lease.campaign("scheduler", "node-a", Duration::from_secs(30)).await?;
//! leadership.proclaim("node-a:v2").await?;
//! let mut leaders = client.observe("scheduler").await?;
//! while let Some(leader) = leaders.next().await {
//!     println!("leader now: {:?}", leader?);
//!     # break;
//! }
//! leadership.resign().await?;
//! # Ok(()) }
//! ```
//!
//! Watch, resuming across failures with no gap and no duplicate:
//!
//! ```no_run
//! # async fn example() -> Result<(), baton_client::Error> {
//! use baton_client::{Client, WatchFilter};
//! use futures_util::StreamExt;
//!
//! let client = Client::new(["127.0.0.1:7070"])?;
//! let mut events = client.watch(WatchFilter::Prefix("app/".into()), Some(1));
//! while let Some(event) = events.next().await {
//!     let event = event?; // Error::Compacted if revision 1 is gone
//!     println!("{} {}", event.revision, event.event.type_name());
//!     # break;
//! }
//! # Ok(()) }
//! ```

mod admin;
mod client;
mod election;
mod error;
mod keys;
mod lease;
mod lock;
mod watch;

pub use baton_wire as wire;
pub use baton_wire::{ClusterStatus, Event, KeyValue, Leader, Limits, WatchEvent};
pub use client::segment as segment_name;
pub use client::{Client, ClientBuilder};
pub use election::Leadership;
pub use error::{Error, Result};
pub use lease::{Lease, LeaseStatus, safety_margin};
pub use lock::{LockGuard, LockOptions};
pub use watch::WatchFilter;
