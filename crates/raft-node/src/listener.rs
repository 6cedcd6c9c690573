//! Serving HTTP on a port so that no client, authenticated or not, can hold more of the
//! node than it is allowed: both ports (the client API and the peer port) are served here.
//!
//! - **A cap on open connections** ([`ConnLimits::max_connections`]). At the cap a new
//!   connection takes the place of the oldest one that never finished a request head,
//!   else of the oldest one idle between requests; when every connection is busy (a request
//!   in flight: a held-open acquire, a watch) the new one is closed at once. A slowloris
//!   that opens thousands of half-sent requests therefore cannot take the node's file
//!   descriptors, and a well-behaved client that arrives after it is still served.
//! - **A header timeout**: a connection must finish its TLS handshake and its first request
//!   head within [`ConnLimits::header_timeout`] of opening, and every later head within as
//!   long of its first byte.
//! - **An idle timeout**: a connection with no request in flight and no byte of a new one
//!   for [`ConnLimits::idle_timeout`] is closed.
//!
//! A request in flight is never timed out here: held-open acquires and watches stream their
//! bodies for as long as they need, only their heads are bounded. Everything is counted in
//! [`ConnStats`] (shown in `/metrics` per port).

use crate::tls::{ReloadableTls, no_delay};
use axum::body::Body;
use bytes::Bytes;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use rustls_pki_types::CertificateDer;
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

/// Descriptors kept back from the connection caps for the node's own files, its links to
/// its peers and the process's other needs.
pub const RESERVED_DESCRIPTORS: u64 = 256;

/// The bounds of one port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnLimits {
    /// Open connections at most.
    pub max_connections: usize,
    /// Time to finish the TLS handshake and a request head.
    pub header_timeout: Duration,
    /// Time a connection may stay open with nothing in flight.
    pub idle_timeout: Duration,
}

impl ConnLimits {
    /// The client API's defaults: 4 096 connections (or fewer, to fit `descriptors`:
    /// three quarters of what is left after [`RESERVED_DESCRIPTORS`]), heads within 10 s,
    /// idle connections closed after 120 s (longer than common clients keep theirs idle,
    /// reqwest's 90 s for one, so a client closes first).
    pub fn api_default(descriptors: u64) -> ConnLimits {
        ConnLimits {
            max_connections: fit(4_096, descriptors, 3, 4),
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
        }
    }

    /// The peer port's defaults: 1 024 connections (or a quarter of the descriptors left
    /// after [`RESERVED_DESCRIPTORS`]), heads within 10 s, idle connections closed after
    /// 300 s (the links drop theirs after 60 s: `network::link`).
    pub fn peer_default(descriptors: u64) -> ConnLimits {
        ConnLimits {
            max_connections: fit(1_024, descriptors, 1, 4),
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
        }
    }
}

/// `wanted`, or `num/den` of the descriptors beyond the reserve if that is smaller (at
/// least 16).
fn fit(wanted: usize, descriptors: u64, num: u64, den: u64) -> usize {
    let share = descriptors.saturating_sub(RESERVED_DESCRIPTORS) * num / den;
    wanted
        .min(usize::try_from(share).unwrap_or(usize::MAX))
        .max(16)
}

/// The process's limit on open descriptors, raised first to its hard limit (as Go's
/// runtime does): the caps of both ports are fitted under it.
pub fn descriptor_limit() -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return 1_024;
    };
    if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        return hard;
    }
    soft
}

/// What one port saw of its connections (monotonic counters and one gauge).
#[derive(Debug, Default)]
pub struct ConnStats {
    /// Connections open now.
    pub open: AtomicU64,
    /// Connections accepted.
    pub accepted: AtomicU64,
    /// Connections closed to make room for a new one at the cap.
    pub evicted: AtomicU64,
    /// New connections closed at once: at the cap with every connection busy.
    pub refused: AtomicU64,
    /// Connections closed for a head (or TLS handshake) not finished in time.
    pub header_timeouts: AtomicU64,
    /// Connections closed for staying idle too long.
    pub idle_timeouts: AtomicU64,
    /// TLS handshakes that failed, and peers whose certificate names no member.
    pub handshake_failures: AtomicU64,
}

