//! A Raft link: one HTTP/1.1 connection to one peer, driven by the task that calls it
//! (decision #113). openraft calls a target's `RaftNetwork` from that target's
//! replication task, one RPC at a time, so the connection needs no task of its own: the
//! request is written, and the answer read, while the caller awaits it. Through the
//! shared `reqwest` pool every RPC also crossed to the pool's connection task and back,
//! two task wake-ups per RPC on the leader's commit path. The wire is unchanged (the
//! same POST, bincode body and secret header), so the peer's server needs no change.
//! Since decision #135 a node's other peer calls (forwarded requests, membership changes,
//! identity checks) take a link for the call too, and the `reqwest` pool is gone.

use super::client::{PeerClient, PeerError};
use super::{SECRET_HEADER, Target};
use crate::types::NodeId;
use bytes::Bytes;
use futures_util::FutureExt;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use rustls_pki_types::ServerName;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;
use tokio::net::TcpStream;

/// How long a new connection (TCP and TLS handshakes) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// The connection's I/O driver: it makes progress only while it is polled.
type Driver = Pin<Box<dyn Future<Output = hyper::Result<()>> + Send>>;

/// Idle connections kept per peer address for the next link to that peer: enough for
/// the requests a node forwards to its leader at once (each takes a connection for its
/// call) to find one open, up to 64 at a time. Past that, the extra connections close
/// after their call.
const IDLE_PER_PEER: usize = 64;

/// An idle connection is not reused after this long: the peer's server closes idle
/// connections after `ConnLimits::peer_default`'s 300 s, and a link must never send on a
/// connection the server may be closing at that moment.
const IDLE_REUSE_MAX: std::time::Duration = std::time::Duration::from_secs(60);

/// Connections of links that were dropped, by peer address, for the next link to take.
/// openraft makes a new `RaftNetwork` for every leadership confirmation (each
/// linearizable read round and each keepalive's check, `ensure_linearizable`) and every
/// vote, and drops it after one RPC: without this each of them would open a connection.
#[derive(Default)]
pub(crate) struct IdleLinks(
    std::sync::Mutex<std::collections::HashMap<String, Vec<(std::time::Instant, Open)>>>,
);

impl IdleLinks {
    fn take(&self, key: &str) -> Option<Open> {
        let mut idle = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let kept = idle.get_mut(key)?;
        // The newest is taken first; the oldest, past their reuse, are dropped.
        kept.retain(|(since, _)| since.elapsed() < IDLE_REUSE_MAX);
        kept.pop().map(|(_, open)| open)
    }

    fn put(&self, key: &str, open: Open) {
        let mut idle = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let kept = idle.entry(key.to_owned()).or_default();
        if kept.len() < IDLE_PER_PEER {
            kept.push((std::time::Instant::now(), open));
        }
    }
}

/// An open connection: the request side and its driver. The driver is not `Sync`, and
/// openraft wants its networks to be: the mutex makes it so, and is never locked (the
/// link is used through `&mut`, so `get_mut` reaches it).
pub(crate) struct Open {
    sender: http1::SendRequest<Full<Bytes>>,
    driver: std::sync::Mutex<Driver>,
}

impl Open {
    /// Whether the connection can carry a request. One the peer closed while it was idle
    /// is noticed only by polling its driver: this does so once, without waiting.
    fn alive(&mut self) -> bool {
        let driver = self.driver.get_mut().unwrap_or_else(|e| e.into_inner());
        !self.sender.is_closed() && driver.as_mut().now_or_never().is_none()
    }
}

/// One peer's link; connects on first use and again after any failure.
pub(crate) struct PeerLink {
    client: PeerClient,
    addr: String,
    /// The member expected at `addr` (0: any), checked against its certificate.
    expect: NodeId,
    /// The idle-connection pool's key: the member and the address.
    key: String,
    open: Option<Open>,
}

