"""Rules of the baton contract that JSON Schema cannot state, for `.ci/fuzz`.

The OpenAPI document states every limit a single field has. Three rules relate fields to
each other, so a generated body can satisfy its schema and still break them (the server
answers 400, as it must): a semaphore acquire's `permits` must not exceed its `limit`, a
txn holds at most `txn_ops_max` compares and operations in all, and a new member's `api`
and `peer` addresses differ. Bodies that break
them are not "schema-valid requests the server must accept", so they are not sent.
"""

import os

import schemathesis

TXN_OPS_MAX = int(os.environ.get("BATON_TXN_OPS_MAX", "128"))


def _count(value):
    # A whole number written with a fraction (867.0) is an integer to JSON Schema and to
    # the server alike.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _within_rules(path, body):
    """False if `body`, sent to `path`, breaks one of the cross-field rules."""
    if not isinstance(body, dict):
        return True
    if path == "/v1/semaphores/{name}/acquire":
        limit = _count(body.get("limit"))
        permits = _count(body.get("permits", 1))
        if limit is not None and permits is not None and permits > limit:
            return False
    if path == "/v1/cluster/members" and body.get("api") == body.get("peer"):
        return False
    if path == "/v1/txn":
        lists = [body.get(k) for k in ("compare", "success", "failure")]
        if sum(len(v) for v in lists if isinstance(v, list)) > TXN_OPS_MAX:
            return False
    return True


@schemathesis.hook
def filter_body(context, body):
    operation = getattr(context, "operation", None)
    return operation is None or _within_rules(operation.path, body)


@schemathesis.hook
def filter_failure(context, failure, case, response):
    # The coverage phase builds bodies without the filter above. A request that breaks one
    # of the rules is outside the contract, so its 400 is not "a schema-valid request
    # refused"; every other failure stays.
    if getattr(failure, "code", None) == "ST202" and response.status_code == 400:
        return _within_rules(case.operation.path, case.body)
    return True
