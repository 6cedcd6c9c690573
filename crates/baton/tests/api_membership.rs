//! Online membership change through the API: a fourth `baton serve --join` is added as a
//! learner, catches up and votes; then it is removed.

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
    // A follower refuses membership changes and names the leader.
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    let (status, err) = c.delete(follower, "/v1/cluster/members/4").await;
    assert_eq!(
        (status, err["error"]["code"].as_str()),
        (409, Some("membership_change_refused"))
    );
    let (status, body) = c.delete(leader, "/v1/cluster/members/4").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(voters(&body), 3);
    c.nodes.get_mut(&4).unwrap().kill();
    let (status, _) = c.put(leader, "/v1/kv/last", json!({"value": "x"})).await;
    assert_eq!(status, 200);
}
