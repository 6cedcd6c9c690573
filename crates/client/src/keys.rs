//! Keys: get, put, compare-and-set, delete, range, sequential create, txn.

use crate::client::{Call, Client, key_path};
use crate::error::{Error, Result};
use baton_wire::paths;
use baton_wire::{
    DeleteParams, DeleteResponse, KeyResponse, KeyValue, PutRequest, PutResponse, RangeParams,
    RangeResponse, SequentialRequest, TxnRequest, TxnResponse,
};
use reqwest::Method;

impl Client {
    /// A key, or `None`.
    pub async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        match self
            .get_json::<KeyResponse>(&paths::fill(paths::KV_KEY, &key_path(key)))
            .await
        {
            Ok(v) => Ok(Some(v.kv)),
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
        let body = PutRequest {
            value: value.to_owned(),
            lease_id: lease,
            prev_revision,
        };
        let answer: PutResponse = self
            .call(
                Method::PUT,
                &paths::fill(paths::KV_KEY, &key_path(key)),
                Some(&body),
                Call::WRITE,
            )
            .await?;
        Ok(answer.revision)
    }

    /// Compare-and-set on `mod_revision`.
    pub async fn cas(&self, key: &str, value: &str, prev_revision: u64) -> Result<u64> {
        self.put_with(key, value, None, Some(prev_revision)).await
    }

    /// Deletes a key; `Error::KeyNotFound` if it did not exist.
    pub async fn delete(&self, key: &str) -> Result<u64> {
        self.delete_if(key, None).await
    }

    /// Deletes a key if its `mod_revision` is `prev_revision` (`Error::CasFailed`
    /// otherwise); any revision when `None`. Returns the revision of the delete.
    pub async fn delete_if(&self, key: &str, prev_revision: Option<u64>) -> Result<u64> {
        let query = query_string(&DeleteParams { prev_revision });
        let answer: DeleteResponse = self
            .delete_path(&format!(
                "{}{query}",
                paths::fill(paths::KV_KEY, &key_path(key))
            ))
            .await?;
        Ok(answer.revision)
    }

    /// Keys under `prefix`, in order, at most `limit`.
    pub async fn range(&self, prefix: &str, limit: usize) -> Result<Vec<KeyValue>> {
        let params = RangeParams {
            prefix: prefix.to_owned(),
            limit: Some(limit),
            ..RangeParams::default()
        };
        let answer: RangeResponse = self
            .get_json(&format!("{}{}", paths::KV, query_string(&params)))
            .await?;
        Ok(answer.kvs)
    }

    /// Creates `prefix` + an increasing 20-digit suffix; returns the key.
    pub async fn create_sequential(
        &self,
        prefix: &str,
        value: &str,
        lease: Option<u64>,
    ) -> Result<String> {
        let body = SequentialRequest {
            value: value.to_owned(),
            lease_id: lease,
        };
        let answer: PutResponse = self
            .post(
                &paths::fill(paths::KV_KEY, &key_path(prefix)),
                &body,
                Call::WRITE,
            )
            .await?;
        Ok(answer.key)
    }

    /// An etcd-style transaction: compares, then the success or failure operations, in one
    /// revision.
    pub async fn txn(&self, txn: &TxnRequest) -> Result<TxnResponse> {
        self.post(paths::TXN, txn, Call::WRITE).await
    }
}

/// `?a=1&b=2` for a query type of the contract (empty when it has no field set).
pub(crate) fn query_string(params: &impl serde::Serialize) -> String {
    let encoded = match serde_json::to_value(params) {
        Ok(serde_json::Value::Object(map)) => map
            .into_iter()
            .filter_map(|(k, v)| {
                let v = match v {
                    serde_json::Value::String(s) => s,
                    serde_json::Value::Null => return None,
                    other => other.to_string(),
                };
                Some(format!("{k}={}", crate::client::segment(&v)))
            })
            .collect::<Vec<_>>(),
        _ => Vec::new(),
    };
    if encoded.is_empty() {
        String::new()
    } else {
        format!("?{}", encoded.join("&"))
    }
}
