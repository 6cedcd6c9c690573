//! `GET /v1/watch`: events as Server-Sent Events. `id:` is the revision, `Last-Event-ID`
//! (or `start_revision`) resumes; events come in revision order, without gaps for the
//! filter and without duplicates; a `progress` event carries the revision everything up to
//! which has been delivered; a start older than the window is 410 `compacted`.

use crate::auth::{Access, Authz, FlowGuard, Namespace};
use crate::convert;
use crate::error::{ApiError, ApiResult};
use crate::extract::ApiQuery;
use crate::openapi::*;
use crate::state::AppState;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use baton_raft_node::AppliedProgress;
use baton_state_machine::{EventFilter, LeaseId, Rejection, ResourceId, Revision};
use baton_wire::{ErrorBody, Progress, WatchParams};
use futures_util::Stream;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;
use tokio::sync::watch;

/// Events read from the window per step.
const READ_BATCH: usize = 1_024;

fn filter(state: &AppState, p: &WatchParams) -> ApiResult<EventFilter> {
    let mut filters = Vec::new();
    if let Some(k) = &p.key {
        filters.push(EventFilter::Key(state.name("key", k)?));
    }
    if let Some(x) = &p.prefix {
        filters.push(EventFilter::Prefix(state.prefix("prefix", x)?));
    }
    if let Some(n) = &p.lock {
        filters.push(EventFilter::Resource(ResourceId::lock(
            state.name("lock", n)?,
        )));
    }
    if let Some(n) = &p.semaphore {
        filters.push(EventFilter::Resource(ResourceId::semaphore(
            state.name("semaphore", n)?,
        )));
    }
    if let Some(n) = &p.election {
        filters.push(EventFilter::Resource(ResourceId::election(
            state.name("election", n)?,
        )));
    }
    if let Some(l) = p.lease {
        filters.push(EventFilter::Lease(LeaseId(l)));
    }
    // Several filters combine: an event is delivered when it passes all of them.
    Ok(match filters.len() {
        0 => EventFilter::All,
        1 => filters.remove(0),
        _ => EventFilter::AllOf(filters),
    })
}

/// A watch needs `read` on `watches` for what it names (everything: the empty prefix); a
/// lease's events are for its owner. Events are filtered again one by one.
fn permit(state: &AppState, authz: &Authz, filter: &EventFilter) -> ApiResult<()> {
    let ns = Namespace::Watches;
    match filter {
        EventFilter::AllOf(filters) => filters.iter().try_for_each(|f| permit(state, authz, f)),
        EventFilter::All => authz.allow(ns, "", Access::Read),
        EventFilter::Key(k) | EventFilter::Prefix(k) => authz.allow(ns, k, Access::Read),
        EventFilter::Resource(r) => authz.allow(ns, &r.name, Access::Read),
        EventFilter::Lease(l) => {
            let owner = state
                .node
                .read_local(|sm| sm.lease_owner(*l).map(|o| o.map(str::to_owned)));
            match owner {
                Some(owner) if !authz.owns(owner.as_deref()) => Err(super::leases::not_yours(l.0)),
                _ => Ok(()),
            }
        }
    }
}

/// Streams events matching the filter.
#[utoipa::path(get, path = baton_wire::paths::WATCH, operation_id = "watch_watch",
    params(
        WatchParams,
        ("Last-Event-ID" = Option<u64>, Header, description = "Resume after this revision (the `id:` of the last event seen)", nullable = false),
    ),
    responses(
        (status = 200, description = "Server-Sent Events: `id:` is the revision, `event:` the type, `data:` one JSON event; `progress` events carry the revision delivered so far; an `error` event (an `ErrorBody`) ends a stream that fell behind the window", content_type = "text/event-stream", body = String),
        (status = 410, description = "`compacted`: the start is older than the event window (`oldest_revision`)", body = ErrorBody),
        BadRequest,
        Internal,
    ))]
