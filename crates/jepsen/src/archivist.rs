//! The archivist: follows the server's whole event log from revision 1 while the run goes
//! on, so that the checkers have a ground truth even when the event window is too small
//! to read the log back after the run (`--event-window`). One unfiltered watch, moved to
//! another member whenever it breaks, stalls or ends with an error other than `compacted`;
//! it resumes at the last revision it holds and skips the events of that revision it
//! already has. If it is ever told `compacted` itself, it fell behind the window: its
//! record is incomplete and the checkers that need it say unknown.
//!
//! The per-filter logs the checkers use (`prefix=r/`, `lock=…`, …) are cut from the one
//! record with the server's filter rules ([`matches`]).

use crate::cluster::{self, API_PORT};
use crate::workload::{Ctx, parse_sse, sse_fields};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

/// Longest silence on a stream before the archivist tries another member (every write
/// of the run is an event, and progress events come every few seconds when idle).
const STALL: Duration = Duration::from_secs(6);

/// Everything the archivist received, in revision order.
#[derive(Debug, Default)]
struct Record {
    events: Vec<Value>,
    /// Why the record is incomplete, if it is.
    incomplete: Option<String>,
}

/// The running archivist.
pub struct Archivist {
    record: Arc<Mutex<Record>>,
    target: watch::Sender<Option<u64>>,
    task: tokio::task::JoinHandle<()>,
}

/// The archivist's result for one filter.
pub type Archive = Result<Vec<Value>, String>;

impl Archivist {
    /// Starts following the log of the members in `ctx`.
    pub fn start(ctx: Arc<Ctx>) -> Archivist {
        let record = Arc::new(Mutex::new(Record::default()));
        let (target, targets) = watch::channel(None);
        let task = tokio::spawn(follow(ctx, record.clone(), targets));
        Archivist {
            record,
            target,
            task,
        }
    }

    /// Waits until the record reaches `revision` (at most `limit`), stops, and cuts the
    /// log of each filter from it.
    pub async fn finish(
        self,
        revision: u64,
        limit: Duration,
        filters: &[String],
    ) -> BTreeMap<String, Archive> {
        let _ = self.target.send(Some(revision));
        let mut task = self.task;
        if tokio::time::timeout(limit, &mut task).await.is_err() {
            task.abort();
            let mut record = self.record.lock().unwrap_or_else(|p| p.into_inner());
            if record.incomplete.is_none() {
                record.incomplete = Some(format!("did not reach revision {revision} in time"));
            }
        }
        let record = self.record.lock().unwrap_or_else(|p| p.into_inner());
        filters
            .iter()
            .map(|f| {
                let archive = match &record.incomplete {
                    Some(why) => Err(format!("the archivist's record is incomplete: {why}")),
                    None => Ok(record
                        .events
                        .iter()
                        .filter(|e| matches(f, e))
                        .cloned()
                        .collect()),
                };
                (f.clone(), archive)
            })
            .collect()
    }
}

/// Whether the server's watch filter `filter` (`prefix=…`, `lock=…`, `semaphore=…`,
/// `election=…`) passes the event `e`, as the server decides it.
pub fn matches(filter: &str, e: &Value) -> bool {
    let Some((kind, arg)) = filter.split_once('=') else {
        return false;
    };
    let field = |name: &str| e.get(name).and_then(Value::as_str).unwrap_or_default();
    let kind_of_type = field("type").split('_').next().unwrap_or_default();
    match kind {
        "prefix" => {
            matches!(field("type"), "key_put" | "key_deleted") && field("key").starts_with(arg)
        }
        "lock" | "semaphore" | "election" => kind_of_type == kind && field("name") == arg,
        _ => false,
    }
}

fn revision(e: &Value) -> Option<u64> {
    e.get("revision").and_then(Value::as_u64)
}

/// How one stream ended.
enum End {
    /// The target revision is reached.
    Done,
    /// The start was behind the window.
    Compacted(String),
    /// Broken, stalled, refused or ended: try another member.
    Broken(String),
}

