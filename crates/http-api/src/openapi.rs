//! The OpenAPI 3.1 document, generated from the handlers' `#[utoipa::path]` attributes and
//! the wire types' `ToSchema`/`IntoParams` derives, then completed at serve time with the
//! limits the running node enforces ([`document`]): the numbers are configurable per
//! cluster, so the document states this server's, never a copy of the defaults.
//!
//! The error responses every operation shares are the `IntoResponses` types below; each
//! handler lists the ones it can return next to its own statuses.

use crate::routes::*;
use baton_state_machine::Limits as NodeLimits;
use baton_wire::*;
use serde_json::{Map, Value, json};
use utoipa::{IntoResponses, OpenApi};

/// The `Idempotency-Key` header of mutations: 1..=`idempotency_key_bytes_max` bytes of
/// visible ASCII (the length is filled in from the limits).
pub(crate) const IDEMPOTENCY_KEY: &str = "Idempotency-Key";

/// 400 `bad_request`.
#[derive(IntoResponses)]
#[response(
    status = 400,
    description = "`bad_request`: malformed JSON, a wrong type, an unknown field or query \
                   parameter, a value out of its limits, a bad name or Idempotency-Key"
)]
#[allow(dead_code)] // a shape for the document; the handlers answer through `ApiError`
pub(crate) struct BadRequest(ErrorBody);

/// 401 and 403 of admin calls.
#[derive(IntoResponses)]
#[allow(dead_code)] // a shape for the document
pub(crate) enum AdminRefused {
    /// `unauthenticated`: authentication is on and no valid token was presented.
    #[response(status = 401)]
    Unauthenticated(ErrorBody),
    /// `permission_denied`: the token's principal is not an admin.
    #[response(status = 403)]
    PermissionDenied(ErrorBody),
}

/// 404 `lease_not_found`.
#[derive(IntoResponses)]
#[response(
    status = 404,
    description = "`lease_not_found`: the lease named in the request does not exist (or expired)"
)]
#[allow(dead_code)] // a shape for the document
pub(crate) struct LeaseNotFound(ErrorBody);

/// 409 of a release by someone who does not hold the grant.
#[derive(IntoResponses)]
#[response(
    status = 409,
    description = "`not_holder`: the caller does not hold this grant (`fence`: the current one, or null), or `not_waiting`"
)]
#[allow(dead_code)] // a shape for the document
pub(crate) struct NotHolder(ErrorBody);

/// 409 of a queue acquire (locks and elections).
#[derive(IntoResponses)]
#[response(
    status = 409,
    description = "`lock_held` (busy and `wait_ms` is 0; `holders`, `queue_len`, `lock_delay`), `timeout` (no grant within `wait_ms`), or `not_waiting` (the queue entry was cancelled elsewhere, or the place named by `enqueued` is gone)"
)]
#[allow(dead_code)] // a shape for the document
pub(crate) struct QueueConflict(ErrorBody);

/// 202: a held-open acquire still queued at the server's hold limit.
#[derive(IntoResponses)]
#[response(
    status = 202,
    description = "Still queued when the request reached `hold_ms_max` (see `/v1/cluster` \
                   `limits`): the place is kept; send the request again with `enqueued` to \
                   go on waiting in it"
)]
#[allow(dead_code)] // a shape for the document
pub(crate) struct StillWaiting(WaitingResponse);

/// 413 `payload_too_large`.
#[derive(IntoResponses)]
#[response(
    status = 413,
    description = "`payload_too_large`: the body is over `body_bytes_max` or a value over \
                   `value_bytes_max` (see `/v1/cluster` `limits`)"
)]
#[allow(dead_code)] // a shape for the document
pub(crate) struct TooLarge(ErrorBody);

/// 422 `idempotency_key_reused`.
#[derive(IntoResponses)]
#[response(
    status = 422,
    description = "`idempotency_key_reused`: this Idempotency-Key was used (in the scope of \
                   the lease the request names) for a different request"
)]
#[allow(dead_code)] // a shape for the document
pub(crate) struct KeyReused(ErrorBody);