/// Checks the certificates a client presented after its TLS handshake (the peer port binds
/// them to a member's identity); `Err` closes the connection with the reason logged.
pub type PeerCheck = Arc<dyn Fn(&[CertificateDer<'_>]) -> Result<(), String> + Send + Sync>;

/// How a port is served: plain or TLS, and what its clients must prove.
#[derive(Clone, Default)]
pub struct Serving {
    /// TLS with this (reloadable) configuration, or plain TCP.
    pub tls: Option<Arc<ReloadableTls>>,
    /// A check of the client's certificate (mutual TLS only).
    pub check: Option<PeerCheck>,
}

const NEVER: u64 = u64::MAX;

/// One open connection, as the cap and the timeouts see it. Times are milliseconds since
/// the server started.
struct Conn {
    opened_ms: u64,
    /// Requests dispatched and not yet answered to their end.
    in_flight: AtomicU32,
    /// When the last request in flight ended (`NEVER`: none yet).
    idle_since_ms: AtomicU64,
    /// When the first byte arrived since the connection last went idle (`NEVER`: none).
    reading_since_ms: AtomicU64,
    /// Wakes the connection's watchdog when the above change in a way that matters.
    wake: Notify,
    /// Cancelled to close the connection at once (it was chosen to make room).
    close: CancellationToken,
}

impl Conn {
    fn never_served(&self) -> bool {
        self.idle_since_ms.load(Ordering::Acquire) == NEVER
    }

    fn busy(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) > 0
    }
}

/// The clock of one server.
#[derive(Clone, Copy)]
struct Epoch(Instant);

impl Epoch {
    fn now_ms(self) -> u64 {
        u64::try_from(self.0.elapsed().as_millis()).unwrap_or(NEVER - 1)
    }
}

/// Counts one request in flight on its connection until it drops (with the response
/// body, once that has been sent whole).
struct InFlight {
    conn: Arc<Conn>,
    epoch: Epoch,
}

impl InFlight {
    fn enter(conn: Arc<Conn>, epoch: Epoch) -> InFlight {
        conn.in_flight.fetch_add(1, Ordering::AcqRel);
        conn.reading_since_ms.store(NEVER, Ordering::Release);
        InFlight { conn, epoch }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.conn.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.conn
                .idle_since_ms
                .store(self.epoch.now_ms(), Ordering::Release);
            self.conn.reading_since_ms.store(NEVER, Ordering::Release);
            self.conn.wake.notify_one();
        }
    }
}

/// A connection's I/O that notes the first byte of a request head arriving while idle.
struct Tracked<IO> {
    io: IO,
    conn: Arc<Conn>,
    epoch: Epoch,
}

impl<IO: AsyncRead + Unpin> AsyncRead for Tracked<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.io).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            let conn = &this.conn;
            if !conn.busy() && conn.reading_since_ms.load(Ordering::Acquire) == NEVER {
                let now = this.epoch.now_ms();
                if conn
                    .reading_since_ms
                    .compare_exchange(NEVER, now, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    conn.wake.notify_one();
                }
            }
        }
        polled
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Tracked<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// A response body that keeps its request counted in flight until it is dropped.
struct Counted {
    body: Body,
    _in_flight: InFlight,
}