async fn follow(
    ctx: Arc<Ctx>,
    record: Arc<Mutex<Record>>,
    mut target: watch::Receiver<Option<u64>>,
) {
    let http = match reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(2))
        .build()
    {
        Ok(h) => h,
        Err(e) => {
            let mut r = record.lock().unwrap_or_else(|p| p.into_inner());
            r.incomplete = Some(e.to_string());
            return;
        }
    };
    let mut attempt = 0usize;
    loop {
        let slots = ctx.member_slots();
        if slots.is_empty() {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        }
        let slot = slots[attempt % slots.len()];
        attempt += 1;
        match stream(&http, slot, &record, &mut target).await {
            End::Done => return,
            End::Compacted(why) => {
                tracing::warn!(%why, "the archivist fell behind the event window");
                let mut r = record.lock().unwrap_or_else(|p| p.into_inner());
                r.incomplete = Some(why);
                return;
            }
            End::Broken(why) => {
                tracing::debug!(slot, %why, "archivist stream ended; moving on");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// One watch from the last revision held; appends what is new to `record`.
async fn stream(
    http: &reqwest::Client,
    slot: usize,
    record: &Mutex<Record>,
    target: &mut watch::Receiver<Option<u64>>,
) -> End {
    use futures_util::StreamExt;
    // Resume at the last revision held (its events may have been cut off mid-way) and skip
    // as many of its events as are held already.
    let (from, mut skip) = {
        let r = record.lock().unwrap_or_else(|p| p.into_inner());
        let last = r.events.last().and_then(revision).unwrap_or(1);
        let held = r
            .events
            .iter()
            .rev()
            .take_while(|e| revision(e) == Some(last))
            .count();
        (last, held)
    };
    let url = format!(
        "http://{}:{API_PORT}/v1/watch?start_revision={from}",
        cluster::ip(slot)
    );
    let response = match http.get(url).send().await {
        Ok(r) => r,
        Err(e) => return End::Broken(e.to_string()),
    };
    let status = response.status();
    if status.as_u16() == 410 {
        let body = response.text().await.unwrap_or_default();
        return End::Compacted(format!("watch from {from} on n{slot}: {body}"));
    }
    if !status.is_success() {
        return End::Broken(format!("status {status}"));
    }
    let mut body = response.bytes_stream();
    let mut buffer = String::new();
    loop {
        let chunk = tokio::select! {
            chunk = tokio::time::timeout(STALL, body.next()) => chunk,
            // A target set while the stream is quiet: the next progress event decides.
            changed = target.changed() => {
                if changed.is_err() {
                    return End::Done;
                }
                continue;
            }
        };
        let chunk = match chunk {
            Err(_) => return End::Broken(format!("silent for {STALL:?}")),
            Ok(None) => return End::Broken("stream ended".into()),
            Ok(Some(Err(e))) => return End::Broken(e.to_string()),
            Ok(Some(Ok(c))) => c,
        };
        buffer.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buffer.find("\n\n") {
            let frame: String = buffer.drain(..end + 2).collect();
            let (kind, data) = sse_fields(&frame);
            let data = data.as_str();
            match kind {
                "progress" => {
                    let rev = serde_json::from_str::<Value>(data)
                        .ok()
                        .and_then(|v| v["revision"].as_u64());
                    let wanted = *target.borrow();
                    if let (Some(rev), Some(wanted)) = (rev, wanted)
                        && rev >= wanted
                    {
                        return End::Done;
                    }
                }
                "error" => {
                    if data.contains("\"compacted\"") {
                        return End::Compacted(format!("stream on n{slot}: {data}"));
                    }
                    return End::Broken(format!("error event: {data}"));
                }
                _ => {
                    let Some(e) = parse_sse(&frame) else { continue };
                    let Some(rev) = revision(&e) else { continue };
                    if rev < from || (rev == from && skip > 0) {
                        skip = skip.saturating_sub(usize::from(rev == from));
                        continue;
                    }
                    let wanted = *target.borrow();
                    let mut r = record.lock().unwrap_or_else(|p| p.into_inner());
                    r.events.push(e);
                    if wanted.is_some_and(|w| rev > w) {
                        return End::Done;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn filters_cut_from_the_whole_log_as_the_server_cuts_them() {
        let put = json!({"type": "key_put", "key": "r/0-1", "revision": 3});
        let other = json!({"type": "key_put", "key": "a/1", "revision": 4});
        let granted = json!({"type": "lock_granted", "name": "lock-0", "revision": 5});
        let delay = json!({"type": "lock_delay_started", "name": "lock-0", "revision": 6});
        let leader = json!({"type": "election_leader", "name": "elect-0", "revision": 7});
        let sem = json!({"type": "semaphore_queued", "name": "lock-0", "revision": 8});
        let lease = json!({"type": "lease_expired", "lease_id": 3, "revision": 9});
        assert!(matches("prefix=r/", &put));
        assert!(!matches("prefix=r/", &other));
        assert!(matches("lock=lock-0", &granted));
        assert!(matches("lock=lock-0", &delay));
        assert!(!matches("lock=lock-1", &granted));
        assert!(
            !matches("lock=lock-0", &sem),
            "another kind of the same name"
        );
        assert!(matches("semaphore=lock-0", &sem));
        assert!(matches("election=elect-0", &leader));
        for f in ["prefix=", "lock=lock-0", "election=elect-0"] {
            assert!(!matches(f, &lease), "{f}");
        }
    }
}