/// 429 `rate_limited`.
#[derive(IntoResponses)]
#[response(
    status = 429,
    description = "`rate_limited`: the resource's queue is at its bound (`queue_len_max`)"
)]
#[allow(dead_code)] // a shape for the document
pub(crate) struct QueueFull(ErrorBody);

/// 500 `internal`.
#[derive(IntoResponses)]
#[response(
    status = 500,
    description = "`internal`: an inconsistency inside the server (a bug), logged under the \
                   response's `x-request-id`; never caused by what a client sent"
)]
#[allow(dead_code)] // a shape for the document
pub(crate) struct Internal(ErrorBody);

/// 503 `no_leader` or `unavailable`, with `Retry-After`.
#[derive(IntoResponses)]
#[response(
    status = 503,
    description = "`no_leader` (no leader known) or `unavailable` (the node is stopping, or a \
                   quorum did not answer): nothing happened; retry after `Retry-After`",
    headers(("Retry-After" = u64, description = "Seconds to wait before retrying"))
)]
#[allow(dead_code)] // a shape for the document
pub(crate) struct Unavailable(ErrorBody);

/// 504 `indeterminate`.
#[derive(IntoResponses)]
#[response(
    status = 504,
    description = "`indeterminate`: the request reached the leader and was not confirmed in \
                   time; a write **may** have happened (retry with the same Idempotency-Key)"
)]
#[allow(dead_code)] // a shape for the document
pub(crate) struct Indeterminate(ErrorBody);

#[derive(OpenApi)]
#[openapi(
    info(
        title = "baton",
        description = "A CP lock server: fair, fenced, lease-bound locks over HTTP/JSON. \
                       Every error is an `ErrorBody`; the numbers in this document's \
                       constraints are the limits the serving node enforces."
    ),
    paths(
        leases::grant,
        leases::keepalive,
        leases::get,
        leases::list,
        leases::revoke,
        locks::acquire,
        locks::release,
        locks::check,
        locks::get,
        locks::list,
        locks::force_release,
        semaphores::list,
        elections::list,
        stats::locks,
        cluster::replication,
        semaphores::acquire,
        semaphores::release,
        semaphores::get,
        elections::campaign,
        elections::proclaim,
        elections::resign,
        elections::get,
        kv::put,
        kv::create_sequential,
        kv::get,
        kv::range,
        kv::delete,
        kv::delete_prefix,
        txn::txn,
        watch::watch,
        cluster::status,
        cluster::add_member,
        cluster::remove_member,
        health::healthz,
        health::readyz,
        health::metrics,
        health::openapi,
        crate::console::page,
    ),
    components(schemas(
        Mode,
        LeaseGrantRequest,
        LeaseResponse,
        KeepaliveResponse,
        Claim,
        LeaseInfoResponse,
        LeaseSummary,
        LeaseListResponse,
        RevokeResponse,
        AcquireRequest,
        ReleaseRequest,
        CheckRequest,
        SemaphoreAcquireRequest,
        CampaignRequest,
        ProclaimRequest,
        ResignRequest,
        GrantResponse,
        WaitingResponse,
        ReleaseResponse,
        CheckResponse,
        Holder,
        Waiter,
        LockDelay,
        LockStateResponse,
        LockSummary,
        LockListResponse,
        SemaphoreSummary,
        SemaphoreListResponse,
        ElectionSummary,
        ElectionListResponse,
        Age,
        LockStats,
        LockStatsResponse,
        MemberReplication,
        ReplicationResponse,
        ForceReleaseResponse,
        Leader,
        ElectionResponse,
        PutRequest,
        SequentialRequest,
        KeyValue,
        KeyResponse,
        PutResponse,
        RangeResponse,
        DeleteResponse,
        CompareTarget,
        CompareOp,
        CompareValue,
        Compare,
        TxnOp,
        TxnResult,
        TxnRequest,
        TxnResponse,
        AddMemberRequest,
        HoldMode,
        ResourceKind,
        ProclaimResponse,
        MemberRole,
        Member,
        Limits,
        ClusterStatus,
        Security,
        HealthResponse,
        ReadyResponse,
        Consistency,
        ErrorCode,
        ErrorDetail,
        ErrorObject,
        ErrorBody,
    ))
)]
struct ApiDoc;

