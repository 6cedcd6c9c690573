//! Watches as a `Stream`. The stream reconnects (trying every endpoint) and resumes with
//! `Last-Event-ID` from the last revision it delivered completely, skipping the events of
//! a half-delivered revision it already gave out: no gap, no duplicate. A start older than
//! the server's window ends the stream with `Error::Compacted`.

use crate::client::Client;
use crate::error::{Error, Result};
use baton_wire::{ErrorBody, ErrorDetail, Progress, WatchEvent, WatchParams, paths};
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use std::collections::VecDeque;
use std::time::Duration;

/// What to watch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchFilter {
    /// Everything.
    All,
    /// One key.
    Key(String),
    /// Keys under a prefix.
    Prefix(String),
    /// One lock.
    Lock(String),
    /// One semaphore.
    Semaphore(String),
    /// One election (its queue and its leader changes).
    Election(String),
    /// A lease and everything it owns.
    Lease(u64),
}

impl WatchFilter {
    /// The query of this filter, starting at `start_revision`.
    fn params(&self, start_revision: Option<u64>) -> WatchParams {
        let mut p = WatchParams {
            start_revision,
            ..WatchParams::default()
        };
        match self {
            WatchFilter::All => {}
            WatchFilter::Key(k) => p.key = Some(k.clone()),
            WatchFilter::Prefix(x) => p.prefix = Some(x.clone()),
            WatchFilter::Lock(n) => p.lock = Some(n.clone()),
            WatchFilter::Semaphore(n) => p.semaphore = Some(n.clone()),
            WatchFilter::Election(n) => p.election = Some(n.clone()),
            WatchFilter::Lease(l) => p.lease = Some(*l),
        }
        p
    }
}

struct State {
    client: Client,
    filter: WatchFilter,
    /// Every event of revisions up to this one was delivered (0: none yet).
    complete: u64,
    /// The revision being delivered and how many of its events went out.
    partial: Option<(u64, usize)>,
    /// Where to start if nothing was delivered yet.
    start: Option<u64>,
    connection: Option<futures_util::stream::BoxStream<'static, reqwest::Result<Vec<u8>>>>,
    text: String,
    /// Events (or an unreadable event's error) ready to hand out.
    ready: VecDeque<Result<WatchEvent>>,
    /// Events of the partial revision to skip after a reconnect.
    skip: usize,
    attempt: usize,
    done: bool,
}

impl Client {
    /// Watches `filter` from revision `from` (`None`: from the next revision).
    pub fn watch(
        &self,
        filter: WatchFilter,
        from: Option<u64>,
    ) -> BoxStream<'static, Result<WatchEvent>> {
        let state = State {
            client: self.clone(),
            filter,
            complete: 0,
            partial: None,
            start: from,
            connection: None,
            text: String::new(),
            ready: VecDeque::new(),
            skip: 0,
            attempt: 0,
            done: false,
        };
        futures_util::stream::unfold(state, State::next).boxed()
    }
}

