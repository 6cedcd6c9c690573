//! `GET /v1/watch`: events as Server-Sent Events. `id:` is the revision, `Last-Event-ID`
//! (or `start_revision`) resumes; events come in revision order, without gaps for the
//! filter and without duplicates; a `progress` event carries the revision everything up to
//! which has been delivered; a start older than the window is 410 `compacted`.

use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiQuery, name, prefix};
use crate::state::AppState;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use baton_raft_node::AppliedProgress;
use baton_state_machine::{
    CancelReason, Event, EventFilter, EventKind, LeaseId, Rejection, ReleaseReason, ResourceId,
    Revision,
};
use futures_util::Stream;
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::watch;

/// Events read from the window per step.
const READ_BATCH: usize = 1_024;

/// `GET /v1/watch` parameters: at most one filter, and where to start.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WatchParams {
    key: Option<String>,
    prefix: Option<String>,
    lock: Option<String>,
    semaphore: Option<String>,
    election: Option<String>,
    lease: Option<u64>,
    start_revision: Option<u64>,
}

fn filter(p: &WatchParams) -> ApiResult<EventFilter> {
    let mut filters = Vec::new();
    if let Some(k) = &p.key {
        filters.push(EventFilter::Key(name("key", k)?));
    }
    if let Some(x) = &p.prefix {
        filters.push(EventFilter::Prefix(prefix("prefix", x)?));
    }
    if let Some(n) = &p.lock {
        filters.push(EventFilter::Resource(ResourceId::lock(name("lock", n)?)));
    }
    if let Some(n) = &p.semaphore {
        filters.push(EventFilter::Resource(ResourceId::semaphore(name(
            "semaphore",
            n,
        )?)));
    }
    if let Some(n) = &p.election {
        filters.push(EventFilter::Resource(ResourceId::election(name(
            "election", n,
        )?)));
    }
    if let Some(l) = p.lease {
        filters.push(EventFilter::Lease(LeaseId(l)));
    }
    match filters.len() {
        0 => Ok(EventFilter::All),
        1 => Ok(filters.remove(0)),
        _ => Err(ApiError::BadRequest(
            "give at most one of key, prefix, lock, semaphore, election, lease".into(),
        )),
    }
}

/// Streams events matching the filter.
#[utoipa::path(get, path = "/v1/watch",
    responses((status = 200, description = "text/event-stream"), (status = 410, description = "compacted")))]
pub(crate) async fn watch(
    State(state): State<AppState>,
    headers: HeaderMap,
    ApiQuery(params): ApiQuery<WatchParams>,
) -> ApiResult<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>> {
    let filter = filter(&params)?;
    let resume = match headers.get("last-event-id") {
        Some(v) => Some(
            v.to_str()
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .ok_or_else(|| ApiError::BadRequest("Last-Event-ID must be a revision".into()))?,
        ),
        None => None,
    };
    let current = state.node.read_local(|sm| sm.revision());
    let from = match (resume, params.start_revision) {
        (Some(last_seen), _) => Revision(last_seen.saturating_add(1)),
        (None, Some(start)) => Revision(start.max(1)),
        (None, None) => current.next(),
    };
    // Refuse a start the window no longer holds before the stream begins.
    state
        .node
        .read_local(|sm| sm.events_since(from, &filter, 0))
        .map_err(ApiError::from)?;
    let tick = Duration::from_millis(state.config.watch_progress_ms);
    let stream = WatchStream {
        progress: state.node.progress(),
        open: OpenWatch::new(&state),
        state,
        filter,
        from,
        buffer: VecDeque::new(),
        done: false,
        next_tick: tokio::time::Instant::now() + tick,
        tick,
    };
    Ok(
        Sse::new(futures_util::stream::unfold(stream, WatchStream::next))
            .keep_alive(KeepAlive::default()),
    )
}

/// Counts an open watch for the metrics while it lives.
struct OpenWatch(AppState);

impl OpenWatch {
    fn new(state: &AppState) -> OpenWatch {
        state.metrics.open_watches.fetch_add(1, Ordering::Relaxed);
        OpenWatch(state.clone())
    }
}

impl Drop for OpenWatch {
    fn drop(&mut self) {
        self.0.metrics.open_watches.fetch_sub(1, Ordering::Relaxed);
    }
}

struct WatchStream {
    state: AppState,
    filter: EventFilter,
    /// The next revision to deliver from: everything before it has been delivered.
    from: Revision,
    progress: watch::Receiver<AppliedProgress>,
    buffer: VecDeque<SseEvent>,
    done: bool,
    next_tick: tokio::time::Instant,
    tick: Duration,
    #[allow(dead_code)] // held for its Drop
    open: OpenWatch,
}