pub(crate) async fn watch(
    State(state): State<AppState>,
    authz: Authz,
    headers: HeaderMap,
    ApiQuery(params): ApiQuery<WatchParams>,
) -> ApiResult<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>> {
    let filter = filter(&state, &params)?;
    permit(&state, &authz, &filter)?;
    let quota = authz.enter(true)?;
    let resume = match headers.get("last-event-id") {
        Some(v) => Some(
            v.to_str()
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .ok_or_else(|| ApiError::bad_request("Last-Event-ID must be a revision"))?,
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
    let reloads = match &authz {
        Authz::Principal(..) => state.auth.as_ref().map(|a| a.reloads()),
        Authz::Open => None,
    };
    let stream = WatchStream {
        reloads,
        progress: state.node.progress(),
        raft: state.node.raft().server_metrics(),
        leaderless_since: None,
        open: OpenWatch::new(&state),
        quota,
        authz,
        state,
        filter,
        from,
        buffer: VecDeque::new(),
        sent: 0,
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
        state.metrics.open_watches.inc();
        OpenWatch(state.clone())
    }
}

impl Drop for OpenWatch {
    fn drop(&mut self) {
        self.0.metrics.open_watches.dec();
    }
}

struct WatchStream {
    state: AppState,
    filter: EventFilter,
    /// The next revision to deliver from: everything before it has been delivered.
    from: Revision,
    progress: watch::Receiver<AppliedProgress>,
    /// Raft's view: a node that knows no leader for an election timeout ends its watches
    /// (etcd's require-leader), so a client learns it is cut off and goes elsewhere.
    raft: watch::Receiver<baton_raft_node::ServerMetrics>,
    leaderless_since: Option<tokio::time::Instant>,
    buffer: VecDeque<SseEvent>,
    /// Events this stream has taken from the window.
    sent: u64,
    done: bool,
    next_tick: tokio::time::Instant,
    tick: Duration,
    #[allow(dead_code)] // held for its Drop
    open: OpenWatch,
    /// Counts against the principal's open watches on this node while it lives.
    #[allow(dead_code)] // held for its Drop
    quota: Option<FlowGuard>,
    /// Who watches: each event is shown only if its key or resource is readable.
    authz: Authz,
    /// Reloads of the auth file: the watcher is checked again at each.
    reloads: Option<tokio::sync::watch::Receiver<u64>>,
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
            let cut_off = self.cut_off_at();
            if cut_off.is_some_and(|at| at <= tokio::time::Instant::now()) {
                self.end_without_leader();
                continue;
            }
            tokio::select! {
                changed = self.progress.changed() => if changed.is_err() { return None },
                changed = self.raft.changed() => if changed.is_err() { return None },
                () = sleep_until_some(cut_off) => {}
                () = tokio::time::sleep_until(self.next_tick) => {
                    self.next_tick = tokio::time::Instant::now() + self.tick;
                    let delivered = self.from.0.saturating_sub(1);
                    let progress = SseEvent::default()
                        .id(delivered.to_string())
                        .event("progress")
                        .data(to_json(&Progress { revision: delivered }));
                    return Some((Ok(progress), self));
                }
                () = self.state.shutdown.cancelled() => return None,
                () = crate::auth::reloaded(&mut self.reloads) => self.recheck(),
            }
        }
    }

    /// After a reload of the auth file: a watcher whose principal was removed, or who may
    /// no longer watch what it watches, is told so in an `error` event and the stream
    /// ends; otherwise its events are filtered by its rules as they are now.
    fn recheck(&mut self) {
        let checked = self
            .authz
            .refreshed(self.state.auth.as_deref())
            .and_then(|now| permit(&self.state, &now, &self.filter).map(|()| now));
        match checked {
            Ok(now) => self.authz = now,
            Err(refused) => {
                let body = ErrorBody::new(refused.detail, refused.message);
                self.buffer
                    .push_back(SseEvent::default().event("error").data(to_json(&body)));
                self.done = true;
            }
        }
    }

    /// Reads new events into the buffer; true if it added any.
    /// When this node, knowing no leader, ends the watch (`None` while it knows one).
    fn cut_off_at(&mut self) -> Option<tokio::time::Instant> {
        let leader = self.raft.borrow_and_update().current_leader;
        if leader.is_some() {
            self.leaderless_since = None;
            return None;
        }
        let since = *self
            .leaderless_since
            .get_or_insert_with(tokio::time::Instant::now);
        let patience = Duration::from_millis(self.state.node.config().election_timeout_max_ms);
        Some(since + patience)
    }

    /// Ends the stream with an `error` event: no leader, resume elsewhere.
    fn end_without_leader(&mut self) {
        let error = ApiError::from(baton_raft_node::NodeError::NoLeader);
        let body = ErrorBody::new(
            error.detail,
            format!(
                "this node has known no leader for an election timeout; resume from revision {} on another node",
                self.from.0
            ),
        );
        self.buffer
            .push_back(SseEvent::default().event("error").data(to_json(&body)));
        self.done = true;
    }

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
                for e in &events {
                    self.sent += 1;
                    // TEST ONLY: the `drop-watch-event` canary loses one event per stream.
                    let drop = self.sent == 20
                        && baton_raft_node::hooks::canary()
                            == Some(baton_raft_node::hooks::Canary::DropWatchEvent);
                    if !drop && self.authz.sees_event(&e.kind) {
                        self.buffer.push_back(sse_event(e));
                    }
                }
                added
            }
            Err(Rejection::Compacted { oldest }) => {
                // The client fell behind the window: say so and end the stream.
                let error = ApiError::from(Rejection::Compacted { oldest });
                let body = ErrorBody::new(error.detail, error.message);
                self.buffer
                    .push_back(SseEvent::default().event("error").data(to_json(&body)));
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

fn sse_event(e: &baton_state_machine::Event) -> SseEvent {
    let event = convert::event(e);
    SseEvent::default()
        .id(event.revision.to_string())
        .event(event.event.type_name())
        .data(to_json(&event))
}

/// A value as one line of JSON (an SSE `data` field).
fn to_json(value: &impl serde::Serialize) -> String {
    // The wire types serialise to JSON objects; nothing here can fail.
    serde_json::to_string(value).unwrap_or_else(|e| {
        tracing::error!(error = %e, "watch event not serialisable");
        String::from("{}")
    })
}

/// Sleeps until `at`, or forever if there is no `at`.
async fn sleep_until_some(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