impl State {
    async fn next(mut self) -> Option<(Result<WatchEvent>, State)> {
        loop {
            if let Some(event) = self.ready.pop_front() {
                return Some((event, self));
            }
            if self.done {
                return None;
            }
            let Some(connection) = self.connection.as_mut() else {
                match self.connect().await {
                    Ok(()) => continue,
                    Err(e @ Error::Compacted { .. }) => {
                        self.done = true;
                        return Some((Err(e), self));
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "watch: reconnecting");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        continue;
                    }
                }
            };
            match connection.next().await {
                Some(Ok(chunk)) => {
                    self.text.push_str(&String::from_utf8_lossy(&chunk));
                    self.parse();
                }
                _ => {
                    // The stream broke or ended: resume from what was delivered.
                    self.connection = None;
                    self.skip = self.partial.map_or(0, |(_, n)| n);
                }
            }
        }
    }

    async fn connect(&mut self) -> Result<()> {
        if self.start.is_none() && self.complete == 0 && self.partial.is_none() {
            // "From now" is pinned to a revision once, so a reconnect leaves no gap.
            let cluster = self.client.cluster().await?;
            self.start = Some(cluster.revision + 1);
        }
        let (index, endpoint) = self.client.endpoint(self.attempt);
        self.attempt += 1;
        let resume = match self.partial {
            Some((rev, _)) => Some(rev.saturating_sub(1)),
            None if self.complete > 0 => Some(self.complete),
            None => None,
        };
        let mut request = self
            .client
            .http()
            .get(format!("{endpoint}{}", paths::WATCH));
        let start = match (resume, self.start) {
            (Some(last), _) => {
                request = request.header("Last-Event-ID", last.to_string());
                None
            }
            (None, start) => start,
        };
        let response = request
            .query(&self.filter.params(start))
            .send()
            .await
            .map_err(|e| Error::Unreachable(e.to_string()))?;
        let status = response.status().as_u16();
        if status != 200 {
            let text = response.text().await.unwrap_or_default();
            return Err(match serde_json::from_str::<ErrorBody>(&text) {
                Ok(body) => Error::from_api(status, body),
                Err(_) => Error::unreadable(status, &text),
            });
        }
        self.client.prefer(index);
        self.text.clear();
        self.connection = Some(
            response
                .bytes_stream()
                .map(|r| r.map(|b| b.to_vec()))
                .boxed(),
        );
        Ok(())
    }

    fn parse(&mut self) {
        while let Some(end) = self.text.find("\n\n") {
            let block: String = self.text.drain(..end + 2).collect();
            let mut id = None;
            let mut kind = None;
            let mut data = String::new();
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("id:") {
                    id = v.trim().parse::<u64>().ok();
                } else if let Some(v) = line.strip_prefix("event:") {
                    kind = Some(v.trim().to_owned());
                } else if let Some(v) = line.strip_prefix("data:") {
                    data.push_str(v.trim_start());
                }
            }
            match kind.as_deref() {
                Some("progress") => {
                    let revision = serde_json::from_str::<Progress>(&data)
                        .map(|p| p.revision)
                        .ok()
                        .or(id);
                    if let Some(revision) = revision {
                        self.complete = self.complete.max(revision);
                        if self.partial.is_some_and(|(r, _)| r <= revision) {
                            self.partial = None;
                        }
                    }
                }
                Some("error") => {
                    // The server ends the stream (e.g. this watcher fell behind its window):
                    // reconnecting from what was delivered gets the definite answer
                    // (`compacted`) or resumes.
                    if let Ok(body) = serde_json::from_str::<ErrorBody>(&data) {
                        tracing::debug!(detail = ?body.error.detail, "watch: the server ended the stream");
                        if let ErrorDetail::Compacted { oldest_revision } = body.error.detail {
                            self.ready
                                .push_back(Err(Error::Compacted { oldest_revision }));
                            self.done = true;
                        }
                    }
                    self.connection = None;
                }
                Some(_) => match serde_json::from_str::<WatchEvent>(&data) {
                    Ok(event) => self.deliver(event),
                    Err(e) => self
                        .ready
                        .push_back(Err(Error::Protocol(format!("watch event {id:?}: {e}")))),
                },
                None => {}
            }
        }
    }

    fn deliver(&mut self, event: WatchEvent) {
        match self.partial {
            Some((rev, n)) if rev == event.revision => {
                if self.skip > 0 {
                    self.skip -= 1;
                    return;
                }
                self.partial = Some((rev, n + 1));
            }
            Some((rev, _)) if event.revision < rev => return,
            Some((rev, _)) => {
                self.complete = rev;
                self.skip = 0;
                self.partial = Some((event.revision, 1));
            }
            None => {
                if event.revision <= self.complete {
                    return;
                }
                self.skip = 0;
                self.partial = Some((event.revision, 1));
            }
        }
        self.ready.push_back(Ok(event));
    }
}
