//! Listen addresses as users write them: `HOST:PORT`, or `:PORT` for every interface (the
//! controller-runtime and Go `net.Listen` form, which a Deployment may carry).

/// `addr` with an empty host meaning all interfaces (`:8080` → `0.0.0.0:8080`).
pub fn listen_addr(addr: &str) -> String {
    match addr.strip_prefix(':') {
        Some(port) => format!("0.0.0.0:{port}"),
        None => addr.to_string(),
    }
}

/// Binds `addr` (see [`listen_addr`]).
pub async fn bind(addr: &str) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(listen_addr(addr)).await
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_host_means_every_interface() {
        assert_eq!(listen_addr(":8080"), "0.0.0.0:8080");
        assert_eq!(listen_addr("127.0.0.1:8080"), "127.0.0.1:8080");
        assert_eq!(listen_addr("[::1]:8080"), "[::1]:8080");
    }

    #[tokio::test]
    async fn a_port_alone_binds() {
        let l = bind(":0").await.unwrap();
        assert!(l.local_addr().unwrap().ip().is_unspecified());
    }
}