impl PeerLink {
    /// A link to `to` with `client`'s secret and TLS; nothing is opened yet.
    pub(crate) fn new(client: PeerClient, to: Target<'_>) -> PeerLink {
        PeerLink {
            client,
            addr: to.addr.to_owned(),
            expect: to.id,
            key: format!("{}@{}", to.id, to.addr),
            open: None,
        }
    }

    /// POSTs `body` to `path` and returns the reply's body, all within `timeout`. Any
    /// failure closes the connection, so the next call starts on a fresh one.
    pub(crate) async fn call(
        &mut self,
        path: &str,
        body: Vec<u8>,
        timeout: Duration,
    ) -> Result<Bytes, PeerError> {
        let result = match tokio::time::timeout(timeout, self.exchange(path, body)).await {
            Ok(result) => result,
            Err(_) => Err(PeerError::Network(format!(
                "no answer within {} ms",
                timeout.as_millis()
            ))),
        };
        if result.is_err() {
            self.open = None;
        }
        result
    }

    /// Sends a POST of `body` to `path` and returns the answer's head and its body, not
    /// read yet: [`read`](Self::read) reads it. A failure closes the connection; so does
    /// dropping the body before its end (hyper does not reuse it).
    async fn send(
        &mut self,
        path: &str,
        body: Vec<u8>,
    ) -> Result<(hyper::http::response::Parts, Incoming), PeerError> {
        let request = self.request(path, body).await?;
        let result = async {
            let Some(Open { sender, driver }) = self.open.as_mut() else {
                return Err(PeerError::Network("no connection".to_owned()));
            };
            let driver = driver.get_mut().unwrap_or_else(|e| e.into_inner());
            let answer = async {
                sender.ready().await.map_err(network)?;
                let response = sender.send_request(request).await.map_err(network)?;
                let (parts, body) = response.into_parts();
                if !parts.status.is_success() {
                    return Err(PeerError::Refused(parts.status.as_u16()));
                }
                Ok((parts, body))
            };
            tokio::pin!(answer);
            tokio::select! {
                biased;
                answer = &mut answer => answer,
                ended = driver.as_mut() => Err(ended_early(ended)),
            }
        }
        .await;
        if result.is_err() {
            self.open = None;
        }
        result
    }

    /// The next piece of an answer's `body` from [`send`](Self::send), while driving the
    /// connection; `None` at its end. A failure closes the connection.
    async fn read(&mut self, body: &mut Incoming) -> Result<Option<Bytes>, PeerError> {
        let result = async {
            let Some(Open { driver, .. }) = self.open.as_mut() else {
                return Err(PeerError::Network("no connection".to_owned()));
            };
            let driver = driver.get_mut().unwrap_or_else(|e| e.into_inner());
            loop {
                let frame = tokio::select! {
                    biased;
                    frame = body.frame() => frame,
                    ended = driver.as_mut() => return Err(ended_early(ended)),
                };
                match frame {
                    None => return Ok(None),
                    Some(Err(e)) => return Err(network(e)),
                    Some(Ok(frame)) => {
                        if let Ok(data) = frame.into_data() {
                            return Ok(Some(data));
                        }
                    }
                }
            }
        }
        .await;
        if result.is_err() {
            self.open = None;
        }
        result
    }

