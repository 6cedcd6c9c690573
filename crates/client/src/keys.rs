//! Keys: get, put, compare-and-set, delete, range, sequential create, txn.

use crate::client::{Call, Client, key_path, segment};
use crate::error::{Error, Result};
use reqwest::Method;
use serde_json::{Value, json};

/// A stored key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyValue {
    /// The key.
    pub key: String,
    /// Its value.
    pub value: String,
    /// The revision that created it.
    pub create_revision: u64,
    /// The revision of its last change.
    pub mod_revision: u64,
    /// Puts since creation.
    pub version: u64,
    /// Its lease, if ephemeral.
    pub lease_id: Option<u64>,
}

fn key_value(v: &Value) -> KeyValue {
    KeyValue {
        key: v["key"].as_str().unwrap_or_default().to_owned(),
        value: v["value"].as_str().unwrap_or_default().to_owned(),
        create_revision: v["create_revision"].as_u64().unwrap_or(0),
        mod_revision: v["mod_revision"].as_u64().unwrap_or(0),
        version: v["version"].as_u64().unwrap_or(0),
        lease_id: v["lease_id"].as_u64(),
    }
}

impl Client {
    /// A key, or `None`.
    pub async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        match self
            .call(
                Method::GET,
                &format!("/v1/kv/{}", key_path(key)),
                None,
                Call::READ,
            )
            .await
        {
            Ok(v) => Ok(Some(key_value(&v))),
            Err(Error::KeyNotFound) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Writes a key; returns the revision of the write.
    pub async fn put(&self, key: &str, value: &str) -> Result<u64> {
        self.put_with(key, value, None, None).await
    }

    /// Writes a key bound to `lease` (ephemeral), and/or only if its `mod_revision` is
    /// `prev_revision` (0: it must not exist; `Error::CasFailed` otherwise).
    pub async fn put_with(
        &self,
        key: &str,
        value: &str,
        lease: Option<u64>,
        prev_revision: Option<u64>,
    ) -> Result<u64> {
        let body = json!({"value": value, "lease_id": lease, "prev_revision": prev_revision});
        let v = self
            .call(
                Method::PUT,
                &format!("/v1/kv/{}", key_path(key)),
                Some(&body),
                Call::WRITE,
            )
            .await?;
        Ok(v["revision"].as_u64().unwrap_or(0))
    }

    /// Compare-and-set on `mod_revision`.
    pub async fn cas(&self, key: &str, value: &str, prev_revision: u64) -> Result<u64> {
        self.put_with(key, value, None, Some(prev_revision)).await
    }

    /// Deletes a key; `Error::KeyNotFound` if it did not exist.
    pub async fn delete(&self, key: &str) -> Result<u64> {
        let v = self
            .call(
                Method::DELETE,
                &format!("/v1/kv/{}", key_path(key)),
                None,
                Call::WRITE,
            )
            .await?;
        Ok(v["revision"].as_u64().unwrap_or(0))
    }

    /// Keys under `prefix`, in order, at most `limit`.
    pub async fn range(&self, prefix: &str, limit: usize) -> Result<Vec<KeyValue>> {
        let path = format!("/v1/kv?prefix={}&limit={limit}", segment(prefix));
        let v = self.get_path(&path).await?;
        Ok(v["kvs"]
            .as_array()
            .map(|a| a.iter().map(key_value).collect())
            .unwrap_or_default())
    }

    /// Creates `prefix` + an increasing 20-digit suffix; returns the key.
    pub async fn create_sequential(
        &self,
        prefix: &str,
        value: &str,
        lease: Option<u64>,
    ) -> Result<String> {
        let body = json!({"value": value, "lease_id": lease});
        let v = self
            .call(
                Method::POST,
                &format!("/v1/kv/{}", key_path(prefix)),
                Some(&body),
                Call::WRITE,
            )
            .await?;
        Ok(v["key"].as_str().unwrap_or_default().to_owned())
    }

    /// An etcd-style transaction in the API's JSON shape (see docs/api.md); returns the
    /// answer (`succeeded`, `results`, `revision`).
    pub async fn txn(&self, txn: &Value) -> Result<Value> {
        self.post("/v1/txn", txn, Call::WRITE).await
    }
}
