//! `baton serve`: load the configuration, start the raft node and the HTTP API, and shut
//! both down cleanly on SIGINT or SIGTERM (held-open requests are answered first).

use anyhow::Context;
use baton_http_api::auth::Auth;
use baton_http_api::{ApiConfig, AppState};
use baton_raft_node::tls::ReloadableTls;
use baton_raft_node::{ClusterFile, Node, NodeConfig};
use clap::Args;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::net::TcpListener;

/// Options of `baton serve` (no `Debug`: they hold secrets).
#[derive(Args)]
#[command(
    after_help = "Examples:\n  baton serve\n  baton serve --config cluster.toml --node 2\n  baton serve --api 0.0.0.0:7070 --advertise-api 10.0.0.5:7070 --peer 10.0.0.5:7071 --data-dir /var/lib/baton"
)]
pub struct ServeArgs {
    /// A cluster file (see cluster.toml); requires --node.
    #[arg(long, requires = "node")]
    config: Option<PathBuf>,
    /// This node's id in the cluster file.
    #[arg(long)]
    node: Option<u64>,
    /// This node's id without a cluster file (default 1), e.g. for a node started with
    /// --join to be added to a running cluster.
    #[arg(long, conflicts_with = "config")]
    id: Option<u64>,
    /// Client API address to listen on (overrides the cluster file).
    #[arg(long)]
    api: Option<String>,
    /// Peer address to listen on (overrides the cluster file).
    #[arg(long)]
    peer: Option<String>,
    /// The API address clients and peers are told (default: --api). Needed when listening
    /// on 0.0.0.0.
    #[arg(long, value_name = "HOST:PORT")]
    advertise_api: Option<String>,
    /// The peer address the other members are told (default: --peer).
    #[arg(long, value_name = "HOST:PORT")]
    advertise_peer: Option<String>,
    /// Leader heartbeat interval in ms (overrides the cluster file's [raft]).
    #[arg(long)]
    heartbeat_ms: Option<u64>,
    /// Election timeout range in ms, `MIN-MAX` (overrides the cluster file's [raft]).
    #[arg(long, value_name = "MIN-MAX", value_parser = parse_range)]
    election_timeout_ms: Option<(u64, u64)>,
    /// Data directory (overrides the cluster file).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Shared secret peers must present (overrides the cluster file). On the command line
    /// it shows in `ps`: prefer --secret-file or BATON_CLUSTER_SECRET.
    #[arg(long, env = "BATON_CLUSTER_SECRET", hide_env_values = true)]
    secret: Option<String>,
    /// A file holding the shared secret peers must present (its first line; at least 16
    /// bytes).
    #[arg(
        long,
        env = "BATON_CLUSTER_SECRET_FILE",
        value_name = "FILE",
        conflicts_with = "secret"
    )]
    secret_file: Option<PathBuf>,
    /// Bearer token required for admin calls (force-release, membership changes) when
    /// --auth is not given. On the command line it shows in `ps`: prefer
    /// --admin-token-file or BATON_ADMIN_TOKEN.
    #[arg(
        long,
        env = "BATON_ADMIN_TOKEN",
        conflicts_with = "auth",
        hide_env_values = true
    )]
    admin_token: Option<String>,
    /// A file holding the admin token (its first line).
    #[arg(
        long,
        env = "BATON_ADMIN_TOKEN_FILE",
        value_name = "FILE",
        conflicts_with_all = ["auth", "admin_token"]
    )]
    admin_token_file: Option<PathBuf>,
    /// Most open connections on the client API port (default 4096, fitted under the
    /// process's descriptor limit). At the cap a new connection replaces the oldest one
    /// that has not sent a whole request.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    max_connections: Option<u32>,
    /// Most open connections on the peer port (default 1024, fitted likewise).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    peer_max_connections: Option<u32>,
    /// Time a connection has for its TLS handshake and each request head, on both ports
    /// (default 10000). Bodies (watches, held-open acquires) are not limited by it.
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(100..))]
    header_timeout_ms: Option<u64>,
    /// Time an API connection may stay open with no request in flight (default 120000).
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(100..))]
    idle_timeout_ms: Option<u64>,
    /// Another host name clients reach this node's API by (a load balancer's, a proxy's);
    /// repeatable. IP addresses, `localhost` and the members' advertised API names are
    /// always accepted; a request naming any other host is refused (DNS rebinding).
    #[arg(long = "api-host", value_name = "NAME")]
    api_hosts: Vec<String>,
    /// Time a peer connection may stay open with no request in flight (default 300000).
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(100..))]
    peer_idle_timeout_ms: Option<u64>,
    /// Principals, tokens (as SHA-256) and permissions (TOML; see docs/security.md). Every
    /// /v1 request then needs `Authorization: Bearer <token>`. Reloaded on SIGHUP.
    #[arg(long, env = "BATON_AUTH_FILE", value_name = "FILE")]
    auth: Option<PathBuf>,
    /// Serve /metrics without a token even with --auth (e.g. for a Prometheus scraper on
    /// a trusted network).
    #[arg(long)]
    metrics_open: bool,
    /// Log one `baton::access` line per request: principal, route, status, latency, id.
    #[arg(long)]
    access_log: bool,
    /// Allow listening beyond loopback without --auth (API) or a cluster secret (peers).
    /// Anyone who reaches the port can then take and break every lock.
    #[arg(long)]
    insecure_allow_open: bool,
    /// Runtime worker threads (default: one per core, or this node's share of them when
    /// the cluster file puts other members on loopback too; docs/operations.md).
    #[arg(long, env = "BATON_WORKER_THREADS", value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    worker_threads: Option<u16>,
    /// Serve the client API over TLS with this certificate chain (PEM); re-read on SIGHUP.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Mutual TLS between members: this node's peer certificate chain (PEM).
    #[arg(long, value_name = "FILE", requires_all = ["peer_tls_key", "peer_ca"])]
    peer_tls_cert: Option<PathBuf>,
    /// The key of --peer-tls-cert (PEM).
    #[arg(long, value_name = "FILE", requires_all = ["peer_tls_cert", "peer_ca"])]
    peer_tls_key: Option<PathBuf>,
    /// The CA bundle (PEM) that signs every member's peer certificate.
    #[arg(long, value_name = "FILE", requires_all = ["peer_tls_cert", "peer_tls_key"])]
    peer_ca: Option<PathBuf>,
    /// Wait to be added to an existing cluster instead of initialising one.
    #[arg(long)]
    join: bool,
    /// Revisions of events kept for watches (every member must use the same value; it
    /// applies when the state is created).
    #[arg(long, value_name = "REVISIONS")]
    event_window: Option<u64>,
    /// Most waiters in one lock, semaphore or election queue (every member must use the
    /// same value; it applies when the state is created).
    #[arg(long, value_name = "WAITERS")]
    queue_len_max: Option<usize>,
    /// MiB of the storage engine's page cache (sled's; the Raft log and the latest
    /// snapshot live there). Default 16.
    #[arg(long, value_name = "MIB", value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
    storage_cache_mib: Option<u64>,
}