    /// A POST of `body` to `path` with the secret, on this link's connection (opened or
    /// taken from the idle ones as needed).
    async fn request(
        &mut self,
        path: &str,
        body: Vec<u8>,
    ) -> Result<hyper::Request<Full<Bytes>>, PeerError> {
        // This link's connection, else one a dropped link left, whichever is still alive.
        let reused = self
            .open
            .take()
            .and_then(|mut open| open.alive().then_some(open))
            .or_else(|| {
                let mut open = self.client.idle_links().take(&self.key)?;
                open.alive().then_some(open)
            });
        match reused {
            Some(open) => self.open = Some(open),
            None => self.open = Some(self.connect().await?),
        }
        let mut request = hyper::Request::post(path)
            .header(hyper::header::HOST, self.addr.as_str())
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| PeerError::Network(e.to_string()))?;
        if let Some(secret) = self.client.secret_header()? {
            request.headers_mut().insert(SECRET_HEADER, secret.clone());
        }
        Ok(request)
    }

    async fn exchange(&mut self, path: &str, body: Vec<u8>) -> Result<Bytes, PeerError> {
        let (_, mut body) = self.send(path, body).await?;
        self.read_to_end(&mut body).await
    }

    /// The rest of an answer's `body` from [`send`](Self::send), in one piece (without a
    /// copy when it came in one, as small answers do).
    async fn read_to_end(&mut self, body: &mut Incoming) -> Result<Bytes, PeerError> {
        let Some(first) = self.read(body).await? else {
            return Ok(Bytes::new());
        };
        let Some(second) = self.read(body).await? else {
            return Ok(first);
        };
        let mut whole = bytes::BytesMut::from(&first[..]);
        whole.extend_from_slice(&second);
        while let Some(piece) = self.read(body).await? {
            whole.extend_from_slice(&piece);
        }
        Ok(whole.freeze())
    }

    /// Opens a connection (TLS if the cluster uses it). Failures here mean nothing was
    /// sent: `Unreachable`, so openraft backs off.
    async fn connect(&self) -> Result<Open, PeerError> {
        let unreachable = |e: &dyn std::fmt::Display| {
            PeerError::Unreachable(format!("connect to {}: {e}", self.addr))
        };
        let tcp = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&self.addr))
            .await
            .map_err(|e| unreachable(&e))?
            .map_err(|e| unreachable(&e))?;
        tcp.set_nodelay(true).map_err(|e| unreachable(&e))?;
        let (sender, driver): (_, Driver) = match self.client.connector() {
            None => {
                let (sender, conn) = http1::handshake(TokioIo::new(tcp))
                    .await
                    .map_err(|e| unreachable(&e))?;
                (sender, Box::pin(conn))
            }
            Some(connector) => {
                let name = server_name(&self.addr).map_err(|e| unreachable(&e))?;
                let tls = tokio::time::timeout(CONNECT_TIMEOUT, connector.connect(name, tcp))
                    .await
                    .map_err(|e| unreachable(&e))?
                    .map_err(|e| unreachable(&e))?;
                if self.expect != 0 {
                    let leaf = tls.get_ref().1.peer_certificates().and_then(<[_]>::first);
                    let named = leaf
                        .ok_or_else(|| "no certificate".to_owned())
                        .and_then(crate::tls::member_id)
                        .map_err(|e| unreachable(&e))?;
                    if named != self.expect {
                        return Err(unreachable(&format!(
                            "its certificate names node {named}, not node {}",
                            self.expect
                        )));
                    }
                }
                let (sender, conn) = http1::handshake(TokioIo::new(tls))
                    .await
                    .map_err(|e| unreachable(&e))?;
                (sender, Box::pin(conn))
            }
        };
        Ok(Open {
            sender,
            driver: std::sync::Mutex::new(driver),
        })
    }
}

impl Drop for PeerLink {
    /// A healthy connection goes to the idle ones for the next link to this peer; one
    /// whose last call failed was already dropped. (One whose call was abandoned midway
    /// is found ended by the next link's `alive` check: hyper ends a connection whose
    /// answer nobody awaits; see the test `a_link_dropped_during_a_call_leaves_...`.)
    fn drop(&mut self) {
        if let Some(open) = self.open.take()
            && !open.sender.is_closed()
        {
            self.client.idle_links().put(&self.key, open);
        }
    }
}

/// The connection ended while an answer was awaited.
fn ended_early(ended: hyper::Result<()>) -> PeerError {
    PeerError::Network(match ended {
        Ok(()) => "the peer closed the connection".to_owned(),
        Err(e) => e.to_string(),
    })
}

fn network(e: hyper::Error) -> PeerError {
    PeerError::Network(e.to_string())
}