/// The document as the derives make it, without the numbers of the limits.
pub(crate) fn skeleton() -> Value {
    serde_json::to_value(ApiDoc::openapi()).unwrap_or_else(|e| {
        tracing::error!(error = %e, "the OpenAPI document does not serialise");
        json!({})
    })
}

/// The document of a node enforcing `limits` and refusing bodies over `body_bytes_max`;
/// with `auth`, every operation but the open ones requires the bearer token.
pub fn document(limits: &NodeLimits, body_bytes_max: usize, auth: bool) -> Value {
    let mut doc = skeleton();
    fill_patterns(&mut doc);
    fill_limits(&mut doc, limits, body_bytes_max);
    tighten_compare(&mut doc, limits);
    close_txn_ops(&mut doc);
    bound_unsigned(&mut doc);
    add_auth_responses(&mut doc);
    add_edge_responses(&mut doc);
    describe_watch_events(&mut doc);
    if auth {
        require_token(&mut doc);
    }
    doc
}

/// Replaces each pattern placeholder of the attributes (`{name}`, `{text}`, …) by the
/// pattern it stands for (`baton_wire::names`), wherever it sits.
fn fill_patterns(node: &mut Value) {
    match node {
        Value::Object(object) => {
            for (key, value) in object.iter_mut() {
                match value {
                    Value::String(text) if key == "pattern" => {
                        if let Some(pattern) = baton_wire::names::pattern(text) {
                            *text = pattern;
                        }
                    }
                    _ => fill_patterns(value),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(fill_patterns),
        _ => {}
    }
}

/// Declares the bearer token as required everywhere but on the open paths.
fn require_token(doc: &mut Value) {
    if let Value::Object(root) = doc {
        root.insert("security".into(), json!([{"bearer": []}]));
    }
    if let Some(Value::Object(paths)) = doc.get_mut("paths") {
        for (path, item) in paths.iter_mut() {
            if !crate::auth::is_open_path(path) {
                continue;
            }
            if let Value::Object(operations) = item {
                for operation in operations.values_mut() {
                    if let Value::Object(op) = operation {
                        op.insert("security".into(), json!([]));
                    }
                }
            }
        }
    }
}

/// Every `type` of a watch's events (`baton_wire::Event::type_name`), and the stream's
/// own `progress` and `error`.
pub(crate) fn watch_event_names() -> Vec<String> {
    let mut names: Vec<String> = ["key_put", "key_deleted", "election_leader"]
        .into_iter()
        .chain(["lease_granted", "lease_revoked", "lease_expired"])
        .chain(["progress", "error"])
        .map(str::to_owned)
        .collect();
    for kind in ["lock", "semaphore", "election"] {
        for change in [
            "queued",
            "granted",
            "count_changed",
            "released",
            "expired",
            "force_released",
            "cancelled",
            "timed_out",
            "delay_started",
            "delay_ended",
        ] {
            names.push(format!("{kind}_{change}"));
        }
    }
    names
}

/// The watch's 200 is a stream of events: each one (as a Server-Sent Events client parses
/// it: `event`, `id`, `data`) is described, so that a checker validates every event.
fn describe_watch_events(doc: &mut Value) {
    let event = json!({
        "type": "object",
        "description": "One Server-Sent Event: `event` is its type, `id` the revision (absent on `error`), `data` one line of JSON: a watch event (`{revision, type, ...}`), a `progress` (`{revision}`: everything up to it was delivered) or an `error` (an `ErrorBody`; it ends the stream)",
        "required": ["event", "data"],
        "properties": {
            "event": {"type": "string", "enum": watch_event_names()},
            "id": {"type": "string", "pattern": "^[0-9]+$"},
            "data": {"type": "string", "minLength": 2, "contentMediaType": "application/json"},
            "retry": {"type": "integer", "minimum": 0}
        }
    });
    if let Some(Value::Object(content)) =
        doc.pointer_mut("/paths/~1v1~1watch/get/responses/200/content/text~1event-stream")
    {
        content.insert("schema".into(), event);
    }
}

/// Every operation can answer 403 for a `Host` this node does not serve or another site's
/// `Origin` (`origin.rs`); every operation with a body answers 415 without
/// `Content-Type: application/json`.
fn add_edge_responses(doc: &mut Value) {
    let error = serde_json::json!({"$ref": "#/components/schemas/ErrorBody"});
    let forbidden = serde_json::json!({
        "description": "`permission_denied`: the `Host` is not a name this node serves, or the `Origin` is another site's (or, with `--auth`, no rule allows this)",
        "content": {"application/json": {"schema": error.clone()}}
    });
    let media = serde_json::json!({
        "description": "`unsupported_media_type`: the body was not sent with `Content-Type: application/json`",
        "content": {"application/json": {"schema": error}}
    });
    let Some(Value::Object(paths)) = doc.get_mut("paths") else {
        return;
    };
    for item in paths.values_mut() {
        let Value::Object(operations) = item else {
            continue;
        };
        for operation in operations.values_mut() {
            let has_body = operation.get("requestBody").is_some();
            if let Some(Value::Object(responses)) = operation.get_mut("responses") {
                responses
                    .entry("403".to_owned())
                    .or_insert_with(|| forbidden.clone());
                if has_body {
                    responses
                        .entry("415".to_owned())
                        .or_insert_with(|| media.clone());
                }
            }
        }
    }
}

/// With `--auth`, every `/v1` operation (and `/metrics`) can answer 401
/// `unauthenticated`, 403 `permission_denied` and 429 (`rate_limited`, `quota_exceeded`);
/// the bearer scheme is declared for clients to use.
fn add_auth_responses(doc: &mut Value) {
    let error = serde_json::json!({"$ref": "#/components/schemas/ErrorBody"});
    let response = |description: &str| {
        serde_json::json!({
            "description": description,
            "content": {"application/json": {"schema": error.clone()}}
        })
    };
    let added = [
        (
            "401",
            response(
                "`unauthenticated`: the server runs with `--auth` and no valid bearer token was sent",
            ),
        ),
        (
            "403",
            response(
                "`permission_denied`: no rule of the principal allows this, or the lease belongs to another principal",
            ),
        ),
        (
            "429",
            response(
                "`rate_limited` (the principal's request rate; `Retry-After`) or `quota_exceeded` (`resource`, `limit`)",
            ),
        ),
    ];
    if let Some(Value::Object(paths)) = doc.get_mut("paths") {
        for (path, item) in paths.iter_mut() {
            if !(path.starts_with("/v1/") || path == baton_wire::paths::METRICS) {
                continue;
            }
            let Value::Object(operations) = item else {
                continue;
            };
            for operation in operations.values_mut() {
                if let Some(Value::Object(responses)) = operation.get_mut("responses") {
                    for (status, body) in &added {
                        responses
                            .entry(status.to_string())
                            .or_insert_with(|| body.clone());
                    }
                }
            }
        }
    }
    if let Some(Value::Object(components)) = doc.get_mut("components") {
        components.insert(
            "securitySchemes".into(),
            serde_json::json!({"bearer": {"type": "http", "scheme": "bearer", "description": "A principal's token (`baton serve --auth FILE`, docs/security.md)"}}),
        );
    }
}

/// Sets `keyword` to `value` on the property `property` of every object schema inside the
/// component schema `schema` (variants of a tagged enum included). Returns how many it set.
fn set_property(
    doc: &mut Value,
    schema: &str,
    property: &str,
    keyword: &str,
    value: &Value,
) -> usize {
    let Some(root) = doc.pointer_mut(&format!("/components/schemas/{schema}")) else {
        return 0;
    };
    set_in(root, property, keyword, value)
}

fn set_in(node: &mut Value, property: &str, keyword: &str, value: &Value) -> usize {
    let mut set = 0;
    match node {
        Value::Object(map) => {
            if let Some(Value::Object(p)) = map
                .get_mut("properties")
                .and_then(|ps| ps.get_mut(property))
            {
                p.insert(keyword.to_owned(), value.clone());
                set += 1;
            }
            for (k, v) in map.iter_mut() {
                if k != "properties" {
                    set += set_in(v, property, keyword, value);
                }
            }
        }
        Value::Array(items) => {
            for v in items {
                set += set_in(v, property, keyword, value);
            }
        }
        _ => {}
    }
    set
}

/// Sets `keyword` on the schema of every parameter named `name` (in `location`) of every
/// operation. Returns how many it set.
fn set_parameter(
    doc: &mut Value,
    location: &str,
    name: &str,
    keyword: &str,
    value: &Value,
) -> usize {
    let mut set = 0;
    let Some(Value::Object(paths)) = doc.get_mut("paths") else {
        return 0;
    };
    for item in paths.values_mut() {
        let Value::Object(item) = item else { continue };
        for operation in item.values_mut() {
            let Some(Value::Array(params)) = operation.get_mut("parameters") else {
                continue;
            };
            for p in params {
                if p["in"] == location
                    && p["name"] == name
                    && let Some(Value::Object(schema)) = p.get_mut("schema")
                {
                    schema.insert(keyword.to_owned(), value.clone());
                    set += 1;
                }
            }
        }
    }
    set
}

/// Where each limit appears: (component schema, property, keyword, value).
fn property_limits(limits: &NodeLimits) -> Vec<(&'static str, &'static str, &'static str, Value)> {
    let name = json!(limits.name_bytes_max);
    let owner = json!(limits.owner_bytes_max);
    let value = json!(limits.value_bytes_max);
    let wait = json!(limits.wait_ms_max);
    let ops = json!(limits.txn_ops_max);
    let range = json!(limits.range_limit_max);
    vec![
        (
            "LeaseGrantRequest",
            "ttl_ms",
            "minimum",
            json!(limits.ttl_ms_min),
        ),
        (
            "LeaseGrantRequest",
            "ttl_ms",
            "maximum",
            json!(limits.ttl_ms_max),
        ),
        ("AcquireRequest", "owner", "maxLength", owner.clone()),
        ("AcquireRequest", "wait_ms", "maximum", wait.clone()),
        (
            "AcquireRequest",
            "lock_delay_ms",
            "maximum",
            json!(limits.lock_delay_ms_max),
        ),
        ("ReleaseRequest", "owner", "maxLength", owner.clone()),
        ("SemaphoreAcquireRequest", "owner", "maxLength", owner),
        (
            "SemaphoreAcquireRequest",
            "wait_ms",
            "maximum",
            wait.clone(),
        ),
        (
            "SemaphoreAcquireRequest",
            "limit",
            "maximum",
            json!(limits.semaphore_limit_max),
        ),
        (
            "SemaphoreAcquireRequest",
            "permits",
            "maximum",
            json!(limits.semaphore_limit_max),
        ),
        ("CampaignRequest", "value", "maxLength", value.clone()),
        ("CampaignRequest", "wait_ms", "maximum", wait),
        ("ProclaimRequest", "value", "maxLength", value.clone()),
        ("PutRequest", "value", "maxLength", value.clone()),
        ("SequentialRequest", "value", "maxLength", value.clone()),
        ("Compare", "key", "maxLength", name.clone()),
        ("TxnOp", "key", "maxLength", name.clone()),
        ("TxnOp", "value", "maxLength", value),
        ("TxnOp", "prefix", "maxLength", name),
        ("TxnOp", "limit", "maximum", range),
        ("TxnRequest", "compare", "maxItems", ops.clone()),
        ("TxnRequest", "success", "maxItems", ops.clone()),
        ("TxnRequest", "failure", "maxItems", ops),
    ]
}

/// Where each limit appears among the parameters: (in, name, keyword, value).
fn parameter_limits(limits: &NodeLimits) -> Vec<(&'static str, &'static str, &'static str, Value)> {
    let name = json!(limits.name_bytes_max);
    let mut rules = vec![
        (
            "header",
            IDEMPOTENCY_KEY,
            "maxLength",
            json!(limits.idempotency_key_bytes_max),
        ),
        ("query", "limit", "maximum", json!(limits.range_limit_max)),
    ];
    for (location, param) in [
        ("path", "name"),
        ("path", "key"),
        ("query", "prefix"),
        ("query", "key"),
        ("query", "lock"),
        ("query", "semaphore"),
        ("query", "election"),
    ] {
        rules.push((location, param, "maxLength", name.clone()));
    }
    rules
}

fn fill_limits(doc: &mut Value, limits: &NodeLimits, body_bytes_max: usize) {
    for (schema, property, keyword, value) in property_limits(limits) {
        let set = set_property(doc, schema, property, keyword, &value);
        debug_assert!(set > 0, "no {schema}.{property} in the document");
    }
    for (location, name, keyword, value) in parameter_limits(limits) {
        let set = set_parameter(doc, location, name, keyword, &value);
        debug_assert!(set > 0, "no {location} parameter {name} in the document");
    }
    // The listings clamp their limit instead of refusing it: any unsigned number is fine.
    for listing in [
        "/paths/~1v1~1locks/get/parameters",
        "/paths/~1v1~1semaphores/get/parameters",
        "/paths/~1v1~1elections/get/parameters",
        "/paths/~1v1~1leases/get/parameters",
        "/paths/~1v1~1stats~1locks/get/parameters",
    ] {
        let Some(params) = doc.pointer_mut(listing) else {
            continue;
        };
        for p in params.as_array_mut().into_iter().flatten() {
            if p["name"] == "limit"
                && let Some(Value::Object(s)) = p.get_mut("schema")
            {
                s.remove("maximum");
            }
        }
    }
    if let Some(Value::Object(info)) = doc.get_mut("info") {
        info.insert("x-body-bytes-max".into(), json!(body_bytes_max));
        info.insert(
            "x-limits".into(),
            json!(crate::convert::limits(limits, body_bytes_max)),
        );
    }
}

/// A compare's operand is a string for `value` and a number for every other target: the
/// derive cannot say so, so the component is restated as the two shapes it accepts.
fn tighten_compare(doc: &mut Value, limits: &NodeLimits) {
    let Some(compare) = doc.pointer_mut("/components/schemas/Compare") else {
        return;
    };
    let Some(Value::Object(props)) = compare.get("properties").cloned() else {
        return;
    };
    let ops = json!({"type": "string", "enum": ["equal", "not_equal", "greater", "less",
        "=", "==", "!=", ">", "<"], "description": "How to compare (symbols accepted)"});
    let shape = |target: Value, value: Value| {
        let mut p: Map<String, Value> = props.clone();
        p.insert("target".into(), target);
        p.insert("op".into(), ops.clone());
        p.insert("value".into(), value);
        json!({
            "type": "object",
            "required": ["key", "target", "op", "value"],
            "properties": p,
            "additionalProperties": false,
        })
    };
    let text = shape(
        json!({"type": "string", "enum": ["value"]}),
        json!({"type": "string", "maxLength": limits.value_bytes_max}),
    );
    let number = shape(
        json!({"type": "string", "enum": ["version", "create_revision", "mod_revision", "lease"]}),
        json!({"type": "integer", "minimum": 0, "maximum": u64::MAX}),
    );
    let description = compare.get("description").cloned();
    *compare = json!({"oneOf": [text, number]});
    if let (Some(d), Value::Object(c)) = (description, compare) {
        c.insert("description".into(), d);
    }
}

/// Txn operations refuse unknown fields like every request, and an error body never
/// carries the client-side `unknown` code.
fn close_txn_ops(doc: &mut Value) {
    if let Some(Value::Array(variants)) = doc.pointer_mut("/components/schemas/TxnOp/oneOf") {
        for v in variants.iter_mut().filter_map(Value::as_object_mut) {
            v.insert("additionalProperties".into(), json!(false));
        }
    }
    if let Some(Value::Array(variants)) = doc.pointer_mut("/components/schemas/ErrorDetail/oneOf") {
        variants.retain(|v| v.pointer("/properties/code/enum/0") != Some(&json!("unknown")));
    }
}

/// Unsigned integers of the wire are `u64`/`u32`/`usize`: a bigger number is a 400, so
/// every unsigned integer schema without a maximum gets its type's.
fn bound_unsigned(node: &mut Value) {
    match node {
        Value::Object(map) => {
            let integer = match map.get("type") {
                Some(Value::String(t)) => t == "integer",
                Some(Value::Array(ts)) => ts.iter().any(|t| t == "integer"),
                _ => false,
            };
            let unsigned = map.get("minimum").and_then(Value::as_u64).is_some();
            if integer && unsigned && !map.contains_key("maximum") {
                let max = match map.get("format").and_then(Value::as_str) {
                    Some("int32" | "uint32") => json!(u32::MAX),
                    _ => {
                        // utoipa says `int64` for a u64; tools read that as signed and
                        // cap it at 2^63 - 1.
                        if map.get("format") == Some(&json!("int64")) {
                            map.insert("format".into(), json!("uint64"));
                        }
                        json!(u64::MAX)
                    }
                };
                map.insert("maximum".into(), max);
            }
            for v in map.values_mut() {
                bound_unsigned(v);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(bound_unsigned),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_limit_lands_somewhere_and_follows_the_configuration() {
        let mut doc = skeleton();
        let limits = NodeLimits::default();
        for (schema, property, keyword, value) in property_limits(&limits) {
            assert!(
                set_property(&mut doc, schema, property, keyword, &value) > 0,
                "{schema}.{property}"
            );
        }
        for (location, name, keyword, value) in parameter_limits(&limits) {
            assert!(
                set_parameter(&mut doc, location, name, keyword, &value) > 0,
                "{location} {name}"
            );
        }
        let limits = NodeLimits {
            wait_ms_max: 1_234,
            name_bytes_max: 77,
            ..NodeLimits::default()
        };
        let doc = document(&limits, 999, false);
        let wait = &doc["components"]["schemas"]["AcquireRequest"]["properties"]["wait_ms"];
        assert_eq!(wait["maximum"], 1_234);
        let params = &doc["paths"]["/v1/locks/{name}/acquire"]["post"]["parameters"];
        let name = params
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["name"] == "name")
            .expect("the name parameter");
        assert_eq!(name["schema"]["maxLength"], 77);
        assert_eq!(doc["info"]["x-body-bytes-max"], 999);
    }

    /// Every pattern of the document, with where it is.
    fn patterns(node: &Value, at: &str, out: &mut Vec<(String, String)>) {
        match node {
            Value::Object(object) => {
                for (key, value) in object {
                    match value {
                        Value::String(text) if key == "pattern" => {
                            out.push((at.to_owned(), text.clone()))
                        }
                        _ => patterns(value, &format!("{at}/{key}"), out),
                    }
                }
            }
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    patterns(item, &format!("{at}/{i}"), out);
                }
            }
            _ => {}
        }
    }

    #[test]
    fn every_pattern_placeholder_is_filled_from_the_one_list() {
        let doc = document(&NodeLimits::default(), 1_000, false);
        let mut found = Vec::new();
        patterns(&doc, "", &mut found);
        let name = baton_wire::names::pattern("{name}").expect("the name pattern");
        let mut names = 0;
        for (at, pattern) in &found {
            assert!(
                !pattern.starts_with('{'),
                "{at}: the placeholder {pattern} has no pattern"
            );
            names += usize::from(*pattern == name);
        }
        // Every path parameter called `name` or `key` carries the one name pattern.
        let mut parameters = 0;
        for (path, item) in doc["paths"].as_object().into_iter().flatten() {
            for (method, operation) in item.as_object().into_iter().flatten() {
                for p in operation["parameters"].as_array().into_iter().flatten() {
                    if p["in"] == "path" && (p["name"] == "name" || p["name"] == "key") {
                        parameters += 1;
                        assert_eq!(p["schema"]["pattern"], name.as_str(), "{method} {path}");
                    }
                }
            }
        }
        assert!(
            parameters >= 16 && names >= parameters,
            "{parameters} {names}"
        );
    }

    #[test]
    fn the_document_lists_exactly_the_paths_of_the_one_table() {
        let doc = skeleton();
        let documented: std::collections::BTreeSet<&str> = doc["paths"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(path, _)| path.as_str())
            .filter(|path| *path != "/")
            .collect();
        let table: std::collections::BTreeSet<&str> =
            baton_wire::paths::ALL.iter().copied().collect();
        assert_eq!(documented, table);
    }

    #[test]
    fn the_name_checks_refuse_exactly_the_hidden_characters_of_the_pattern() {
        let limits = NodeLimits::default();
        for c in (0..=0x10FFFFu32).filter_map(char::from_u32) {
            let owner = format!("a{c}b");
            assert_eq!(
                limits.check_owner(&owner).is_err(),
                baton_wire::names::is_hidden(c),
                "U+{:04X}",
                c as u32
            );
        }
    }
}