fn node_config(args: &ServeArgs) -> anyhow::Result<NodeConfig> {
    let mut config = match (&args.config, args.node) {
        (Some(path), Some(id)) => {
            let file = ClusterFile::load(path)?;
            let base = path.parent().map(PathBuf::from).unwrap_or_default();
            file.node_config(id, &base)?
        }
        _ => {
            let mut config = NodeConfig::default_single();
            if let Some(id) = args.id {
                anyhow::ensure!(id > 0, "--id must be positive");
                config.id = id;
                config.members = [(id, config.addr.clone())].into();
            }
            config
        }
    };
    // Listen where asked; advertise what was given to advertise, else the listen address.
    let mut listen = config.listen_addr().clone();
    if let Some(api) = &args.api {
        listen.api.clone_from(api);
    }
    if let Some(peer) = &args.peer {
        listen.peer.clone_from(peer);
    }
    let given = |advertised: &Option<String>, listened: &Option<String>, current: &str| {
        advertised
            .clone()
            .or_else(|| listened.clone())
            .unwrap_or_else(|| current.to_owned())
    };
    let advertised = baton_raft_node::NodeAddr {
        api: given(&args.advertise_api, &args.api, &config.addr.api),
        peer: given(&args.advertise_peer, &args.peer, &config.addr.peer),
    };
    if advertised != config.addr {
        config.addr = advertised;
        config.members.insert(config.id, config.addr.clone());
    }
    config.listen = (listen != config.addr).then_some(listen);
    if let Some(ms) = args.heartbeat_ms {
        config.heartbeat_ms = ms;
    }
    if let Some((min, max)) = args.election_timeout_ms {
        config.election_timeout_min_ms = min;
        config.election_timeout_max_ms = max;
    }
    if let Some(dir) = &args.data_dir {
        config.data_dir.clone_from(dir);
    }
    if args.secret.is_some() {
        config.cluster_secret = args.secret.clone().map(baton_raft_node::Secret::new);
    }
    if let Some(path) = &args.secret_file {
        config.cluster_secret = Some(baton_raft_node::Secret::new(crate::cmd::first_line(
            path,
            "--secret-file",
        )?));
    }
    config.callers_required = args.auth.is_some();
    if config.callers_required
        && config.cluster_secret.is_none()
        && config.peer_tls.is_none()
        && config.members.len() == 1
        && !config.join_existing
    {
        // The one-command start with --auth: a single node protects its peer port with a
        // random secret of its own, kept in its data directory.
        config.cluster_secret = Some(generated_secret(&config.data_dir)?);
    }
    let descriptors = baton_raft_node::listener::descriptor_limit();
    config.peer_conn_limits = Some(conn_limits(
        baton_raft_node::listener::ConnLimits::peer_default(descriptors),
        args.peer_max_connections,
        args.header_timeout_ms,
        args.peer_idle_timeout_ms,
    ));
    if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
        config.api_tls = Some(baton_raft_node::tls::TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: None,
        });
    }
    if let (Some(cert), Some(key), Some(ca)) =
        (&args.peer_tls_cert, &args.peer_tls_key, &args.peer_ca)
    {
        config.peer_tls = Some(baton_raft_node::tls::PeerTls {
            cert: cert.clone(),
            key: key.clone(),
            ca: ca.clone(),
        });
    }
    config.join_existing = args.join;
    if let Some(revisions) = args.event_window {
        anyhow::ensure!(revisions > 0, "--event-window must be positive");
        config.bounds.event_window_revisions = revisions;
    }
    if let Some(waiters) = args.queue_len_max {
        anyhow::ensure!(waiters > 0, "--queue-len-max must be positive");
        config.bounds.queue_len_max = waiters;
    }
    if let Some(mib) = args.storage_cache_mib {
        config.sled_cache_bytes = mib << 20;
    }
    config.validate()?;
    Ok(config)
}

