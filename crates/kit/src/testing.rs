//! Helpers for tests, of the kit and of the crates that use it (feature `testing`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use kube::Resource;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A one-shot HTTP server answering `response` (a full HTTP/1.1 response) to the first
/// request; returns its URL and the request head it received.
pub async fn answer_once(response: &'static str) -> (String, tokio::task::JoinHandle<String>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut head = Vec::new();
        let mut buf = [0u8; 4096];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = s.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            head.extend_from_slice(&buf[..n]);
        }
        s.write_all(response.as_bytes()).await.unwrap();
        let _ = s.shutdown().await;
        String::from_utf8_lossy(&head).to_lowercase()
    });
    (url, task)
}

/// A metadata-only object from JSON metadata, for tests of watch mappers.
pub fn partial_meta<K: Resource<DynamicType = ()>>(metadata: serde_json::Value) -> kube::core::PartialObjectMeta<K> {
    kube::core::PartialObjectMeta {
        types: None,
        metadata: serde_json::from_value(metadata).unwrap(),
        _phantom: std::marker::PhantomData,
    }
}
