//! The shutdown signal every long-running subcommand (`run`, `api-manager`, `simulate`) waits on.

/// Resolves on SIGTERM (what `kill` and Kubernetes send) or Ctrl-C. If a handler cannot be
/// installed, that signal is simply never seen; the other still works.
pub async fn shutdown() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { () = ctrl_c => {}, () = term => {} }
}