/// A port's connection bounds: its defaults, with what the flags override.
fn conn_limits(
    mut limits: baton_raft_node::listener::ConnLimits,
    max_connections: Option<u32>,
    header_timeout_ms: Option<u64>,
    idle_timeout_ms: Option<u64>,
) -> baton_raft_node::listener::ConnLimits {
    use std::time::Duration;
    if let Some(n) = max_connections {
        limits.max_connections = n as usize;
    }
    if let Some(ms) = header_timeout_ms {
        limits.header_timeout = Duration::from_millis(ms);
    }
    if let Some(ms) = idle_timeout_ms {
        limits.idle_timeout = Duration::from_millis(ms);
    }
    limits
}

/// The name of the secret a single node with `--auth` generates for its peer port.
pub const GENERATED_SECRET_FILE: &str = "cluster-secret";

/// The secret in `data_dir`'s [`GENERATED_SECRET_FILE`], made on first start: 32 random
/// bytes in hex, in a file only its owner may read (mode 0600).
fn generated_secret(data_dir: &std::path::Path) -> anyhow::Result<baton_raft_node::Secret> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = data_dir.join(GENERATED_SECRET_FILE);
    if path.exists() {
        return Ok(baton_raft_node::Secret::new(crate::cmd::first_line(
            &path,
            "the generated cluster secret",
        )?));
    }
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("create the data directory {}", data_dir.display()))?;
    let secret =
        uuid::Uuid::new_v4().simple().to_string() + &uuid::Uuid::new_v4().simple().to_string();
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("create {}", path.display()))?;
    file.write_all(secret.as_bytes())
        .and_then(|()| file.sync_all())
        .with_context(|| format!("write {}", path.display()))?;
    tracing::info!(
        file = %path.display(),
        "the peer port is protected by a secret generated for this node (give it to nodes you add with --secret-file)"
    );
    Ok(baton_raft_node::Secret::new(secret))
}

