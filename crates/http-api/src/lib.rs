//! The public /v1 HTTP/JSON API: forwarding, SSE watches, metrics. Built by a later issue.