/// The name a peer's certificate must carry: the host of `host:port` (an IP address or
/// a DNS name; brackets of an IPv6 literal removed), as an HTTPS client checks it.
fn server_name(addr: &str) -> Result<ServerName<'static>, String> {
    let host = match addr.rsplit_once(':') {
        Some((host, port)) if port.parse::<u16>().is_ok() => host,
        _ => addr,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_owned()).map_err(|e| format!("{host}: {e}"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests: a failure is reported by the panic
mod tests {
    use super::{PeerLink, server_name};
    use crate::network::{PeerClient, PeerError, SECRET_HEADER, Target};
    use axum::Router;
    use axum::http::{HeaderMap, StatusCode};
    use axum::routing::post;
    use std::net::SocketAddr;
    use std::time::Duration;
    use tokio::net::TcpListener;
    use tokio::sync::oneshot;
    use tokio::task::JoinHandle;

    /// A peer that echoes `/echo` bodies to callers presenting the secret `s3cret`.
    async fn echo_peer(
        listener: TcpListener,
    ) -> (oneshot::Sender<()>, JoinHandle<std::io::Result<()>>) {
        let app = Router::new().route(
            "/echo",
            post(|headers: HeaderMap, body: axum::body::Bytes| async move {
                match headers.get(SECRET_HEADER) {
                    Some(v) if v == "s3cret" => Ok(body),
                    _ => Err(StatusCode::UNAUTHORIZED),
                }
            }),
        );
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await
        });
        (stop, server)
    }

    const SECOND: Duration = Duration::from_secs(1);

    /// Serves `app` on a free loopback port, telling handlers the caller's address.
    async fn serve_with_addresses(app: Router) -> (String, JoinHandle<std::io::Result<()>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = tokio::spawn(async move {
            axum::serve(
                listener,
                app.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .await
        });
        (addr, server)
    }

    /// A peer's handler that answers with the caller's address: one per connection.
    async fn who(
        axum::extract::ConnectInfo(from): axum::extract::ConnectInfo<SocketAddr>,
    ) -> String {
        from.to_string()
    }

    #[tokio::test]
    async fn a_link_sends_the_secret_and_survives_its_peer_restarting() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        let (stop, server) = echo_peer(listener).await;
        let client = PeerClient::new(Some("s3cret".into()), None).unwrap();
        let mut link = PeerLink::new(
            client,
            Target {
                id: 0,
                addr: &addr.to_string(),
            },
        );
        for body in ["one", "two"] {
            let reply = link.call("/echo", body.into(), SECOND).await.unwrap();
            assert_eq!(&reply[..], body.as_bytes());
        }
        // The peer goes away (closing the idle connection) and comes back on its port:
        // the next call notices the closed connection and opens a new one.
        stop.send(()).unwrap();
        server.await.unwrap().unwrap();
        let listener = TcpListener::bind(addr).await.unwrap();
        let (stop, server) = echo_peer(listener).await;
        let reply = link.call("/echo", "three".into(), SECOND).await.unwrap();
        assert_eq!(&reply[..], b"three");
        stop.send(()).unwrap();
        server.await.unwrap().unwrap();
        // Nobody listens now: nothing could be sent, which openraft must know.
        let down = link.call("/echo", "four".into(), SECOND).await;
        assert!(matches!(down, Err(PeerError::Unreachable(_))), "{down:?}");
    }

    #[tokio::test]
    async fn a_refusal_keeps_its_status() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, server) = echo_peer(listener).await;
        let mut link = PeerLink::new(
            PeerClient::new(None, None).unwrap(),
            Target {
                id: 0,
                addr: &addr.to_string(),
            },
        );
        let refused = link.call("/echo", "x".into(), SECOND).await;
        assert!(
            matches!(refused, Err(PeerError::Refused(401))),
            "{refused:?}"
        );
        stop.send(()).unwrap();
        server.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn a_new_link_takes_the_connection_a_dropped_one_left() {
        // The peer answers with the client's own address: one per connection.
        let app = Router::new().route("/who", post(who));
        let (addr, server) = serve_with_addresses(app).await;
        let client = PeerClient::new(None, None).unwrap();
        let ask = |mut link: PeerLink| async move {
            let from = link.call("/who", Vec::new(), SECOND).await.unwrap();
            (String::from_utf8(from.to_vec()).unwrap(), link)
        };
        let (first, link) = ask(PeerLink::new(client.clone(), Target { id: 0, addr: &addr })).await;
        drop(link);
        let (second, kept) =
            ask(PeerLink::new(client.clone(), Target { id: 0, addr: &addr })).await;
        assert_eq!(first, second, "the dropped link's connection is used again");
        // Two links alive at once need two connections.
        let (third, _) = ask(PeerLink::new(client.clone(), Target { id: 0, addr: &addr })).await;
        assert_ne!(second, third);
        drop(kept);
        server.abort();
    }

    #[tokio::test]
    async fn a_link_dropped_during_a_call_leaves_no_connection_behind() {
        // `/who` answers with the client's address at once, `/slow` after 10 s.
        let app = Router::new().route("/who", post(who)).route(
            "/slow",
            post(|| async {
                tokio::time::sleep(Duration::from_secs(10)).await;
                "late"
            }),
        );
        let (addr, server) = serve_with_addresses(app).await;
        let client = PeerClient::new(None, None).unwrap();
        let mut link = PeerLink::new(client.clone(), Target { id: 0, addr: &addr });
        let first = link.call("/who", Vec::new(), SECOND).await.unwrap();
        // The caller gives up on a slow call by dropping it (as a stopped replication task
        // or a caller's deadline does), then the link.
        let slow = link.call("/slow", Vec::new(), Duration::from_secs(60));
        assert!(
            tokio::time::timeout(Duration::from_millis(200), slow)
                .await
                .is_err()
        );
        drop(link);
        // The next link answers at once, on a new connection: it did not get the one that
        // still owes the slow answer (HTTP/1.1 would queue its call behind it). hyper ends
        // a connection whose answer nobody awaits any more, and `alive` sees that.
        let mut next = PeerLink::new(client, Target { id: 0, addr: &addr });
        let second = next.call("/who", Vec::new(), SECOND).await.unwrap();
        assert_ne!(first, second, "a new connection");
        server.abort();
    }

    /// Calls made the way a node forwards requests (`PeerClient::call`, a link per call
    /// since decision #135): sixteen at once, then sixteen more, and the second round runs
    /// on connections the first one left.
    #[tokio::test]
    async fn calls_at_once_share_connections() {
        let app = Router::new().route(
            "/who",
            post(
                |axum::extract::ConnectInfo(from): axum::extract::ConnectInfo<SocketAddr>| async move {
                    crate::codec::encode(&from.to_string()).unwrap()
                },
            ),
        );
        let (addr, server) = serve_with_addresses(app).await;
        let client = PeerClient::new(None, None).unwrap();
        let round = || async {
            let calls = (0..16).map(|_| {
                client.call::<(), String>(Target { id: 0, addr: &addr }, "/who", &(), SECOND)
            });
            let mut callers = std::collections::BTreeSet::new();
            for answer in futures_util::future::join_all(calls).await {
                callers.insert(answer.unwrap());
            }
            callers
        };
        let first = round().await;
        assert_eq!(
            first.len(),
            16,
            "sixteen calls at once, sixteen connections"
        );
        let second = round().await;
        assert!(second.is_subset(&first), "{second:?} not within {first:?}");
        server.abort();
    }

    #[test]
    fn the_server_name_is_the_host_of_the_address() {
        assert_eq!(
            server_name("127.0.0.1:7071").unwrap(),
            rustls_pki_types::ServerName::IpAddress(std::net::Ipv4Addr::new(127, 0, 0, 1).into())
        );
        assert!(matches!(
            server_name("[::1]:7071").unwrap(),
            rustls_pki_types::ServerName::IpAddress(_)
        ));
        assert!(matches!(
            server_name("node-2.baton.internal:7071").unwrap(),
            rustls_pki_types::ServerName::DnsName(_)
        ));
        assert!(server_name("bad host:7071").is_err());
    }
}