impl hyper::body::Body for Counted {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// Why the watchdog closed a connection.
enum Expired {
    Header,
    Idle,
}

/// Waits until `conn` has outlived a timeout; never while a request is in flight.
async fn watchdog(conn: &Conn, limits: ConnLimits, epoch: Epoch) -> Expired {
    let header_ms = u64::try_from(limits.header_timeout.as_millis()).unwrap_or(NEVER / 2);
    let idle_ms = u64::try_from(limits.idle_timeout.as_millis()).unwrap_or(NEVER / 2);
    loop {
        let notified = conn.wake.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if conn.busy() {
            notified.await;
            continue;
        }
        let reading = conn.reading_since_ms.load(Ordering::Acquire);
        let idle = conn.idle_since_ms.load(Ordering::Acquire);
        let (deadline, why) = if idle == NEVER {
            // Not one request yet: the handshake and the first head count from the open.
            (conn.opened_ms.saturating_add(header_ms), Expired::Header)
        } else if reading != NEVER {
            (reading.saturating_add(header_ms), Expired::Header)
        } else {
            (idle.saturating_add(idle_ms), Expired::Idle)
        };
        let now = epoch.now_ms();
        if now >= deadline {
            // A request may have begun since the loads above: only an idle one expires.
            if !conn.busy() {
                return why;
            }
            continue;
        }
        tokio::select! {
            () = notified => {}
            () = tokio::time::sleep(Duration::from_millis(deadline - now)) => {}
        }
    }
}

/// The open connections of one server, by the order they were accepted.
#[derive(Default)]
struct Registry {
    conns: Mutex<BTreeMap<u64, Arc<Conn>>>,
}

impl Registry {
    /// Registers a new connection if there is room, making room by closing the oldest
    /// connection that never finished a request, else the oldest idle one. `Err(())` when
    /// every connection is busy.
    fn admit(&self, id: u64, conn: Arc<Conn>, max: usize, stats: &ConnStats) -> Result<(), ()> {
        let mut conns = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        if conns.len() >= max {
            let victim = conns
                .iter()
                .find(|(_, c)| c.never_served() && !c.busy())
                .or_else(|| conns.iter().find(|(_, c)| !c.busy()))
                .map(|(id, _)| *id);
            let Some(victim) = victim else {
                return Err(());
            };
            if let Some(gone) = conns.remove(&victim) {
                gone.close.cancel();
                stats.evicted.fetch_add(1, Ordering::Relaxed);
            }
        }
        conns.insert(id, conn);
        Ok(())
    }

