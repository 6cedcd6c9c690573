//! Online membership change through the API: a fourth `baton serve --join` is added as a
//! learner, catches up and votes; then it is removed through a follower (forwarded). And
//! the changes that could cost the quorum are refused with the membership unchanged.

#![allow(clippy::unwrap_used)] // tests: a failure is reported by the panic

mod common;

use common::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_is_added_and_removed_through_the_api() {
    let mut c = Cluster::three().await;
    let leader = c.leader(1).await;
    for i in 0..20 {
        c.put(leader, &format!("/v1/kv/before/{i}"), json!({"value": "v"}))
            .await;
    }
    let api = format!("127.0.0.1:{}", free_port());
    let peer = format!("127.0.0.1:{}", free_port());
    let data = c.data_dir().join("node-4");
    let args = [
        "serve",
        "--id",
        "4",
        "--api",
        &api,
        "--peer",
        &peer,
        "--data-dir",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([data.display().to_string(), "--join".into()])
    .collect();
    c.add(4, api.clone(), args);
    let (status, body) = c
        .post(
            leader,
            "/v1/cluster/members",
            json!({"id": 4, "peer": peer, "api": api}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let voters = |body: &serde_json::Value| {
        body["members"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["voter"] == true)
            .count()
    };
    assert_eq!(voters(&body), 4, "{body}");
    // The new member serves reads and writes like any other.
    c.wait_ready().await;
    let (status, kv) = c.get(4, "/v1/kv/before/19").await.unwrap();
    assert_eq!((status, kv["value"].as_str()), (200, Some("v")));
    let (status, _) = c.put(4, "/v1/kv/after", json!({"value": "w"})).await;
    assert_eq!(status, 200);
    // Adding it again, or another node on its addresses, is refused.
    let (status, err) = c
        .post(
            leader,
            "/v1/cluster/members",
            json!({"id": 4, "peer": peer, "api": api}),
        )
        .await;
    assert_eq!(status, 409, "{err}");
    let (status, err) = c
        .post(
            leader,
            "/v1/cluster/members",
            json!({"id": 5, "peer": peer, "api": format!("127.0.0.1:{}", free_port())}),
        )
        .await;
    assert_eq!(status, 409, "{err}");
    // A follower takes the change and forwards it to the leader.
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    let (status, body) = c.delete(follower, "/v1/cluster/members/4").await;
    assert_eq!(status, 200, "{body}");
    let (_, body) = c.get(leader, "/v1/cluster").await.unwrap();
    assert_eq!(voters(&body), 3, "{body}");
    // The removed node is no longer ready.
    let ready = c.wait_unready(4, "a removed node still ready").await;
    assert_eq!(ready["ready"], false, "{ready}");
    c.nodes.get_mut(&4).unwrap().kill();
    let (status, _) = c.put(leader, "/v1/kv/last", json!({"value": "x"})).await;
    assert_eq!(status, 200);
}

/// The request a schema-driven fuzzer once sent to a single node, which made a voter of a
/// node that did not exist and cost the cluster its quorum for good; and its neighbours.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_that_cannot_serve_are_refused_and_the_cluster_keeps_serving() {
    let c = Cluster::single().await;
    let members = |status: serde_json::Value| -> Vec<(u64, String, String, bool)> {
        status["members"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                (
                    m["id"].as_u64().unwrap(),
                    m["api"].as_str().unwrap().to_owned(),
                    m["peer"].as_str().unwrap().to_owned(),
                    m["voter"].as_bool().unwrap(),
                )
            })
            .collect()
    };
    let before = members(c.get(1, "/v1/cluster").await.unwrap().1);
    let nobody = format!("127.0.0.1:{}", free_port());
    let own_api = c.node(1).api.clone();
    let cases = [
        // Random bytes for an address: not host:port.
        (
            json!({"id": 5, "api": own_api, "peer": "\u{1}\u{7f}\u{ff}garbage"}),
            400,
        ),
        (json!({"id": 5, "api": nobody, "peer": "no-port"}), 400),
        (json!({"id": 0, "api": nobody, "peer": nobody}), 400),
        // The API address of an existing member.
        (json!({"id": 5, "api": own_api, "peer": nobody}), 409),
        // A well-formed address where no process runs: refused at once, nothing proposed.
        (
            json!({"id": 5, "api": format!("127.0.0.1:{}", free_port()), "peer": nobody}),
            409,
        ),
    ];
    for (body, status) in cases {
        let (got, answer) = c.post(1, "/v1/cluster/members", body.clone()).await;
        assert_eq!(got, status, "{body} -> {answer}");
        let (_, now) = c.get(1, "/v1/cluster").await.unwrap();
        assert_eq!(members(now), before, "{body} changed the membership");
        let (status, _) = c
            .put(1, "/v1/kv/still-writable", json!({"value": "v"}))
            .await;
        assert_eq!(status, 200, "the cluster stopped serving after {body}");
    }
    // Removing the last voter is refused too.
    let (status, _) = c.delete(1, "/v1/cluster/members/1").await;
    assert_eq!(status, 409);
}