/// Warnings for secrets given inline on the command line, where `ps` shows them to every
/// user of the host.
fn inline_secret_warnings() -> Vec<String> {
    let mut warnings = Vec::new();
    for (flag, instead) in [
        ("--secret", "--secret-file or BATON_CLUSTER_SECRET"),
        ("--admin-token", "--admin-token-file or BATON_ADMIN_TOKEN"),
    ] {
        let given = std::env::args().any(|a| a == flag || a.starts_with(&format!("{flag}=")));
        if given {
            warnings.push(format!(
                "{flag} on the command line is visible to every user of this host (ps); use {instead}"
            ));
        }
    }
    warnings
}

/// Parses `MIN-MAX` (milliseconds).
fn parse_range(text: &str) -> Result<(u64, u64), String> {
    let (min, max) = text
        .split_once('-')
        .ok_or_else(|| format!("{text:?}: expected MIN-MAX, e.g. 500-1000"))?;
    let parse = |v: &str| v.trim().parse::<u64>().map_err(|e| format!("{v:?}: {e}"));
    let (min, max) = (parse(min)?, parse(max)?);
    if min > max {
        return Err(format!("{min} is above {max}"));
    }
    Ok((min, max))
}

/// Runs a node until SIGINT or SIGTERM.
pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    // Colour only for a terminal: a log written to a file or read by journald gets plain
    // text (and `NO_COLOR` turns colour off on a terminal too).
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let colour = std::io::stderr().is_terminal() && !no_color;
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(colour)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,openraft=warn,sled=warn".into()),
        )
        .init();
    let config = node_config(&args)?;
    let auth = match &args.auth {
        Some(path) => Some(Arc::new(Auth::load(path)?)),
        None => None,
    };
    let warnings = check_exposure(&config, auth.is_some(), args.insecure_allow_open)?;
    for warning in warnings.iter().chain(&inline_secret_warnings()) {
        tracing::warn!("{warning}");
    }
    let admin_token = match &args.admin_token_file {
        Some(path) => Some(crate::cmd::first_line(path, "--admin-token-file")?),
        None => args.admin_token.clone(),
    };
    let api_limits = conn_limits(
        baton_raft_node::listener::ConnLimits::api_default(
            baton_raft_node::listener::descriptor_limit(),
        ),
        args.max_connections,
        args.header_timeout_ms,
        args.idle_timeout_ms,
    );
    let mut hosts: Vec<String> = config
        .members
        .values()
        .map(|m| m.api.as_str())
        .chain(std::iter::once(config.addr.api.as_str()))
        .chain(args.api_hosts.iter().map(String::as_str))
        .map(baton_http_api::origin::host_of)
        .collect();
    hosts.sort();
    hosts.dedup();
    let api = ApiConfig {
        hosts,
        tls: config.api_tls.is_some(),
        admin_token: admin_token.map(baton_raft_node::Secret::new),
        access_log: args.access_log,
        metrics_open: args.metrics_open,
        warnings,
        ..ApiConfig::default()
    };
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = args.worker_threads {
        runtime.worker_threads(usize::from(n));
    } else if std::env::var_os("TOKIO_WORKER_THREADS").is_none() {
        // (TOKIO_WORKER_THREADS, when set, is read by tokio itself.)
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        if let Some(n) = shared_worker_threads(&config, cores) {
            tracing::info!(
                cores,
                worker_threads = n,
                "members of this cluster share this machine (loopback peer addresses): \
                 their cores are split between them (--worker-threads overrides)"
            );
            runtime.worker_threads(n);
        }
    }
    let runtime = runtime.enable_all().build().context("tokio runtime")?;
    runtime.block_on(serve(config, api, api_limits, auth))
}

