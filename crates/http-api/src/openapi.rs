//! The OpenAPI document, generated from the handlers' `#[utoipa::path]` attributes and the
//! wire types' `ToSchema` derives.

use crate::routes::*;
use crate::wire::*;
use utoipa::OpenApi;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "baton",
        description = "A CP lock server: fair, fenced, lease-bound locks over HTTP/JSON."
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
    ),
    components(schemas(
        ModeDto,
        LeaseGrantRequest,
        LeaseResponse,
        KeepaliveResponse,
        ClaimDto,
        LeaseInfoResponse,
        LeaseSummaryDto,
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
        ReleaseResponse,
        CheckResponse,
        HolderDto,
        WaiterDto,
        LockDelayDto,
        LockStateResponse,
        LockSummaryDto,
        LockListResponse,
        ForceReleaseResponse,
        LeaderDto,
        ElectionResponse,
        PutRequest,
        SequentialRequest,
        KeyDto,
        KeyResponse,
        PutResponse,
        RangeResponse,
        DeleteResponse,
        CompareDto,
        TxnOpDto,
        TxnRequest,
        TxnResponse,
        AddMemberRequest,
    ))
)]
struct ApiDoc;

/// The document.
pub fn document() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}
