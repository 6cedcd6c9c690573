//! A real headless Chromium (Debian's `chromium`), driven over the DevTools protocol: open
//! a page, evaluate JavaScript in it, wait for what a person would see, click, and take
//! screenshots. The browser runs in a process group of its own, started here and killed by
//! that group's id when the `Browser` drops.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use base64::Engine;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tempfile::TempDir;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// The `chromium` binary, installed by the project's `.ci/browser-deps` if missing.
fn chromium() -> PathBuf {
    crate::common::tool("chromium", "browser-deps")
}

/// One headless browser with one page.
pub struct Browser {
    child: Child,
    _profile: TempDir,
    socket: Socket,
    session: String,
    next_id: u64,
}

impl Browser {
    /// Starts Chromium (1280×900) and opens a blank page.
    pub async fn start() -> Browser {
        let profile = TempDir::new().unwrap();
        let mut child = Command::new(chromium())
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-extensions",
                "--disable-background-networking",
                "--hide-scrollbars",
                "--window-size=1280,900",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start chromium");
        // Chromium prints the browser's DevTools address on stderr.
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(at) = line.find("ws://") {
                    let _ = tx.send(line[at..].trim().to_owned());
                }
            }
        });
        let url = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("chromium printed its DevTools address");
        let (socket, _) = tokio_tungstenite::connect_async(url.as_str())
            .await
            .expect("connect to chromium's DevTools");
        let mut browser = Browser {
            child,
            _profile: profile,
            socket,
            session: String::new(),
            next_id: 0,
        };
        let target = browser
            .call(None, "Target.createTarget", json!({"url": "about:blank"}))
            .await;
        let target_id = target["targetId"].as_str().unwrap().to_owned();
        let attached = browser
            .call(
                None,
                "Target.attachToTarget",
                json!({"targetId": target_id, "flatten": true}),
            )
            .await;
        browser.session = attached["sessionId"].as_str().unwrap().to_owned();
        browser.page("Page.enable", json!({})).await;
        browser.page("Runtime.enable", json!({})).await;
        browser
    }

    async fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        let reply = self.call_or_error(session, method, params).await;
        reply.unwrap_or_else(|error| panic!("{method}: {error}"))
    }

    /// A DevTools call; `Err` carries the error Chromium answered with.
    async fn call_or_error(
        &mut self,
        session: Option<&str>,
        method: &str,
        params: Value,
    ) -> Result<Value, Value> {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            message["sessionId"] = json!(s);
        }
        self.socket
            .send(Message::text(message.to_string()))
            .await
            .expect("send to chromium");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let frame = tokio::time::timeout(left, self.socket.next())
                .await
                .unwrap_or_else(|_| panic!("chromium did not answer {method}"))
                .expect("chromium's socket closed")
                .expect("read from chromium");
            let Message::Text(text) = frame else { continue };
            let reply: Value = serde_json::from_str(&text).unwrap();
            if reply["id"].as_u64() == Some(id) {
                if reply["error"].is_null() {
                    return Ok(reply["result"].clone());
                }
                return Err(reply);
            }
        }
    }

    async fn page(&mut self, method: &str, params: Value) -> Value {
        let session = self.session.clone();
        self.call(Some(&session), method, params).await
    }

    /// Loads `url` and waits until the page has its `load` event.
    pub async fn open(&mut self, url: &str) {
        self.page("Page.navigate", json!({"url": url})).await;
        self.wait_for("document.readyState === 'complete'", "the page to load")
            .await;
    }

    /// Evaluates `expression` in the page (awaiting a promise) and returns its value.
    pub async fn eval(&mut self, expression: &str) -> Value {
        self.try_eval(expression)
            .await
            .unwrap_or_else(|error| panic!("{expression}: {error}"))
    }

    /// The same, or why not: the expression threw, or the page was navigating (a reload
    /// between two documents answers "Inspected target navigated or closed"). For polls.
    async fn try_eval(&mut self, expression: &str) -> Result<Value, Value> {
        let session = self.session.clone();
        let params = json!({"expression": expression, "returnByValue": true, "awaitPromise": true});
        let result = self
            .call_or_error(Some(&session), "Runtime.evaluate", params)
            .await?;
        if !result["exceptionDetails"].is_null() {
            return Err(result["exceptionDetails"].clone());
        }
        Ok(result["result"]["value"].clone())
    }

    /// The text a person sees in the page; empty while a navigation or reload is between
    /// documents (the new one has no body yet).
    pub async fn text(&mut self) -> String {
        self.try_eval("document.body ? document.body.innerText : ''")
            .await
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default()
    }

    /// Waits (at most 30 s: a liveness bound, not a speed check) until `condition` holds.
    /// An evaluation that fails counts as "not yet" (the page may be reloading); the last
    /// failure is shown if the wait runs out.
    pub async fn wait_for(&mut self, condition: &str, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut failure = Value::Null;
        loop {
            match self.try_eval(&format!("Boolean({condition})")).await {
                Ok(Value::Bool(true)) => return,
                Ok(_) => {}
                Err(error) => failure = error,
            }
            if Instant::now() > deadline {
                let text = self.text().await;
                panic!("waited 30 s for {what} (last failure: {failure}); the page shows:\n{text}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the page's visible text contains every one of `needles`.
    pub async fn wait_for_text(&mut self, needles: &[&str]) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let text = self.text().await;
            if needles.iter().all(|n| text.contains(n)) {
                return;
            }
            if Instant::now() > deadline {
                let missing: Vec<_> = needles.iter().filter(|n| !text.contains(**n)).collect();
                panic!("waited 30 s for {missing:?}; the page shows:\n{text}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Saves a PNG of the viewport at `path`.
    pub async fn screenshot(&mut self, path: &Path) {
        let shot = self
            .page("Page.captureScreenshot", json!({"format": "png"}))
            .await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().unwrap())
            .unwrap();
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, png).unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // The group this test created for the browser and its helpers.
        let group = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