impl WatchStream {
    async fn next(mut self) -> Option<(Result<SseEvent, Infallible>, WatchStream)> {
        loop {
            if let Some(event) = self.buffer.pop_front() {
                return Some((Ok(event), self));
            }
            if self.done {
                return None;
            }
            self.progress.borrow_and_update();
            if self.fill() {
                continue;
            }
            tokio::select! {
                changed = self.progress.changed() => if changed.is_err() { return None },
                () = tokio::time::sleep_until(self.next_tick) => {
                    self.next_tick = tokio::time::Instant::now() + self.tick;
                    let delivered = self.from.0.saturating_sub(1);
                    let progress = SseEvent::default()
                        .id(delivered.to_string())
                        .event("progress")
                        .data(json!({ "revision": delivered }).to_string());
                    return Some((Ok(progress), self));
                }
                () = self.state.shutdown.cancelled() => return None,
            }
        }
    }

    /// Reads new events into the buffer; true if it added any.
    fn fill(&mut self) -> bool {
        let (from, filter) = (self.from, &self.filter);
        let read = self.state.node.read_local(|sm| {
            sm.events_since(from, filter, READ_BATCH)
                .map(|events| (events, sm.revision()))
        });
        match read {
            Ok((events, current)) => {
                // A full batch may stop early (between revisions); otherwise everything
                // up to `current` has been seen.
                self.from = match events.last() {
                    Some(last) if events.len() >= READ_BATCH => last.revision.next(),
                    _ => current.next().max(self.from),
                };
                let added = !events.is_empty();
                self.buffer.extend(events.iter().map(sse_event));
                added
            }
            Err(Rejection::Compacted { oldest }) => {
                // The client fell behind the window: say so and end the stream.
                let error = json!({"error": {"code": "compacted", "oldest_revision": oldest.0}});
                self.buffer
                    .push_back(SseEvent::default().event("error").data(error.to_string()));
                self.done = true;
                true
            }
            Err(other) => {
                tracing::warn!(?other, "watch read refused");
                self.done = true;
                false
            }
        }
    }
}

fn sse_event(e: &Event) -> SseEvent {
    SseEvent::default()
        .id(e.revision.0.to_string())
        .event(e.kind.name())
        .data(event_json(e).to_string())
}

/// An event's JSON data.
pub(crate) fn event_json(e: &Event) -> Value {
    let mut v = match &e.kind {
        EventKind::KeyPut {
            key,
            value,
            create_revision,
            version,
            lease,
        } => json!({
            "key": key, "value": value, "create_revision": create_revision.0,
            "mod_revision": e.revision.0, "version": version, "lease_id": lease.map(|l| l.0),
        }),
        EventKind::KeyDeleted { key, lease } => json!({"key": key, "lease_id": lease.map(|l| l.0)}),
        EventKind::Queued {
            resource,
            lease,
            owner,
            demand,
            position,
            wait_ms,
        } => json!({
            "name": resource.name, "lease_id": lease.0, "owner": owner,
            "mode": crate::wire::demand_parts(*demand).0, "position": position, "wait_ms": wait_ms,
        }),
        EventKind::Granted {
            resource,
            lease,
            owner,
            demand,
            fence,
            enqueued,
        } => json!({
            "name": resource.name, "lease_id": lease.0, "owner": owner,
            "mode": crate::wire::demand_parts(*demand).0, "fence": fence.0,
            "enqueued_revision": enqueued.map(|r| r.0),
        }),
        EventKind::CountChanged {
            resource,
            lease,
            owner,
            fence,
            count,
        } => json!({
            "name": resource.name, "lease_id": lease.0, "owner": owner, "fence": fence.0, "count": count,
        }),
        EventKind::Released {
            resource,
            lease,
            owner,
            fence,
            reason,
        } => json!({
            "name": resource.name, "lease_id": lease.0, "owner": owner, "fence": fence.0,
            "reason": match reason {
                ReleaseReason::Released => "released",
                ReleaseReason::Forced => "forced",
                ReleaseReason::LeaseRevoked => "lease_revoked",
                ReleaseReason::LeaseExpired => "lease_expired",
            },
        }),
        EventKind::Cancelled {
            resource,
            lease,
            owner,
            enqueued,
            reason,
        } => json!({
            "name": resource.name, "lease_id": lease.0, "owner": owner,
            "enqueued_revision": enqueued.0,
            "reason": match reason {
                CancelReason::Cancelled => "cancelled",
                CancelReason::TimedOut => "timed_out",
                CancelReason::LeaseRevoked => "lease_revoked",
                CancelReason::LeaseExpired => "lease_expired",
            },
        }),
        EventKind::DelayStarted { resource, delay_ms } => {
            json!({"name": resource.name, "delay_ms": delay_ms})
        }
        EventKind::DelayEnded { resource } => json!({"name": resource.name}),
        EventKind::LeaderChanged { election, leader } => json!({
            "name": election, "leader": leader.as_ref().map(crate::wire::leader_dto),
        }),
        EventKind::LeaseGranted { lease, ttl_ms } => json!({"lease_id": lease.0, "ttl_ms": ttl_ms}),
        EventKind::LeaseRevoked { lease } | EventKind::LeaseExpired { lease } => {
            json!({"lease_id": lease.0})
        }
    };
    if let Some(object) = v.as_object_mut() {
        object.insert("revision".into(), json!(e.revision.0));
        object.insert("type".into(), json!(e.kind.name()));
    }
    v
}
