//! The web console: one page of plain HTML, CSS and JavaScript embedded in the binary (no
//! build step, no separate server). `GET /` and every `/ui/...` path answer the page (its
//! script routes by path); `/ui/assets/...` answer its script and style. The page holds no
//! secret of the server's: it calls the `/v1` API as any client does, with the token the
//! user types (kept in the tab's `sessionStorage`), and follows the event stream.

use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

const INDEX: &str = include_str!("../console/index.html");
const SCRIPT: &str = include_str!("../console/console.js");
const STYLE: &str = include_str!("../console/console.css");

/// Scripts and styles only from this origin; no inline script; no framing.
const POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

fn asset(body: &'static str, content_type: &'static str) -> Response {
    let mut response = (StatusCode::OK, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(POLICY),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}

/// The web console (the same page answers every `/ui/...` view path).
#[utoipa::path(get, path = "/", operation_id = "console_page",
    responses((status = 200, description = "The web console: an HTML page", content_type = "text/html", body = String)))]
pub(crate) async fn page() -> Response {
    asset(INDEX, "text/html; charset=utf-8")
}

/// `/ui/{*path}`: the script, the style, or the page for any view's path.
pub(crate) async fn ui(Path(path): Path<String>) -> Response {
    match path.as_str() {
        "assets/console.js" => asset(SCRIPT, "text/javascript; charset=utf-8"),
        "assets/console.css" => asset(STYLE, "text/css; charset=utf-8"),
        _ => asset(INDEX, "text/html; charset=utf-8"),
    }
}
