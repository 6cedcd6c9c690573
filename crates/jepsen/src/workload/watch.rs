//! `watch`: SSE streams over the register keys in stretches of a few seconds, resumed
//! after each break (and sometimes a little earlier, so the overlap must repeat exactly,
//! or from revision 1, which a small event window answers with 410 `compacted`: the
//! watch then resumes at the oldest revision the server still holds).

use super::Worker;
use crate::history::Kind;
use rand::Rng;
use serde_json::{Value, json};
use std::time::Duration;

/// Watches the register keys in stretches of a few seconds, resuming after each one
/// where the last ended (and sometimes a little earlier, to test resumption).
pub async fn watch(mut w: Worker) {
    use futures_util::StreamExt;
    let mut next: u64 = 1;
    while w.ctx.running() {
        let (_, node, url) = w.ctx.pick(&mut w.rng);
        let start = if w.rng.random_range(0..8) == 0 {
            1
        } else {
            next
        };
        let args = json!({"prefix": "r/", "start_revision": start});
        let rec = w.ctx.rec.clone();
        rec.record(
            Kind::Invoke,
            w.process,
            "watch",
            Some("r/"),
            args,
            Some(&node),
            None,
        );
        let stretch = Duration::from_millis(w.rng.random_range(2_000..6_000));
        let mut events: Vec<Value> = Vec::new();
        let mut error: Option<String> = None;
        let mut compacted: Option<u64> = None;
        let request = reqwest::Client::new()
            .get(format!("{url}/v1/watch?prefix=r/&start_revision={start}"))
            .timeout(stretch)
            .send()
            .await;
        match request {
            Ok(r) if r.status().is_success() => {
                let mut body = r.bytes_stream();
                let mut buffer = String::new();
                loop {
                    match body.next().await {
                        Some(Ok(chunk)) => {
                            buffer.push_str(&String::from_utf8_lossy(&chunk));
                            while let Some(end) = buffer.find("\n\n") {
                                let frame: String = buffer.drain(..end + 2).collect();
                                if let Some(e) = parse_sse(&frame) {
                                    events.push(e);
                                }
                            }
                        }
                        Some(Err(e)) => {
                            if !e.is_timeout() {
                                error = Some(e.to_string());
                            }
                            break;
                        }
                        None => {
                            error = Some("stream ended".into());
                            break;
                        }
                    }
                }
            }
            Ok(r) if r.status().as_u16() == 410 => {
                let body: Value = r.json().await.unwrap_or(Value::Null);
                compacted = body["error"]["oldest_revision"].as_u64();
                error = Some("compacted".into());
            }
            Ok(r) => error = Some(format!("status {}", r.status())),
            Err(e) => error = Some(e.to_string()),
        }
        let last = events
            .iter()
            .filter_map(|e| e.get("revision").and_then(Value::as_u64))
            .max();
        if let Some(oldest) = compacted {
            next = next.max(oldest);
        } else if let Some(last) = last {
            next = last + 1;
            // Now and then resume from a little earlier: the overlap must repeat exactly.
            if w.rng.random_range(0..4) == 0 {
                next = next.saturating_sub(w.rng.random_range(1..20)).max(1);
            }
        }
        // A watch that saw events is an observation whatever ended it.
        rec.record(
            Kind::Ok,
            w.process,
            "watch",
            Some("r/"),
            json!({"events": events, "ended": error, "oldest_revision": compacted}),
            Some(&node),
            None,
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One SSE frame's event type (empty for a plain event) and its data lines joined.
pub fn sse_fields(frame: &str) -> (&str, String) {
    let mut kind = "";
    let mut data = String::new();
    for line in frame.lines() {
        if let Some(k) = line.strip_prefix("event:") {
            kind = k.trim();
        } else if let Some(d) = line.strip_prefix("data:") {
            data.push_str(d.trim_start());
        }
    }
    (kind, data)
}

/// Parses one SSE frame into the event's JSON data (`None` for comments, progress, and the
/// `error` event that ends a stream: behind the window, or a node without a leader).
pub fn parse_sse(frame: &str) -> Option<Value> {
    let (kind, data) = sse_fields(frame);
    if kind == "progress" || kind == "error" || data.is_empty() {
        return None;
    }
    serde_json::from_str(&data).ok()
}