/// The default worker threads of a node that shares `cores` with other members of its
/// cluster: `cores` divided among them (at least one each), or `None` (tokio's default,
/// one per core) for a node alone here. Members share this machine when their peer
/// addresses, and this node's, are loopback: such an address reaches nothing else
/// (decision #129).
fn shared_worker_threads(config: &NodeConfig, cores: usize) -> Option<usize> {
    if !is_loopback(&config.addr.peer) {
        return None;
    }
    let others = config
        .members
        .iter()
        .filter(|(id, addr)| **id != config.id && is_loopback(&addr.peer))
        .count();
    (others > 0).then(|| (cores / (others + 1)).max(1))
}

/// Whether `addr` (`host:port`) listens on loopback only.
fn is_loopback(addr: &str) -> bool {
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Refuses to listen beyond loopback without protection: the API needs --auth, the peer
/// port a cluster secret. `--insecure-allow-open` turns each refusal into a warning (the
/// returned list, also shown in `/v1/cluster`).
fn check_exposure(
    config: &NodeConfig,
    auth: bool,
    insecure_allow_open: bool,
) -> anyhow::Result<Vec<String>> {
    let listen = config.listen_addr();
    let mut problems = Vec::new();
    if !auth && !is_loopback(&listen.api) {
        problems.push(format!(
            "the API listens on {} (beyond loopback) without --auth: anyone who reaches it can take, release and break every lock",
            listen.api
        ));
    }
    if config.cluster_secret.is_none() && config.peer_tls.is_none() && !is_loopback(&listen.peer) {
        problems.push(format!(
            "the peer port listens on {} (beyond loopback) without mutual TLS (--peer-tls-cert, --peer-tls-key, --peer-ca) or a cluster secret (--secret, BATON_CLUSTER_SECRET or `secret` in the cluster file): anyone who reaches it can join the replication",
            listen.peer
        ));
    }
    if problems.is_empty() {
        return Ok(problems);
    }
    if !insecure_allow_open {
        anyhow::bail!(
            "{}; refusing to start (add the protection, listen on 127.0.0.1, or pass --insecure-allow-open)",
            problems.join("; ")
        );
    }
    Ok(problems
        .into_iter()
        .map(|p| format!("--insecure-allow-open: {p}"))
        .collect())
}

async fn serve(
    config: NodeConfig,
    api_config: ApiConfig,
    api_limits: baton_raft_node::listener::ConnLimits,
    auth: Option<Arc<Auth>>,
) -> anyhow::Result<()> {
    let listen_api = config.listen_addr().api.clone();
    let api_tls = match &config.api_tls {
        Some(files) => Some(ReloadableTls::load(files.clone()).context("API TLS")?),
        None => None,
    };
    let api = TcpListener::bind(&listen_api)
        .await
        .with_context(|| format!("bind the API on {listen_api}"))?;
    let api_addr = api.local_addr()?;
    let node = Node::start(config.clone()).await?;
    tracing::info!(
        id = config.id,
        api = %api_addr,
        peer = %node.peer_addr(),
        data = %config.data_dir.display(),
        "baton is serving"
    );
    let mut state = AppState::new(node.clone(), api_config);
    state.set_auth(auth.clone());
    tokio::spawn(reload_on_hangup(auth, api_tls.clone(), node.clone()));
    let serving = baton_raft_node::listener::Serving {
        tls: api_tls,
        check: None,
    };
    let served = baton_http_api::serve(api, serving, api_limits, state, shutdown_signal()).await;
    node.shutdown().await;
    served.context("API server")?;
    tracing::info!("baton stopped");
    Ok(())
}

/// On each SIGHUP re-reads the auth file and the certificates (API and peers); whatever
/// is broken is refused and what is in force is kept.
async fn reload_on_hangup(
    auth: Option<Arc<Auth>>,
    api_tls: Option<Arc<ReloadableTls>>,
    node: Node,
) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut hangup = match signal(SignalKind::hangup()) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "no SIGHUP handler: the auth file is not reloaded");
                return;
            }
        };
        while hangup.recv().await.is_some() {
            if let Some(auth) = &auth {
                match auth.reload() {
                    Ok(principals) => tracing::info!(principals, "auth file reloaded"),
                    Err(e) => {
                        tracing::error!(error = %e, "auth file refused; the rules in force are kept")
                    }
                }
            }
            if let Some(tls) = &api_tls {
                match tls.reload() {
                    Ok(()) => tracing::info!("API certificate reloaded"),
                    Err(e) => {
                        tracing::error!(error = %e, "API certificate refused; the one in force is kept")
                    }
                }
            }
            if let Err(e) = node.reload_tls() {
                tracing::error!(error = %e, "peer certificates refused; the ones in force are kept");
            }
        }
    }
    #[cfg(not(unix))]
    let _ = (auth, api_tls, node);
}