    fn remove(&self, id: u64) {
        self.conns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
    }
}

/// Serves `app` on `listener` within `limits` until `shutdown` is cancelled; then stops
/// accepting, lets each connection finish what it is doing (idle ones close at once) and
/// returns once all are closed.
pub async fn serve(
    listener: TcpListener,
    app: axum::Router,
    serving: Serving,
    limits: ConnLimits,
    stats: Arc<ConnStats>,
    shutdown: CancellationToken,
) {
    let epoch = Epoch(Instant::now());
    let registry = Arc::new(Registry::default());
    let connections = TaskTracker::new();
    let builder = auto::Builder::new(TokioExecutor::new());
    let mut next_id = 0u64;
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = shutdown.cancelled() => break,
        };
        let (mut tcp, remote) = match accepted {
            Ok(pair) => pair,
            Err(e) => {
                // Out of descriptors and the like (the cap should prevent it): wait for
                // some to free up.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        next_id += 1;
        let id = next_id;
        stats.accepted.fetch_add(1, Ordering::Relaxed);
        let conn = Arc::new(Conn {
            opened_ms: epoch.now_ms(),
            in_flight: AtomicU32::new(0),
            idle_since_ms: AtomicU64::new(NEVER),
            reading_since_ms: AtomicU64::new(NEVER),
            wake: Notify::new(),
            close: CancellationToken::new(),
        });
        if registry
            .admit(id, conn.clone(), limits.max_connections, &stats)
            .is_err()
        {
            stats.refused.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(%remote, "connection refused: at the cap, every connection busy");
            continue;
        }
        no_delay(&mut tcp);
        stats.open.fetch_add(1, Ordering::Relaxed);
        let (registry, stats, serving, builder, app, shutdown) = (
            registry.clone(),
            stats.clone(),
            serving.clone(),
            builder.clone(),
            app.clone(),
            shutdown.clone(),
        );
        connections.spawn(async move {
            let served = ConnTask {
                conn: conn.clone(),
                epoch,
                limits,
                stats: stats.clone(),
                builder,
                app,
                shutdown,
            };
            match serving.tls {
                None => served.run(tcp).await,
                Some(tls) => {
                    let handshake = async {
                        let stream = tls
                            .acceptor()
                            .accept(tcp)
                            .await
                            .map_err(|e| e.to_string())?;
                        if let Some(check) = &serving.check {
                            let certs = stream.get_ref().1.peer_certificates().unwrap_or(&[]);
                            check(certs)?;
                        }
                        Ok::<_, String>(stream)
                    };
                    let wait = limits.header_timeout;
                    tokio::select! {
                        done = tokio::time::timeout(wait, handshake) => match done {
                            Ok(Ok(stream)) => served.run(stream).await,
                            Ok(Err(e)) => {
                                stats.handshake_failures.fetch_add(1, Ordering::Relaxed);
                                tracing::debug!(%remote, error = %e, "TLS handshake refused");
                            }
                            Err(_) => {
                                stats.header_timeouts.fetch_add(1, Ordering::Relaxed);
                                tracing::debug!(%remote, "TLS handshake timed out");
                            }
                        },
                        () = conn.close.cancelled() => {}
                    }
                }
            }
            registry.remove(id);
            stats.open.fetch_sub(1, Ordering::Relaxed);
        });
    }
    drop(listener);
    connections.close();
    connections.wait().await;
}

/// What one connection's task needs.
struct ConnTask {
    conn: Arc<Conn>,
    epoch: Epoch,
    limits: ConnLimits,
    stats: Arc<ConnStats>,
    builder: auto::Builder<TokioExecutor>,
    app: axum::Router,
    shutdown: CancellationToken,
}

impl ConnTask {
    async fn run<IO>(self, io: IO)
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let ConnTask {
            conn,
            epoch,
            limits,
            stats,
            builder,
            app,
            shutdown,
        } = self;
        let tracked = Tracked {
            io,
            conn: conn.clone(),
            epoch,
        };
        let for_requests = conn.clone();
        let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
            let in_flight = InFlight::enter(for_requests.clone(), epoch);
            let app = app.clone();
            async move {
                let response = app
                    .oneshot(request.map(Body::new))
                    .await
                    .unwrap_or_else(|never: Infallible| match never {});
                Ok::<_, Infallible>(response.map(|body| Counted {
                    body,
                    _in_flight: in_flight,
                }))
            }
        });
        let served = builder.serve_connection(TokioIo::new(tracked), service);
        tokio::pin!(served);
        let watch = watchdog(&conn, limits, epoch);
        tokio::pin!(watch);
        let mut draining = false;
        loop {
            tokio::select! {
                ended = served.as_mut() => {
                    if let Err(e) = ended {
                        tracing::trace!(error = %e, "connection ended with an error");
                    }
                    return;
                }
                why = &mut watch => {
                    match why {
                        Expired::Header => stats.header_timeouts.fetch_add(1, Ordering::Relaxed),
                        Expired::Idle => stats.idle_timeouts.fetch_add(1, Ordering::Relaxed),
                    };
                    return;
                }
                () = conn.close.cancelled() => return,
                () = shutdown.cancelled(), if !draining => {
                    draining = true;
                    served.as_mut().graceful_shutdown();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    async fn start(
        limits: ConnLimits,
    ) -> (std::net::SocketAddr, Arc<ConnStats>, CancellationToken) {
        let app = axum::Router::new().route("/", axum::routing::get(|| async { "ok" }));
        start_with(limits, app).await
    }

    async fn start_with(
        limits: ConnLimits,
        app: axum::Router,
    ) -> (std::net::SocketAddr, Arc<ConnStats>, CancellationToken) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stats = Arc::new(ConnStats::default());
        let stop = CancellationToken::new();
        tokio::spawn(serve(
            listener,
            app,
            Serving::default(),
            limits,
            stats.clone(),
            stop.clone(),
        ));
        (addr, stats, stop)
    }

    async fn get(addr: std::net::SocketAddr) -> String {
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        tcp.write_all(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = String::new();
        tcp.read_to_string(&mut answer).await.unwrap();
        answer
    }

    #[tokio::test]
    async fn at_the_cap_a_half_sent_head_makes_room_for_a_new_client() {
        let limits = ConnLimits {
            max_connections: 8,
            header_timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(60),
        };
        let (addr, stats, _stop) = start(limits).await;
        let mut slow = Vec::new();
        for _ in 0..32 {
            let mut tcp = TcpStream::connect(addr).await.unwrap();
            tcp.write_all(b"GET / HTTP/1.1\r\nhost:").await.unwrap();
            slow.push(tcp);
        }
        let answer = tokio::time::timeout(Duration::from_secs(5), get(addr))
            .await
            .unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(stats.open.load(Ordering::Relaxed) <= 8);
        assert!(stats.evicted.load(Ordering::Relaxed) >= 24);
    }

    #[tokio::test]
    async fn a_head_not_finished_in_time_is_closed_and_an_idle_connection_too() {
        let limits = ConnLimits {
            max_connections: 64,
            header_timeout: Duration::from_millis(300),
            idle_timeout: Duration::from_millis(600),
        };
        let (addr, stats, _stop) = start(limits).await;
        let mut slow = TcpStream::connect(addr).await.unwrap();
        slow.write_all(b"GET / HTTP/1.1\r\nhost:").await.unwrap();
        let mut rest = Vec::new();
        // The server closes it: the read ends (with nothing) well before 5 s.
        let _ = tokio::time::timeout(Duration::from_secs(5), slow.read_to_end(&mut rest))
            .await
            .expect("the server closed the half-sent head");
        assert!(rest.is_empty());
        assert_eq!(stats.header_timeouts.load(Ordering::Relaxed), 1);
        // A keep-alive connection that served one request, then stays quiet.
        let mut idle = TcpStream::connect(addr).await.unwrap();
        idle.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let started = Instant::now();
        let mut all = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), idle.read_to_end(&mut all))
            .await
            .unwrap()
            .unwrap();
        assert!(String::from_utf8_lossy(&all).starts_with("HTTP/1.1 200"));
        assert!(started.elapsed() >= Duration::from_millis(500));
        assert_eq!(stats.idle_timeouts.load(Ordering::Relaxed), 1);
        assert_eq!(stats.open.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn a_request_in_flight_is_never_timed_out_and_busy_connections_are_not_evicted() {
        let app = axum::Router::new().route(
            "/slow",
            axum::routing::get(|| async {
                tokio::time::sleep(Duration::from_millis(800)).await;
                "done"
            }),
        );
        let limits = ConnLimits {
            max_connections: 1,
            header_timeout: Duration::from_millis(200),
            idle_timeout: Duration::from_millis(200),
        };
        let (addr, stats, stop) = start_with(limits, app).await;
        let mut busy = TcpStream::connect(addr).await.unwrap();
        busy.write_all(b"GET /slow HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        // The cap is 1 and the one connection is busy: a newcomer is closed at once.
        let mut other = TcpStream::connect(addr).await.unwrap();
        let mut nothing = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(2), other.read_to_end(&mut nothing))
            .await
            .unwrap();
        assert_eq!(stats.refused.load(Ordering::Relaxed), 1);
        let mut answer = String::new();
        busy.read_to_string(&mut answer).await.unwrap();
        assert!(answer.ends_with("done"), "{answer}");
        assert_eq!(stats.header_timeouts.load(Ordering::Relaxed), 0);
        stop.cancel();
    }

    #[test]
    fn caps_fit_under_the_descriptor_limit() {
        assert_eq!(ConnLimits::api_default(20_000).max_connections, 4_096);
        assert_eq!(ConnLimits::api_default(1_024).max_connections, 576);
        assert_eq!(ConnLimits::peer_default(1_024).max_connections, 192);
        assert_eq!(ConnLimits::peer_default(100).max_connections, 16);
    }
}
