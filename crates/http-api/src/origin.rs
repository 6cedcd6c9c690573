//! The API is not a web page's API: a request whose `Host` is not a name this node serves
//! (DNS rebinding: a page on `evil.example` whose name now points at 127.0.0.1) or whose
//! `Origin` is another site than the node's own (a cross-site request from a browser) is
//! refused with 403 before anything else runs.
//!
//! - `Host` (or the HTTP/2 authority): an IP address, `localhost`, or a name this node was
//!   told it is reached by ([`crate::ApiConfig::hosts`]: its advertised API address, the
//!   members' API addresses, and `--api-host`). An IP address cannot be rebound, so any is
//!   accepted; a name must be known.
//! - `Origin`, when a browser sends one: the same scheme-less authority as the request's
//!   own `Host` (the console, served by this node, calls its own origin). `Origin: null`
//!   (a sandboxed page, a file) is refused.

use crate::error::error_response;
use crate::state::AppState;
use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::Response;
use baton_wire::ErrorDetail;

/// The host part of `host[:port]` (IPv6 in brackets kept whole), lowercased.
pub fn host_of(authority: &str) -> String {
    let authority = authority.trim();
    let host = if authority.starts_with('[') {
        authority
            .split_once(']')
            .map_or(authority, |(h, _)| h)
            .trim_start_matches('[')
    } else {
        authority
            .rsplit_once(':')
            .filter(|(_, port)| port.chars().all(|c| c.is_ascii_digit()))
            .map_or(authority, |(h, _)| h)
    };
    host.trim_end_matches('.').to_ascii_lowercase()
}

/// Whether `host` (from [`host_of`]) is one this node serves.
fn served(host: &str, known: &[String]) -> bool {
    host == "localhost"
        || host.parse::<std::net::IpAddr>().is_ok()
        || known.iter().any(|k| k == host)
}

/// Middleware: refuses a request from a host name this node does not serve, or from
/// another site's page.
pub(crate) async fn guard(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let authority = request
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| request.uri().authority().map(|a| a.as_str().to_owned()));
    let Some(authority) = authority else {
        return error_response(
            ErrorDetail::BadRequest,
            "the request names no host (a `Host` header is required)".into(),
        );
    };
    let host = host_of(&authority);
    if !served(&host, &state.config.hosts) {
        return error_response(
            ErrorDetail::PermissionDenied,
            format!(
                "this node is not served as {host:?}: add it with --api-host if it is a name of this node"
            ),
        );
    }
    if let Some(origin) = request.headers().get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("null");
        let own = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
            .is_some_and(|rest| rest.trim_end_matches('/').eq_ignore_ascii_case(&authority));
        if !own {
            return error_response(
                ErrorDetail::PermissionDenied,
                format!(
                    "requests from the web origin {origin:?} are refused: only this node's own console may call it from a browser"
                ),
            );
        }
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_part_of_an_authority() {
        assert_eq!(host_of("127.0.0.1:7070"), "127.0.0.1");
        assert_eq!(host_of("[::1]:7070"), "::1");
        assert_eq!(host_of("Baton-0.Baton.svc.:7070"), "baton-0.baton.svc");
        assert_eq!(host_of("localhost"), "localhost");
    }

    #[test]
    fn addresses_and_known_names_are_served_other_names_are_not() {
        let known = vec!["baton-0.baton.svc".to_owned()];
        for ok in [
            "127.0.0.1",
            "10.1.2.3",
            "::1",
            "localhost",
            "baton-0.baton.svc",
        ] {
            assert!(served(ok, &known), "{ok}");
        }
        for refused in [
            "evil.example",
            "127.0.0.1.nip.io",
            "localhost.evil.example",
            "",
        ] {
            assert!(!served(refused, &known), "{refused}");
        }
    }
}