async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "no SIGTERM handler; only SIGINT stops the server");
                    let _ = interrupt.await;
                    return;
                }
            };
        tokio::select! {
            _ = interrupt => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = interrupt.await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_raft_node::NodeAddr;

    #[test]
    fn loopback_is_recognised_in_every_spelling() {
        for addr in [
            "127.0.0.1:7070",
            "127.9.9.9:1",
            "localhost:7070",
            "[::1]:7070",
        ] {
            assert!(is_loopback(addr), "{addr}");
        }
        for addr in [
            "0.0.0.0:7070",
            "10.0.0.5:7070",
            "[::]:7070",
            "example.com:7070",
        ] {
            assert!(!is_loopback(addr), "{addr}");
        }
    }

    fn cluster(hosts: &[&str]) -> NodeConfig {
        let addr = |i: usize| NodeAddr {
            peer: format!("{}:{}", hosts[i], 7100 + i),
            api: format!("{}:{}", hosts[i], 7000 + i),
        };
        let mut config = NodeConfig::single(1, addr(0), "data");
        config.members = (0..hosts.len()).map(|i| (i as u64 + 1, addr(i))).collect();
        config
    }

    #[test]
    fn members_on_loopback_split_the_cores_and_a_node_alone_keeps_them() {
        let three = cluster(&["127.0.0.1", "127.0.0.1", "localhost"]);
        assert_eq!(shared_worker_threads(&three, 2), Some(1));
        assert_eq!(shared_worker_threads(&three, 8), Some(2));
        assert_eq!(shared_worker_threads(&three, 1), Some(1));
        // Alone: a single node, or peers on other machines.
        assert_eq!(shared_worker_threads(&cluster(&["127.0.0.1"]), 8), None);
        let spread = cluster(&["10.0.0.1", "10.0.0.2", "10.0.0.3"]);
        assert_eq!(shared_worker_threads(&spread, 8), None);
        // Two of five on this machine (this node and one other): half the cores each.
        let mixed = cluster(&["127.0.0.1", "127.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5"]);
        assert_eq!(shared_worker_threads(&mixed, 8), Some(4));
    }
}
